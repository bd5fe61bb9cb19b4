package dlock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func startNodes(t *testing.T, n int) ([]*redistest.Server, []redis.UniversalClient) {
	t.Helper()
	var srvs []*redistest.Server
	var rdbs []redis.UniversalClient
	for range n {
		s := redistest.Start(t)
		srvs = append(srvs, s)
		// No retries: a dead node must fail fast, not after go-redis' backoff.
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		rdbs = append(rdbs, rdb)
	}
	return srvs, rdbs
}

func newRedlock(t *testing.T, rdbs []redis.UniversalClient) *dlock.Redlock {
	t.Helper()
	r, err := dlock.NewRedlock(rdbs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(bg) })
	return r
}

func TestRedlockToleratesMinorityDown(t *testing.T) {
	srvs, rdbs := startNodes(t, 5)
	r := newRedlock(t, rdbs)
	srvs[4].Kill()
	m, err := r.TryAcquire(bg, "rl", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatalf("1 of 5 nodes down: %v", err)
	}
	granted := func() int {
		n := 0
		for _, f := range m.Fences() {
			if f > 0 {
				n++
			}
		}
		return n
	}
	// A quorum at once; the fourth live node joins when its answer comes.
	waitFor(t, "4 live nodes in the lock", func() bool { return granted() == 4 })
	if fences := m.Fences(); fences[4] != 0 || m.Fence() <= 0 {
		t.Fatalf("fences %v", fences)
	}
	time.Sleep(time.Second) // renewed on the live nodes past three TTLs
	if left, err := m.TTL(bg); err != nil || left <= 0 || m.Context().Err() != nil {
		t.Fatalf("renewed Redlock lock: %v, %v, %v", left, err, context.Cause(m.Context()))
	}
	if err := m.Release(bg); err != nil {
		t.Fatal(err)
	}
	for i, rdb := range rdbs[:4] {
		if rdb.Exists(bg, "dlock:{rl}").Val() != 0 {
			t.Fatalf("node %d still holds the lock after Release", i)
		}
	}
	if err := m.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Release: %v", err)
	}
	if cause := context.Cause(m.Context()); !errors.Is(cause, dlock.ErrReleased) {
		t.Fatalf("cause %v", cause)
	}
}

func TestRedlockFailsFastWithoutQuorum(t *testing.T) {
	srvs, rdbs := startNodes(t, 5)
	r := newRedlock(t, rdbs)
	for _, s := range srvs[:3] {
		s.Kill()
	}
	start := time.Now()
	_, err := r.Acquire(bg, "rl", dlock.WithWait(10*time.Second))
	if !errors.Is(err, dlock.ErrNoQuorum) {
		t.Fatalf("3 of 5 down: %v, want ErrNoQuorum", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v to see that no quorum is possible; the wait limit was 10s", d)
	}
	for i, rdb := range rdbs[3:] {
		if rdb.Exists(bg, "dlock:{rl}").Val() != 0 {
			t.Fatalf("live node %d keeps a lock of a failed acquisition", i+3)
		}
	}
}

func TestRedlockNodeRestartedEmpty(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs)
	a, err := r.TryAcquire(bg, "rl", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all 3 nodes in the lock", func() bool { return !slices.Contains(a.Fences(), 0) })
	if err := srvs[0].Restart(bg); err != nil {
		t.Fatal(err)
	}
	other := newRedlock(t, rdbs)
	if _, err := other.TryAcquire(bg, "rl"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("second holder while the quorum holds: %v", err)
	}
	// The attempt on the restarted node may answer after the verdict: its
	// grant is then released in the background.
	waitFor(t, "the failed attempt's lock on the restarted node to be released", func() bool {
		return rdbs[0].Exists(bg, "dlock:{rl}").Val() == 0
	})
	if err := a.Release(bg); err != nil {
		t.Fatalf("first holder's release (2 of 3 nodes): %v", err)
	}
}
