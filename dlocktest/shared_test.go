package dlocktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// got returns the lock of a waiter that must have been decided already
// (its goroutine may take a moment to report it).
func got(t *testing.T, what string, ch <-chan acquiredLock) dlock.Lock {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.lock
	case <-time.After(time.Second):
		t.Fatalf("%s: still waiting", what)
		return nil
	}
}

// stillWaiting checks that a waiter has no outcome: given 20ms to report
// one, which a decided waiter would use.
func stillWaiting(t *testing.T, what string, ch <-chan acquiredLock) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: got %v, %v; want it still waiting", what, r.lock, r.err)
	case <-time.After(20 * time.Millisecond):
	}
}

// A release hands the name to every reader in line up to the next writer;
// the readers' release to that writer; its release to the readers after it.
func TestSharedBatchInArrivalOrder(t *testing.T) {
	l, _ := manual(t)
	long := dlock.WithWait(time.Hour)
	w := mustTry(t, l, "b")
	r1 := waiting(t, l, bg, "b", dlock.WithShared(), long)
	r2 := waiting(t, l, bg, "b", dlock.WithShared(), long)
	w2 := waiting(t, l, bg, "b", long)
	r3 := waiting(t, l, bg, "b", dlock.WithShared(), long)
	if err := w.Release(bg); err != nil {
		t.Fatal(err)
	}
	a, b := got(t, "first reader", r1), got(t, "second reader", r2)
	if a.Fence() <= w.Fence() || b.Fence() <= a.Fence() {
		t.Fatalf("fences %d, then readers %d, %d", w.Fence(), a.Fence(), b.Fence())
	}
	stillWaiting(t, "writer behind the readers", w2)
	stillWaiting(t, "reader behind the writer", r3)
	_ = a.Release(bg)
	stillWaiting(t, "writer while a reader holds", w2)
	_ = b.Release(bg)
	x := got(t, "writer after the readers", w2)
	stillWaiting(t, "reader behind the writer", r3)
	_ = x.Release(bg)
	_ = got(t, "reader after the writer", r3).Release(bg)
}

// A reader held back by a waiting writer joins the readers when that writer
// gives up.
func TestSharedReaderAdmittedWhenWriterGivesUp(t *testing.T) {
	l, _ := manual(t)
	r := mustTry(t, l, "g", dlock.WithShared())
	wctx, cancel := context.WithCancel(bg)
	w := waiting(t, l, wctx, "g", dlock.WithWait(time.Hour))
	r2 := waiting(t, l, bg, "g", dlock.WithShared(), dlock.WithWait(time.Hour))
	stillWaiting(t, "reader behind a waiting writer", r2)
	cancel()
	if res := <-w; res.err == nil {
		t.Fatal("cancelled writer got the lock")
	}
	_ = got(t, "reader once the writer gave up", r2).Release(bg)
	_ = r.Release(bg)
}

// A reader that is not renewed ends on the clock; the writer gets in then,
// not before.
func TestSharedReaderExpiresOnTheClock(t *testing.T) {
	l, clock := manual(t)
	r := mustTry(t, l, "e", dlock.WithShared(), dlock.WithTTL(time.Second), dlock.WithoutRenewal())
	w := waiting(t, l, bg, "e", dlock.WithWait(time.Hour))
	clock.Advance(999 * time.Millisecond)
	stillWaiting(t, "writer during the reader's lease", w)
	clock.Advance(time.Millisecond)
	_ = got(t, "writer after the reader's lease", w).Release(bg)
	if r.Context().Err() == nil {
		t.Fatal("the expired reader's context is live")
	}
}
