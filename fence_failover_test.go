package dlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestFenceGrowsAfterFailover: a failover does not hand out the same fence
// twice. The fence INCR replicates asynchronously, and a promoted replica
// that missed it would issue the same number again: a resource that refuses
// fences smaller than the largest it has seen would accept both writers.
//
// The write is lost on purpose as TESTING-NOTES describes: stop the replica,
// cut its link on the primary, grant the lock on the primary (B), kill the
// primary, continue the replica and promote it. The holder the promoted
// replica grants the lock to (C) must get a fence above B's, so that B's
// stale writes are refused once C has written.
func TestFenceGrowsAfterFailover(t *testing.T) {
	const name = "failover"
	fenceKey := "dlock:{" + name + "}:fence"

	// No diskless-sync delay: the replica's first sync would wait 5 s.
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.Start(t)
	prdb, rrdb := primary.Client(t), replica.Client(t)
	// SIGKILL ends a stopped process too, but a test that fails while the
	// replica is stopped should not leave it so for the other cleanups.
	t.Cleanup(replica.Resume)

	if err := rrdb.Do(bg, "REPLICAOF", "127.0.0.1", strconv.Itoa(primary.Port)).Err(); err != nil {
		t.Fatalf("REPLICAOF: %v", err)
	}
	awaitStep(t, 10*time.Second, "replica link up", func() string {
		if f := replInfo(rrdb, "master_link_status"); f != "up" {
			return "master_link_status=" + f
		}
		return ""
	})

	// A: first grant on the primary, released, and replicated.
	a := newLocker(t, prdb)
	la := mustAcquire(t, a, name, dlock.WithTTL(5*time.Second))
	f1 := la.Fence()
	if err := la.Release(bg); err != nil {
		t.Fatalf("A: Release: %v", err)
	}
	if n, err := prdb.Do(bg, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 after A's grant: %d replicas acknowledged, %v", n, err)
	}
	awaitStep(t, 10*time.Second, "A's fence on the replica", func() string {
		if got := fenceCounter(t, rrdb, fenceKey); got != f1 {
			return "replica's counter " + strconv.FormatInt(got, 10) + ", want " + strconv.FormatInt(f1, 10)
		}
		return ""
	})

	// Lose the next grant: stop the replica, cut its link, then grant.
	replica.Pause()
	if err := prdb.Do(bg, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE replica: %v", err)
	}
	awaitStep(t, 10*time.Second, "primary without replicas", func() string {
		if n := replInfo(prdb, "connected_slaves"); n != "0" {
			return "connected_slaves=" + n
		}
		return ""
	})
	// B's client gives up quickly on the primary it cannot reach at Close.
	b := newLocker(t, primary.Client(t), dlock.WithReleaseTimeout(500*time.Millisecond))
	lb := mustAcquire(t, b, name, dlock.WithTTL(5*time.Second), dlock.WithoutRenewal())
	f2 := lb.Fence()
	if f2 <= f1 {
		t.Fatalf("B's fence %d not above A's %d on the same primary", f2, f1)
	}
	primary.Kill()
	replica.Resume()

	// Promote the replica, as a failover would.
	awaitStep(t, 10*time.Second, "REPLICAOF NO ONE", func() string {
		if err := rrdb.Do(bg, "REPLICAOF", "NO", "ONE").Err(); err != nil {
			return err.Error()
		}
		if r := replInfo(rrdb, "role"); r != "master" {
			return "role=" + r
		}
		return ""
	})
	// The fault must have lost B's grant, or the test proves nothing.
	if got := fenceCounter(t, rrdb, fenceKey); got >= f2 {
		t.Fatalf("setup: the promoted replica has counter %d, B's fence is %d: B's grant was not lost", got, f2)
	}
	if n := rrdb.Exists(bg, "dlock:{"+name+"}").Val(); n != 0 {
		t.Fatalf("setup: the promoted replica holds B's lock key: B's grant was not lost")
	}

	c := newLocker(t, rrdb)
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	lc, err := c.TryAcquire(ctx, name, dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("C on the promoted replica: %v", err)
	}
	f3 := lc.Fence()
	t.Logf("fences: A %d (replicated), B %d (lost in the failover), C %d (promoted replica)", f1, f2, f3)
	if f3 <= f2 {
		t.Fatalf("C's fence %d is not above B's %d (A's was %d): a resource refusing fences below the largest seen accepts B's stale write after C's", f3, f2, f1)
	}
	if err := lc.Release(bg); err != nil {
		t.Fatalf("C: Release: %v", err)
	}
}

// TestFenceGrowsAfterCounterLost: the fence counter key disappears between
// two acquisitions (deleted by hand, or expired after someone put a TTL on
// it); the next fence must still be larger.
func TestFenceGrowsAfterCounterLost(t *testing.T) {
	c, rdb, _ := setup(t)
	for _, how := range []string{"deleted", "expired"} {
		t.Run(how, func(t *testing.T) {
			name := "counter-" + how
			fenceKey := "dlock:{" + name + "}:fence"
			var last int64
			for i := range 3 {
				l := mustAcquire(t, c, name, dlock.WithTTL(2*time.Second))
				last = l.Fence()
				if err := l.Release(bg); err != nil {
					t.Fatalf("acquisition %d: Release: %v", i, err)
				}
			}
			if how == "deleted" {
				if n := rdb.Del(bg, fenceKey).Val(); n != 1 {
					t.Fatalf("DEL %s removed %d keys, want 1", fenceKey, n)
				}
			} else {
				rdb.PExpire(bg, fenceKey, time.Millisecond)
				waitGone(t, rdb, fenceKey)
			}
			l := mustAcquire(t, c, name, dlock.WithTTL(2*time.Second))
			t.Logf("fence before the counter was %s: %d, after: %d", how, last, l.Fence())
			if l.Fence() <= last {
				t.Fatalf("fence after the counter was %s: %d, not above %d from before", how, l.Fence(), last)
			}
			if err := l.Release(bg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// fenceCounter reads a fence counter; 0 when it is missing.
func fenceCounter(t *testing.T, rdb *redis.Client, key string) int64 {
	t.Helper()
	v, err := rdb.Get(bg, key).Int64()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

// replInfo returns one field of INFO replication, or "" if it cannot be read.
func replInfo(rdb *redis.Client, field string) string {
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// waitUntil polls step every 20 ms until it returns "" or limit has passed;
// then it fails with the last thing step reported.
func awaitStep(t *testing.T, limit time.Duration, what string, step func() string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		seen := step()
		if seen == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", limit, what, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
