package dlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestContextOfLeaseOverIsEndedAtOnce: a holder whose process stopped
// (SIGSTOP, a VM freeze) after Acquire returned, and ran again past its
// lease deadline, must find the lock's context ended when it first asks for
// it, not when the deadline timer's goroutine next gets to run. Torture
// (TestSemaphoreScenario, in CI) saw a worker stopped right after Acquire
// returned a permit: it ran again 780 ms later, past the 500 ms lease,
// asked for the context, found it alive and did its work while three
// others held the three permits. Here the timer is held back, as the
// scheduler held it back there.
func TestContextOfLeaseOverIsEndedAtOnce(t *testing.T) {
	c := standaloneClient(t)
	// Without renewal (pausedLock): a renewal would move the deadline, as
	// it should.
	for _, opts := range [][]AcquireOption{nil, {WithPermits(3)}} {
		const ttl = 300 * time.Millisecond
		l := pausedLock(t, c, "paused", ttl, opts...)
		ctx := l.Context()
		if !errors.Is(context.Cause(ctx), ErrLockLost) {
			t.Fatalf("context asked for %v after Acquire, past its lease: cause %v, want ErrLockLost", ttl, context.Cause(ctx))
		}
		if err := l.Release(context.Background()); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Release after the lease ran out: %v, want ErrNotHeld", err)
		}
	}
}

// TestMultiLockContextOfLeaseOverIsEndedAtOnce: the same for a MultiLock,
// whose context ends with its first member's: asked for past a member's
// lease, it is ended at once, not when that member's AfterFunc runs.
func TestMultiLockContextOfLeaseOverIsEndedAtOnce(t *testing.T) {
	c := standaloneClient(t)
	const ttl = 300 * time.Millisecond
	m, err := AcquireAll(context.Background(), c, []string{"pa", "pb"}, WithTTL(ttl), WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range m.locks {
		l.(*redisLock).life.Disarm() // the timers have not run yet
	}
	time.Sleep(ttl)
	if cause := context.Cause(m.Context()); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("MultiLock context asked for past its lease: cause %v, want ErrLockLost", cause)
	}
}

// TestRunFnContextOfLeaseOverIsEndedAtOnce: the same for the context Run
// (and so Do, dlockhttp, dlockgrpc) gives fn. Made from l.Context() of a lock
// whose lease is over, it has ended when fn starts its work, not only once
// context.AfterFunc's goroutine gets to cancel it.
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

// TestReentrantContextOfLeaseOverIsEndedAtOnce: the same for a lock taken
// WithReentry, a handle whose Context() returns a context made at Acquire:
// asked for past the lease, it has ended at once too.
func TestReentrantContextOfLeaseOverIsEndedAtOnce(t *testing.T) {
	c := standaloneClient(t)
	l := pausedLock(t, c, "reentrant-paused", 50*time.Millisecond, WithReentry())
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("WithReentry handle's context asked for past its lease: cause %v, want ErrLockLost", cause)
	}
}

// standaloneClient is a Client on a fresh redis-server, closed at the end
// of the test.
func standaloneClient(t *testing.T) *Client {
	t.Helper()
	c, err := New(redistest.Start(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

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
	inner.(*redisLock).life.Disarm()
	time.Sleep(ttl)
	return l
}
