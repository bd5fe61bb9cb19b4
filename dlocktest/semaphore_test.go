package dlocktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// On the manual clock: each permit's lease ends on its own, the freed permit
// goes to the waiter in line, Expire ends the oldest permit, and a semaphore
// and an exclusive lock of one name exclude each other as the Client's do.
func TestSemaphoreOnTheClock(t *testing.T) {
	l, clock := manual(t)
	a := mustTry(t, l, "pool", dlock.WithPermits(2), dlock.WithTTL(time.Second), dlock.WithoutRenewal())
	b := mustTry(t, l, "pool", dlock.WithPermits(2), dlock.WithTTL(time.Minute))
	if got := l.Permits("pool"); len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("Permits = %v", got)
	}
	done := make(chan dlock.Lock, 1)
	go func() {
		lk, err := l.Acquire(bg, "pool", dlock.WithPermits(2), dlock.WithTTL(time.Minute), dlock.WithWait(time.Hour))
		if err != nil {
			t.Error(err)
		}
		done <- lk
	}()
	for l.Waiters("pool") != 1 {
		time.Sleep(time.Millisecond)
	}
	clock.Advance(time.Second) // a's lease ends; its permit goes to the waiter
	c := <-done
	if !errors.Is(context.Cause(a.Context()), dlock.ErrLockLost) || c == nil || c.Fence() <= b.Fence() {
		t.Fatalf("after a's lease: a's cause %v, waiter got %v", context.Cause(a.Context()), c)
	}
	if !l.Expire("pool") || b.Context().Err() == nil {
		t.Fatal("Expire did not end the oldest permit")
	}
	if got := l.Permits("pool"); len(got) != 1 || got[0] != c {
		t.Fatalf("Permits after Expire = %v", got)
	}
	// One kind at a time, both ways, as the Client.
	if _, err := l.TryAcquire(bg, "pool"); !errors.Is(err, dlock.ErrMismatch) {
		t.Fatalf("an exclusive lock while a permit is held: %v", err)
	}
	_ = c.Release(bg)
	x := mustTry(t, l, "pool")
	if _, err := l.TryAcquire(bg, "pool", dlock.WithPermits(2)); !errors.Is(err, dlock.ErrMismatch) {
		t.Fatalf("a permit while the exclusive lock is held: %v", err)
	}
	_ = x.Release(bg)
	if l.Held("pool") || len(l.Permits("pool")) != 0 {
		t.Fatal("something still held")
	}
}
