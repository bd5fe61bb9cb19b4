package dlocktest_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

var bg = context.Background()

// start is the manual clocks' first reading.
var start = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// manual returns a Locker on a manual clock, closed at the end of the test.
func manual(t *testing.T, opts ...dlocktest.Option) (*dlocktest.Locker, *dlocktest.ManualClock) {
	t.Helper()
	clock := dlocktest.NewClock(start)
	l, err := dlocktest.New(append([]dlocktest.Option{dlocktest.WithClock(clock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(bg) })
	return l, clock
}

func mustTry(t *testing.T, l dlock.Locker, name string, opts ...dlock.AcquireOption) dlock.Lock {
	t.Helper()
	lk, err := l.TryAcquire(bg, name, opts...)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", name, err)
	}
	return lk
}

func cause(lk dlock.Lock) error { return context.Cause(lk.Context()) }

// waiting starts Acquire in a goroutine and returns once it is in line.
func waiting(t *testing.T, l *dlocktest.Locker, ctx context.Context, name string, opts ...dlock.AcquireOption) <-chan acquiredLock {
	t.Helper()
	n := l.Waiters(name)
	ch := make(chan acquiredLock, 1)
	go func() {
		lk, err := l.Acquire(ctx, name, opts...)
		ch <- acquiredLock{lk, err}
	}()
	for l.Waiters(name) <= n {
		time.Sleep(time.Millisecond)
	}
	return ch
}

type acquiredLock struct {
	lock dlock.Lock
	err  error
}

func TestNewRefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  dlocktest.Option
		want error
		text string
	}{
		{dlocktest.WithClock(nil), dlock.ErrInvalidOption, "WithClock(nil)"},
		{dlocktest.WithTTLBounds(time.Second, time.Millisecond), dlock.ErrInvalidTTL, "[1s, 1ms]"},
		{dlocktest.WithTTLBounds(time.Microsecond, time.Second), dlock.ErrInvalidTTL, "need 1ms"},
		{dlocktest.WithDefaultTTL(48 * time.Hour), dlock.ErrInvalidTTL, "above the maximum 24h0m0s (WithDefaultTTL)"},
		{dlocktest.WithDefaultTTL(0), dlock.ErrInvalidTTL, "not positive (WithDefaultTTL)"},
	} {
		l, err := dlocktest.New(tc.opt)
		var de *dlock.Error
		if l != nil || !errors.Is(err, tc.want) || !errors.As(err, &de) || de.Op != "new" || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("New: %v, %v; want nil and an *Error of op new matching %v naming %q", l, err, tc.want, tc.text)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("MustNew with %v did not panic", err)
				}
			}()
			dlocktest.MustNew(tc.opt)
		}()
	}
}

func TestBoundsAndDefaultTTL(t *testing.T) {
	l, _ := manual(t, dlocktest.WithTTLBounds(time.Second, time.Minute), dlocktest.WithDefaultTTL(30*time.Second))
	if _, err := l.TryAcquire(bg, "x", dlock.WithTTL(500*time.Millisecond)); !errors.Is(err, dlock.ErrInvalidTTL) {
		t.Fatalf("a TTL under the minimum: %v", err)
	}
	lk := mustTry(t, l, "x", dlock.WithoutRenewal())
	if left, err := lk.TTL(bg); left != 30*time.Second || err != nil {
		t.Fatalf("TTL() with the default of 30s = %v, %v", left, err)
	}
	if err := lk.Refresh(bg, 2*time.Minute); !errors.Is(err, dlock.ErrInvalidTTL) {
		t.Fatalf("Refresh above the maximum: %v", err)
	}
}

func TestLeaseWithoutRenewalEndsOnTheClock(t *testing.T) {
	l, clock := manual(t)
	lk := mustTry(t, l, "job", dlock.WithTTL(10*time.Second), dlock.WithoutRenewal())
	clock.Advance(10*time.Second - time.Nanosecond)
	if lk.Context().Err() != nil || !l.Held("job") {
		t.Fatal("the lease ended before its TTL")
	}
	clock.Advance(time.Nanosecond)
	if want := "dlock: lock lost: lease of 10s ran out (renewal off)"; cause(lk) == nil || cause(lk).Error() != want {
		t.Fatalf("cause at the TTL: %v, want %q", cause(lk), want)
	}
	if l.Held("job") {
		t.Fatal("the name is still held after the lease ran out")
	}
}

// A lease that ends halfway through an Advance hands the lock over at that
// instant, and the next lease is measured from there.
func TestAdvanceFiresInOrder(t *testing.T) {
	l, clock := manual(t)
	first := mustTry(t, l, "job", dlock.WithTTL(time.Second), dlock.WithoutRenewal())
	ch := waiting(t, l, bg, "job", dlock.WithTTL(2*time.Second), dlock.WithoutRenewal(), dlock.WithWait(time.Hour))
	clock.Advance(4 * time.Second) // first ends at 1s, the second at 3s
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !errors.Is(cause(first), dlock.ErrLockLost) || !errors.Is(cause(r.lock), dlock.ErrLockLost) || l.Held("job") {
		t.Fatalf("after 4s: first %v, second %v, held %v; want both leases over", cause(first), cause(r.lock), l.Held("job"))
	}

	// Now check the instants: a lease of 2s from 1s is live at 2.9s.
	second := mustTry(t, l, "job2", dlock.WithTTL(time.Second), dlock.WithoutRenewal())
	ch = waiting(t, l, bg, "job2", dlock.WithTTL(2*time.Second), dlock.WithoutRenewal(), dlock.WithWait(time.Hour))
	clock.Advance(2900 * time.Millisecond)
	r = <-ch
	if r.err != nil || r.lock.Context().Err() != nil || second.Context().Err() == nil {
		t.Fatalf("at 2.9s: %v, second lease ended %v", r.err, r.lock.Context().Err())
	}
	if left, _ := r.lock.TTL(bg); left != 100*time.Millisecond {
		t.Fatalf("lease left at 2.9s of a 2s lease handed over at 1s: %v, want 100ms", left)
	}
}

func TestRenewedLeaseReadsLikeTheClients(t *testing.T) {
	l, clock := manual(t)
	lk := mustTry(t, l, "r", dlock.WithTTL(3*time.Second))
	for _, step := range []struct {
		advance time.Duration
		want    time.Duration
	}{{0, 3 * time.Second}, {900 * time.Millisecond, 2100 * time.Millisecond}, {100 * time.Millisecond, 3 * time.Second}, {time.Hour, 3 * time.Second}} {
		clock.Advance(step.advance)
		if left, err := lk.TTL(bg); left != step.want || err != nil {
			t.Fatalf("after %v more: TTL() = %v, %v; want %v (renewed every 1s)", step.advance, left, err, step.want)
		}
	}
	if lk.Context().Err() != nil {
		t.Fatal("a renewed lock ended")
	}
}

func TestWaitLimitOnTheClock(t *testing.T) {
	l, clock := manual(t)
	holder := mustTry(t, l, "w", dlock.WithTTL(time.Minute), dlock.WithoutRenewal())
	ch := waiting(t, l, bg, "w", dlock.WithWait(5*time.Second))
	clock.Advance(5*time.Second - time.Nanosecond)
	select {
	case r := <-ch:
		t.Fatalf("the wait ended before its limit: %v", r.err)
	case <-time.After(10 * time.Millisecond):
	}
	clock.Advance(time.Nanosecond)
	r := <-ch
	var nob *dlock.NotObtainedError
	if r.lock != nil || !errors.As(r.err, &nob) || nob.HolderTTL != 55*time.Second {
		t.Fatalf("at the wait limit: %v, %v; want busy with the holder's 55s left", r.lock, r.err)
	}
	if errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("the wait limit is no context deadline: %v", r.err)
	}
	if holder.Context().Err() != nil {
		t.Fatal("the holder ended")
	}
}

func TestBusyErrorMessage(t *testing.T) {
	l, clock := manual(t)
	mustTry(t, l, "m", dlock.WithTTL(10*time.Second), dlock.WithoutRenewal(), dlock.WithOwner("billing-7"))
	clock.Advance(3 * time.Second)
	ctx, cancel := context.WithCancel(bg)
	ch := waiting(t, l, ctx, "m")
	cancel()
	r := <-ch
	want := `dlock: acquire "m": not obtained: held by "billing-7" (lease left 7s, renewed while the holder works): context canceled`
	if r.err == nil || r.err.Error() != want {
		t.Fatalf("error %q, want %q", r.err, want)
	}
}

// A waiter whose context ended before the release is skipped, even if its
// goroutine has not woken yet: the release is deterministic.
func TestCancelledWaiterIsSkipped(t *testing.T) {
	l, _ := manual(t)
	holder := mustTry(t, l, "s")
	ctxA, cancelA := context.WithCancel(bg)
	a := waiting(t, l, ctxA, "s")
	b := waiting(t, l, bg, "s")
	cancelA()
	if err := holder.Release(bg); err != nil { // at once, before A's goroutine may run
		t.Fatal(err)
	}
	if r := <-a; r.lock != nil || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v, %v; want Canceled", r.lock, r.err)
	}
	rb := <-b
	if rb.err != nil || rb.lock.Fence() != holder.Fence()+1 {
		t.Fatalf("next waiter: %v, %v; want the lock with the next fence", rb.lock, rb.err)
	}
}

func TestMaxHoldOnTheClock(t *testing.T) {
	l, clock := manual(t)
	lk := mustTry(t, l, "h", dlock.WithTTL(3*time.Second), dlock.WithMaxHold(10*time.Second))
	clock.Advance(9 * time.Second)
	if err := lk.Refresh(bg, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if left, _ := lk.TTL(bg); left != time.Second {
		t.Fatalf("TTL() after a Refresh past the hold limit: %v, want 1s (cut at the limit)", left)
	}
	clock.Advance(time.Second - 500*time.Microsecond)
	if err := lk.Refresh(bg, time.Second); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrHoldLimit) {
		t.Fatalf("Refresh with less than 1ms to the limit: %v", err)
	}
	clock.Advance(500 * time.Microsecond)
	if c := cause(lk); !errors.Is(c, dlock.ErrLockLost) || !errors.Is(c, dlock.ErrHoldLimit) || l.Held("h") {
		t.Fatalf("at the hold limit: cause %v, held %v", c, l.Held("h"))
	}
}

// A Refresh never shortens a lease that is not renewed.
func TestRefreshNeverShortens(t *testing.T) {
	l, clock := manual(t)
	lk := mustTry(t, l, "n", dlock.WithTTL(10*time.Second), dlock.WithoutRenewal())
	if err := lk.Refresh(bg, time.Second); err != nil {
		t.Fatal(err)
	}
	clock.Advance(5 * time.Second)
	if left, _ := lk.TTL(bg); left != 5*time.Second || lk.Context().Err() != nil {
		t.Fatalf("after a shorter Refresh and 5s: TTL %v, ended %v; want 5s left", left, lk.Context().Err())
	}
	if err := lk.Refresh(bg, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	clock.Advance(19 * time.Second)
	if lk.Context().Err() != nil {
		t.Fatal("a lease refreshed to 20s ended after 19s")
	}
	clock.Advance(time.Second)
	if lk.Context().Err() == nil {
		t.Fatal("a lease refreshed to 20s lasted past 20s")
	}
}

// ForceUnlock leaves two holders for a while, as in Redis: the stale one
// learns at its next renewal.
func TestForceUnlockOverlap(t *testing.T) {
	l, clock := manual(t)
	stale := mustTry(t, l, "f", dlock.WithTTL(3*time.Second))
	clock.Advance(1500 * time.Millisecond) // renewed at 1s; the next renewal is at 2s
	if !l.ForceUnlock("f") || l.ForceUnlock("f") {
		t.Fatal("ForceUnlock: want true, then false on a free name")
	}
	fresh := mustTry(t, l, "f")
	if h, ok := l.Holder("f"); !ok || h != fresh || fresh.Fence() != stale.Fence()+1 {
		t.Fatalf("Holder = %v, %v; want the fresh lock with the next fence", h, ok)
	}
	clock.Advance(500*time.Millisecond - time.Nanosecond)
	if stale.Context().Err() != nil {
		t.Fatal("the stale holder learned before its next renewal")
	}
	clock.Advance(time.Nanosecond)
	if want := "dlock: lock lost: renewal found the lock gone or taken over"; cause(stale) == nil || cause(stale).Error() != want {
		t.Fatalf("stale cause: %v, want %q", cause(stale), want)
	}
	if err := stale.Release(bg); !errors.Is(err, dlock.ErrNotHeld) || fresh.Context().Err() != nil || !l.Held("f") {
		t.Fatalf("stale Release: %v; the fresh lock must stay", err)
	}
}

func TestForceUnlockNoticedByCalls(t *testing.T) {
	l, _ := manual(t)

	a := mustTry(t, l, "a")
	l.ForceUnlock("a")
	if _, err := a.TTL(bg); !errors.Is(err, dlock.ErrNotHeld) || a.Context().Err() != nil {
		t.Fatalf("TTL of a force-unlocked lock: %v (TTL asks, it does not end the lock)", err)
	}
	if err := a.Refresh(bg, time.Second); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(cause(a), dlock.ErrLockLost) {
		t.Fatalf("Refresh of a force-unlocked lock: %v, cause %v; want ErrNotHeld and a loss", err, cause(a))
	}

	// A Release that finds the lock gone is reported as such; the cause
	// is the release's, as with the Client, and Run reports the loss.
	b := mustTry(t, l, "b")
	err := dlock.Run(bg, b, func(context.Context) error {
		l.ForceUnlock("b")
		return nil
	})
	if !errors.Is(err, dlock.ErrLockLost) || !errors.Is(cause(b), dlock.ErrReleased) {
		t.Fatalf("Run over a force unlock: %v, cause %v", err, cause(b))
	}

	// Without renewal the stale holder learns when its lease ends.
	c := mustTry(t, l, "c", dlock.WithTTL(time.Minute), dlock.WithoutRenewal())
	l.ForceUnlock("c")
	if c.Context().Err() != nil {
		t.Fatal("a lock without renewal learned of the force unlock before its lease ended")
	}
}

func TestExpire(t *testing.T) {
	l, _ := manual(t)
	if l.Expire("none") {
		t.Fatal("Expire of a free name reported true")
	}
	lk := mustTry(t, l, "e")
	ch := waiting(t, l, bg, "e")
	if !l.Expire("e") {
		t.Fatal("Expire of a held name reported false")
	}
	r := <-ch
	if r.err != nil || !errors.Is(cause(lk), dlock.ErrLockLost) || r.lock.Fence() != lk.Fence()+1 {
		t.Fatalf("after Expire: waiter %v, cause %v", r.err, cause(lk))
	}
	if n := l.Waiters("e"); n != 0 {
		t.Fatalf("Waiters = %d after the hand-off", n)
	}
}

func TestClose(t *testing.T) {
	l, _ := manual(t)
	held := mustTry(t, l, "held")
	stale := mustTry(t, l, "stale")
	l.ForceUnlock("stale") // not yet noticed: Close releases it as the Client would
	ch := waiting(t, l, bg, "held")
	if err := l.Close(bg); err != nil {
		t.Fatal(err)
	}
	if r := <-ch; r.lock != nil || !errors.Is(r.err, dlock.ErrClosed) {
		t.Fatalf("waiter at Close: %v, %v", r.lock, r.err)
	}
	for _, lk := range []dlock.Lock{held, stale} {
		if !errors.Is(cause(lk), dlock.ErrReleased) || !errors.Is(lk.Release(bg), dlock.ErrNotHeld) {
			t.Fatalf("%s after Close: cause %v", lk.Name(), cause(lk))
		}
	}
	if _, err := l.TryAcquire(bg, "held"); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("TryAcquire after Close: %v", err)
	}
	if l.Expire("held") || l.Held("held") || l.Close(bg) != nil {
		t.Fatal("a closed Locker still holds something, or a second Close failed")
	}
}

type traceKey struct{}

// The lock's context keeps the acquirer's values but not its cancellation.
func TestLockContextKeepsValues(t *testing.T) {
	l, _ := manual(t)
	ctx, cancel := context.WithCancel(context.WithValue(bg, traceKey{}, "trace-1"))
	lk, err := l.TryAcquire(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if lk.Context().Value(traceKey{}) != "trace-1" || lk.Context().Err() != nil {
		t.Fatalf("lock context: value %v, err %v; want the value and no cancellation", lk.Context().Value(traceKey{}), lk.Context().Err())
	}
}

// Inside a synctest bubble the default clock is the bubble's: a test of
// minutes of leases and waits runs at once, deterministically, context
// deadlines included.
func TestSynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := dlocktest.MustNew()
		defer l.Close(bg)
		lk := mustTry(t, l, "s", dlock.WithTTL(time.Minute), dlock.WithoutRenewal())
		ctx, cancel := context.WithTimeout(bg, 30*time.Second)
		defer cancel()
		t0 := time.Now()
		_, err := l.Acquire(ctx, "s", dlock.WithWait(time.Hour))
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) != 30*time.Second {
			t.Fatalf("Acquire under a 30s deadline: %v after %v", err, time.Since(t0))
		}
		ch := make(chan error, 1)
		go func() {
			next, err := l.Acquire(bg, "s", dlock.WithWait(time.Hour))
			if err == nil {
				err = next.Release(bg)
			}
			ch <- err
		}()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if !errors.Is(cause(lk), dlock.ErrLockLost) {
			t.Fatalf("after the 1m lease: %v", cause(lk))
		}
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	})
}

// Many goroutines and a moving clock: the race detector and the fences
// check the locking inside the double.
func TestConcurrentUse(t *testing.T) {
	l, clock := manual(t)
	names := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]map[int64]bool{"a": {}, "b": {}, "c": {}}
	stop, stopped := make(chan struct{}), make(chan struct{})
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range 200 {
				name := names[r.IntN(len(names))]
				ctx, cancel := context.WithTimeout(bg, time.Duration(r.IntN(3))*time.Millisecond)
				opts := []dlock.AcquireOption{dlock.WithTTL(time.Duration(1+r.IntN(5)) * time.Second), dlock.WithWait(time.Second)}
				if r.IntN(2) == 0 {
					opts = append(opts, dlock.WithoutRenewal())
				}
				lk, err := l.Acquire(ctx, name, opts...)
				cancel()
				if err != nil {
					if !errors.Is(err, dlock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Acquire: %v", err)
					}
					continue
				}
				// Unique per name: the order in which goroutines record
				// them is not the order of the grants (a holder may be
				// preempted here until after its lease ended and the
				// next holder recorded a larger fence).
				mu.Lock()
				if seen[name][lk.Fence()] {
					t.Errorf("fence %d of %s handed out twice", lk.Fence(), name)
				}
				seen[name][lk.Fence()] = true
				mu.Unlock()
				switch r.IntN(4) {
				case 0:
					l.Expire(name)
				case 1:
					l.ForceUnlock(name)
				case 2:
					_ = lk.Refresh(bg, 2*time.Second)
				}
				_, _ = lk.TTL(bg)
				_ = lk.Release(bg)
			}
		})
	}
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
				clock.Advance(100 * time.Millisecond)
				time.Sleep(50 * time.Microsecond)
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-stopped
}
