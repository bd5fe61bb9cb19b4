package dlocktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// The double keeps a name released before its min hold busy, held by
// nobody, until grant + min hold on its clock, and then hands it to the
// first waiter; after the min hold a release is plain.
func TestMinHold(t *testing.T) {
	l, clock := manual(t)
	lk := mustTry(t, l, "job", dlock.WithTTL(time.Second), dlock.WithMinHold(30*time.Second))
	clock.Advance(time.Second)
	if err := lk.Release(bg); err != nil {
		t.Fatal(err)
	}
	if c := context.Cause(lk.Context()); !errors.Is(c, dlock.ErrReleased) {
		t.Fatalf("cause %v, want ErrReleased", c)
	}
	if err := lk.Refresh(bg, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Refresh after release: %v", err)
	}
	if l.Held("job") {
		t.Fatal("Held: the kept name has no holder")
	}
	_, err := l.TryAcquire(bg, "job")
	var busy *dlock.NotObtainedError
	if !errors.As(err, &busy) || busy.HolderTTL != 29*time.Second {
		t.Fatalf("during the min hold: %v, want busy with 29s left", err)
	}
	got := make(chan dlock.Lock, 1)
	go func() {
		w, err := l.Acquire(bg, "job", dlock.WithWait(time.Minute))
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	for l.Waiters("job") == 0 {
		time.Sleep(time.Millisecond)
	}
	clock.Advance(29*time.Second - time.Millisecond)
	select {
	case <-got:
		t.Fatal("waiter handed the lock before the min hold ended")
	case <-time.After(20 * time.Millisecond):
	}
	clock.Advance(time.Millisecond)
	w := <-got
	if w == nil {
		t.FailNow()
	}
	// Min hold passed: a plain release.
	clock.Advance(31 * time.Second)
	if err := w.Release(bg); err != nil {
		t.Fatal(err)
	}
	mustTry(t, l, "job")
}

// A lease that runs out (renewal off) before the min hold keeps the name
// busy until then, as the Client's first lease of at least the min hold does.
func TestMinHoldLeaseRunsOut(t *testing.T) {
	l, clock := manual(t)
	lk := mustTry(t, l, "crash", dlock.WithTTL(time.Second), dlock.WithoutRenewal(), dlock.WithMinHold(10*time.Second))
	clock.Advance(time.Second)
	if c := context.Cause(lk.Context()); !errors.Is(c, dlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", c)
	}
	if _, err := l.TryAcquire(bg, "crash"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("after the lease, before the min hold: %v, want busy", err)
	}
	clock.Advance(9 * time.Second)
	mustTry(t, l, "crash")
}
