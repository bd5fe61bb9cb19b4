package dlock_test

// WithMaxHold: no lease of a lock reaches past its hold limit, neither the
// first one nor a renewal's nor a Refresh's, and the lock's context ends at
// the limit with ErrHoldLimit.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

func TestMaxHold(t *testing.T) {
	c, rdb, _ := setup(t)
	start := time.Now()
	l := mustAcquire(t, c, "hold", dlock.WithTTL(300*time.Millisecond), dlock.WithMaxHold(900*time.Millisecond))
	select {
	case <-l.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("hold limit never ended the lock")
	}
	held := time.Since(start)
	cause := context.Cause(l.Context())
	if !errors.Is(cause, dlock.ErrHoldLimit) || !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrHoldLimit and ErrLockLost", cause)
	}
	// Renewed past one TTL, ended by the limit.
	if held < 600*time.Millisecond {
		t.Fatalf("ended after %v: renewal did not run up to the 900ms limit", held)
	}
	waitGone(t, rdb, "dlock:{hold}")
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("key outlived the 900ms hold limit: gone after %v", d)
	}
}

// TestMaxHoldBelowTTLEndsAtLimit: WithMaxHold shorter than the TTL. The first
// lease, too, is cut at the hold limit, as renewals and Refresh are, so the
// lock's context ends at the limit, as documented, not after the whole TTL.
func TestMaxHoldBelowTTLEndsAtLimit(t *testing.T) {
	c, rdb, _ := setup(t)
	l, err := c.Acquire(bg, "shorthold", dlock.WithTTL(2*time.Second), dlock.WithMaxHold(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	select {
	case <-l.Context().Done():
	case <-time.After(time.Second):
		t.Fatalf("WithMaxHold(200ms): context still alive after 1s, Redis lease %v", rdb.PTTL(bg, "dlock:{shorthold}").Val())
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrHoldLimit) || !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost and ErrHoldLimit", cause)
	}
}

// TestMaxHoldBoundsRefresh: a Refresh asks for more than the hold limit
// leaves; the lease is cut at the limit, as a renewal's is.
func TestMaxHoldBoundsRefresh(t *testing.T) {
	c, rdb, _ := setup(t)
	l := mustAcquire(t, c, "hold-refresh", dlock.WithTTL(300*time.Millisecond), dlock.WithMaxHold(600*time.Millisecond))
	if err := l.Refresh(bg, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if left := rdb.PTTL(bg, "dlock:{hold-refresh}").Val(); left > 600*time.Millisecond {
		t.Fatalf("Refresh leased %v in Redis, beyond the 600ms hold limit", left)
	}
	select {
	case <-l.Context().Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the hold limit never ended the lock after a Refresh")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrHoldLimit) {
		t.Fatalf("cause = %v, want ErrHoldLimit", cause)
	}
}

// A Refresh that asked for a lease past the hold limit and failed does not
// make the next ordinary renewal the last one: the lock stays held (and
// renewed) up to its hold limit, not lost seconds early with a false
// ErrHoldLimit.
func TestFailedRefreshPastHoldLimitKeepsRenewal(t *testing.T) {
	c, _, _ := setup(t)
	const ttl = 600 * time.Millisecond
	l := mustAcquire(t, c, "hold", dlock.WithTTL(ttl), dlock.WithMaxHold(10*time.Second))
	start := time.Now()
	ended, cancel := context.WithCancel(bg)
	cancel() // the refresh fails before it reaches Redis (any error does)
	if err := l.Refresh(ended, 30*time.Second); err == nil {
		t.Fatal("a Refresh on a cancelled context succeeded")
	}
	select {
	case <-l.Context().Done():
		t.Fatalf("lock lost %v after acquisition, hold limit 10s, TTL %v; cause: %v",
			time.Since(start).Round(time.Millisecond), ttl, context.Cause(l.Context()))
	case <-time.After(5 * ttl):
	}
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
}
