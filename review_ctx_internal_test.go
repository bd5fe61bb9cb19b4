package dlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Review of 364b583: Context() looks at the deadline itself, but two ways in
// which the holder receives the lock's context still hand it out alive past
// the deadline, until a goroutine runs.

// pausedLock acquires name WithoutRenewal, holds back its deadline timer and
// waits out the lease: the state a holder stopped right after Acquire
// returned wakes up to, as in TestContextOfLeaseOverIsEndedAtOnce.
func pausedLock(t *testing.T, c *Client, name string, ttl time.Duration, opts ...AcquireOption) Lock {
	t.Helper()
	l, err := c.TryAcquire(context.Background(), name, append(opts, WithTTL(ttl), WithoutRenewal())...)
	if err != nil {
		t.Fatal(err)
	}
	inner := l
	if h, ok := l.(*reentrantLock); ok {
		inner = h.r.lock
	}
	inner.(*redisLock).deadline.Stop()
	time.Sleep(ttl)
	return l
}

// TestRunFnContextOfLeaseOverIsEndedAtOnce: Run (and so Do, dlockhttp,
// dlockgrpc) asks for l.Context(), which is now ended, but gives fn a
// context that context.AfterFunc cancels from a goroutine of its own: fn
// starts its work with a live context.
func TestRunFnContextOfLeaseOverIsEndedAtOnce(t *testing.T) {
	c := standaloneClient(t)
	const ttl, rounds = 50 * time.Millisecond, 10
	alive := 0
	for i := range rounds {
		l := pausedLock(t, c, fmt.Sprintf("run-paused-%d", i), ttl)
		_ = Run(context.Background(), l, func(ctx context.Context) error {
			if ctx.Err() == nil {
				alive++
			}
			return nil
		})
	}
	if alive > 0 {
		t.Fatalf("fn found its context alive in %d of %d runs on a lock whose lease was over (l.Context() already ended)", alive, rounds)
	}
}

// TestReentrantContextOfLeaseOverIsEndedAtOnce: a lock taken WithReentry is
// a handle whose Context() returns the context made at Acquire, without
// looking at the deadline.
func TestReentrantContextOfLeaseOverIsEndedAtOnce(t *testing.T) {
	c := standaloneClient(t)
	l := pausedLock(t, c, "reentrant-paused", 50*time.Millisecond, WithReentry())
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("WithReentry handle's context asked for past its lease: cause %v, want ErrLockLost", cause)
	}
}
