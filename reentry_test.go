package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// A last release that fails (Redis unreachable) leaves the lock held, and
// the handle may release again, as a plain lock may: a spent handle would
// leave the key to block everyone until its TTL.
func TestReentrantReleaseRetried(t *testing.T) {
	_, rdb, srv := setup(t)
	prdb, proxy := proxied(t, srv, redis.Options{MaxRetries: -1})
	c := newLocker(t, prdb, dlock.WithReleaseTimeout(200*time.Millisecond))
	h, err := c.TryAcquire(bg, "re:retry", dlock.WithReentry(), dlock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	err = h.Release(bg)
	proxy.Reset()
	proxy.Pass()
	if err == nil || errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("release through a blackhole: %v, want a Redis error", err)
	}
	if cause := context.Cause(h.Context()); cause != nil {
		t.Fatalf("the handle's context ended (%v) though its release failed", cause)
	}
	if err := h.Release(bg); err != nil {
		t.Fatalf("retried release: %v", err)
	}
	if n := rdb.Exists(bg, "dlock:{re:retry}").Val(); n != 0 {
		t.Fatalf("the lock is still in Redis after the retried release")
	}
}
