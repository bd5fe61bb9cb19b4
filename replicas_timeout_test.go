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

// startReplicated starts a primary with one replica in sync.
func startReplicated(t *testing.T) (primary, replica *redistest.Server) {
	t.Helper()
	primary = redistest.Start(t)
	replica = redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	waitFor(t, "replica in sync", func() bool {
		return strings.Contains(replica.Client(t).Info(bg, "replication").Val(), "master_link_status:up")
	})
	return primary, replica
}

// A replica wait as long as the client's read timeout cannot end in Redis'
// own answer: go-redis gives up reading first, re-sends the script and WAIT,
// and reports an i/o timeout long after the wait asked for. Issue 17 saw 20 s
// with WithReplicas(1, 7s) under the default read timeout. It is refused
// before anything is sent, naming both values.
func TestWithReplicasWaitNotBelowReadTimeout(t *testing.T) {
	primary, replica := startReplicated(t)
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr, ReadTimeout: 400 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newLocker(t, rdb)

	replica.Pause() // the case that hurts: no acknowledgement comes
	defer replica.Resume()
	for _, wait := range []time.Duration{400 * time.Millisecond, time.Second} {
		start := time.Now()
		_, err := c.Acquire(bg, "rt", dlock.WithReplicas(1, wait), dlock.WithTTL(10*time.Second))
		took := time.Since(start)
		if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), wait.String()) || !strings.Contains(err.Error(), "read timeout 400ms") {
			t.Fatalf("WithReplicas(1, %v) under a 400ms read timeout: %v after %v; want ErrInvalidOption naming both", wait, err, took)
		}
		if n := rdb.Exists(bg, "dlock:{rt}").Val(); n != 0 {
			t.Fatalf("WithReplicas(1, %v) refused but the lock is in Redis", wait)
		}
	}
	// Below the read timeout, Redis answers first: too few, released.
	_, err := c.Acquire(bg, "rt", dlock.WithReplicas(1, 200*time.Millisecond), dlock.WithTTL(10*time.Second))
	if !errors.Is(err, dlock.ErrNotReplicated) {
		t.Fatalf("WithReplicas(1, 200ms) under a 400ms read timeout, replica paused: %v, want ErrNotReplicated", err)
	}
	if n := rdb.Exists(bg, "dlock:{rt}").Val(); n != 0 {
		t.Fatal("unacknowledged lock left in Redis")
	}
}

// TestWithReplicasAcceptedWaitEndsInRedisAnswer: Redis answers an
// unacknowledged WAIT only when it sees its timeout pass, which it checks
// between event loop rounds (up to 1000/hz ms apart when idle), and after the
// script and the round trip; so checkReplicaWait leaves room below the read
// timeout (replicaWaitRoom) and refuses a wait too close to it. A wait it
// accepts ends in Redis' own answer (ErrNotReplicated), not in an i/o timeout
// and go-redis' re-sends, which is what the check exists to prevent.
func TestWithReplicasAcceptedWaitEndsInRedisAnswer(t *testing.T) {
	primary, replica := startReplicated(t)
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newLocker(t, rdb)

	replica.Pause()
	defer replica.Resume()
	// Too close to the read timeout: refused before anything is sent.
	for _, wait := range []time.Duration{999 * time.Millisecond, 950 * time.Millisecond} {
		if _, err := c.Acquire(bg, "rt2", dlock.WithReplicas(1, wait)); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("WithReplicas(1, %v) under a 1s read timeout: %v; want it refused (ErrInvalidOption)", wait, err)
		}
	}
	// Accepted: it must end in Redis' own answer.
	wait := 800 * time.Millisecond
	for i := range 3 {
		start := time.Now()
		_, err := c.Acquire(bg, "rt2", dlock.WithReplicas(1, wait), dlock.WithTTL(10*time.Second))
		if !errors.Is(err, dlock.ErrNotReplicated) {
			t.Errorf("WithReplicas(1, %v) under a 1s read timeout, try %d: %v after %v; want ErrNotReplicated",
				wait, i, err, time.Since(start).Round(time.Millisecond))
		}
	}
}

// A pipeline that fails after the script may have run (here the caller's
// deadline ends the read of WAIT) leaves no lock behind: it is released by
// token, not left for its TTL.
func TestWithReplicasFailedWaitReleases(t *testing.T) {
	primary, replica := startReplicated(t)
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newLocker(t, rdb)
	other := newLocker(t, primary.Client(t))

	replica.Pause()
	defer replica.Resume()
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	_, err := c.Acquire(ctx, "fw", dlock.WithReplicas(1, 2*time.Second), dlock.WithTTL(30*time.Second))
	if err == nil || errors.Is(err, dlock.ErrNotReplicated) {
		t.Fatalf("WAIT cut by the caller's deadline: %v, want an error that is not ErrNotReplicated", err)
	}
	// The script ran before WAIT: the lock was granted, and must be given
	// back well before its 30 s TTL.
	deadline := time.Now().Add(3 * time.Second)
	for primary.Client(t).Exists(bg, "dlock:{fw}").Val() != 0 {
		if time.Now().After(deadline) {
			ttl := primary.Client(t).PTTL(bg, "dlock:{fw}").Val()
			t.Fatalf("lock still in Redis 3s after the failed acquisition (PTTL %v): stranded", ttl)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := other.TryAcquire(bg, "fw"); err != nil {
		t.Fatalf("after the give-back: %v", err)
	}
}
