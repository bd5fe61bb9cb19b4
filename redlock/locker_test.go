package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/observe"
	"github.com/dlock-go/dlock/redlock"
)

// The Redlock is a dlock.Locker, so code written for a Client takes it.
var _ dlock.Locker = (*redlock.Redlock)(nil)

func TestLockerBasics(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r1, r2 := newRedlock(t, rdbs), newRedlock(t, rdbs)
	var locker dlock.Locker = r1

	l1, err := locker.TryAcquire(bg, "basic", dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l1.Name() != "basic" || len(l1.Token()) != 32 || l1.Fence() <= 0 || l1.Context().Err() != nil {
		t.Fatalf("lock name %q, token of %d chars, fence %d, context %v", l1.Name(), len(l1.Token()), l1.Fence(), l1.Context().Err())
	}

	// Busy: a nil Lock (not a nil *Lock in the interface) and the error
	// shape of a Client's.
	l2, err := r2.TryAcquire(bg, "basic")
	if l2 != nil {
		t.Fatalf("busy TryAcquire returned a non-nil Lock %#v", l2)
	}
	checkBusy(t, err, "basic", 2*time.Second)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redlock.ErrNoQuorum) {
		t.Fatalf("busy TryAcquire: %v also matches a context error or ErrNoQuorum", err)
	}

	if err := l1.Release(bg); err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Release: %v", err)
	}
	if err := l1.Refresh(bg, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Refresh after Release: %v", err)
	}
	l2, err = r2.TryAcquire(bg, "basic")
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	if l2.Fence() <= l1.Fence() {
		t.Fatalf("fence %d after %d on the same nodes", l2.Fence(), l1.Fence())
	}
	if err := l2.Release(bg); err != nil {
		t.Fatal(err)
	}

	// Do: the lock is in fn's context, and released afterwards.
	ran := false
	err = locker.Do(bg, "basic", func(ctx context.Context) error {
		ran = true
		l, ok := dlock.FromContext(ctx)
		if !ok || l.Name() != "basic" || l.Fence() <= l2.Fence() {
			t.Errorf("FromContext in Do: %v, %v", l, ok)
			return nil
		}
		if n := exists(rdbs, "dlock:{basic}"); n < 2 {
			t.Errorf("inside Do the lock is on %d nodes", n)
		}
		return errors.New("work failed")
	})
	if !ran || err == nil || err.Error() != "work failed" {
		t.Fatalf("Do: ran %v, %v; want fn's own error", ran, err)
	}
	// Released on the nodes of the lock at once; a node whose grant came
	// after the release gives it back in the background.
	waitFor(t, "the lock gone from every node after Do", func() bool { return exists(rdbs, "dlock:{basic}") == 0 })

	// A panic in fn goes on, and the lock is released all the same.
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Fatalf("recovered %v, want the panic of fn", v)
			}
		}()
		_ = locker.Do(bg, "basic", func(context.Context) error { panic("boom") })
	}()
	waitFor(t, "the lock gone from every node after a panic in Do", func() bool { return exists(rdbs, "dlock:{basic}") == 0 })
	l, err := r2.TryAcquire(bg, "basic")
	if err != nil {
		t.Fatalf("after a panic in Do: %v", err)
	}
	_ = l.Release(bg)
}

// checkBusy checks the shape of a busy error: an *dlock.Error of op acquire
// naming the lock, wrapping a *dlock.NotObtainedError with the holder's
// remaining lease.
func checkBusy(t *testing.T, err error, name string, ttl time.Duration) *dlock.NotObtainedError {
	t.Helper()
	var derr *dlock.Error
	if !errors.As(err, &derr) || derr.Op != "acquire" || derr.Name != name {
		t.Fatalf("busy: %v (%T), want a *dlock.Error of op acquire on %q", err, err, name)
	}
	var busy *dlock.NotObtainedError
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.As(err, &busy) {
		t.Fatalf("busy: %v does not match ErrNotObtained", err)
	}
	if busy.Name != name || busy.HolderTTL <= 0 || busy.HolderTTL > ttl {
		t.Fatalf("busy: name %q, holder TTL %v; want %q and a lease in (0, %v]", busy.Name, busy.HolderTTL, name, ttl)
	}
	return busy
}

func TestAcquireWaitsForRelease(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r1, r2 := newRedlock(t, rdbs), newRedlock(t, rdbs)
	l1, err := r1.TryAcquire(bg, "wait", dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(300*time.Millisecond, func() { _ = l1.Release(bg) })
	start := time.Now()
	l2, err := r2.Acquire(bg, "wait", dlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("waiting for a lock released after 300ms: %v", err)
	}
	defer l2.Release(bg)
	// The retry comes at most maxBackoff (1s) after the release.
	if d := time.Since(start); d < 250*time.Millisecond || d > 2*time.Second {
		t.Fatalf("acquired after %v; the holder released after 300ms", d)
	}
}

// TestWaitEndings: how a wait for a busy lock ends, and what it says.
func TestWaitEndings(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	obs := &recorder{}
	holder := newRedlock(t, rdbs)
	r := newRedlock(t, rdbs, redlock.WithObserver(obs))
	h, err := holder.TryAcquire(bg, "busy", dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(bg)

	t.Run("wait limit", func(t *testing.T) {
		start := time.Now()
		_, err := r.Acquire(bg, "busy", dlock.WithWait(300*time.Millisecond))
		d := time.Since(start)
		checkBusy(t, err, "busy", 5*time.Second)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			t.Fatalf("the wait limit, not ctx, ended the wait: %v", err)
		}
		if d < 300*time.Millisecond || d > 2*time.Second {
			t.Fatalf("gave up after %v with a wait limit of 300ms", d)
		}
		if e := obs.lastAcquire(t); e.Result != observe.ResultTimeout || e.Err != err {
			t.Fatalf("event %+v, want result timeout with the error", e)
		}
	})
	t.Run("ctx cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(bg)
		time.AfterFunc(200*time.Millisecond, cancel)
		_, err := r.Acquire(ctx, "busy", dlock.WithWait(10*time.Second))
		checkBusy(t, err, "busy", 5*time.Second)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait: %v does not match context.Canceled", err)
		}
		if e := obs.lastAcquire(t); e.Result != observe.ResultCancelled {
			t.Fatalf("event %+v, want result cancelled", e)
		}
	})
	t.Run("ctx deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
		defer cancel()
		_, err := r.Acquire(ctx, "busy", dlock.WithWait(10*time.Second))
		checkBusy(t, err, "busy", 5*time.Second)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait past ctx's deadline: %v does not match context.DeadlineExceeded", err)
		}
		if e := obs.lastAcquire(t); e.Result != observe.ResultTimeout {
			t.Fatalf("event %+v, want result timeout", e)
		}
	})
	t.Run("WithWait(0)", func(t *testing.T) {
		start := time.Now()
		_, err := r.Acquire(bg, "busy", dlock.WithWait(0))
		checkBusy(t, err, "busy", 5*time.Second)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("WithWait(0) took %v", d)
		}
		if e := obs.lastAcquire(t); e.Result != observe.ResultBusy {
			t.Fatalf("event %+v, want result busy", e)
		}
		// A single attempt, not a wait over before it began: a free lock
		// is taken.
		l, err := r.Acquire(bg, "free", dlock.WithWait(0))
		if err != nil {
			t.Fatalf("WithWait(0) on a free lock: %v", err)
		}
		_ = l.Release(bg)
	})
	t.Run("ctx already ended", func(t *testing.T) {
		ctx, cancel := context.WithCancel(bg)
		cancel()
		if _, err := r.TryAcquire(ctx, "untouched"); !errors.Is(err, context.Canceled) {
			t.Fatalf("TryAcquire on a cancelled ctx: %v", err)
		}
		if n := exists(rdbs, "dlock:{untouched}:fence"); n != 0 {
			t.Fatalf("an acquisition on a cancelled ctx wrote to %d nodes", n)
		}
	})
}

// TestMutualExclusion: goroutines of two Redlocks take turns; never two
// inside at once, and each node's fences grow in the order of entry.
func TestMutualExclusion(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	lockers := []*redlock.Redlock{newRedlock(t, rdbs), newRedlock(t, rdbs)}
	var (
		inside, most atomic.Int32
		mu           sync.Mutex
		entries      [][]int64
		wg           sync.WaitGroup
	)
	for g := range 4 {
		wg.Go(func() {
			for range 5 {
				err := lockers[g%2].Do(bg, "mutex", func(ctx context.Context) error {
					n := inside.Add(1)
					defer inside.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					l, _ := dlock.FromContext(ctx)
					m, ok := l.(*redlock.Lock)
					if !ok {
						return fmt.Errorf("lock in ctx of type %T", l)
					}
					mu.Lock()
					entries = append(entries, m.Fences())
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
					return nil
				}, dlock.WithTTL(time.Second), dlock.WithWait(10*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if most.Load() != 1 || len(entries) != 20 {
		t.Fatalf("%d holders inside at once, %d entries of 20", most.Load(), len(entries))
	}
	for node := range rdbs {
		var last int64
		for i, fences := range entries {
			if f := fences[node]; f != 0 {
				if f <= last {
					t.Fatalf("node %d: fence %d at entry %d after %d", node, f, i, last)
				}
				last = f
			}
		}
	}
}
