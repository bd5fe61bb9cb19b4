package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/inspect"
)

// The double's Inspect tells each kind as the Client's does: the kind, the
// readers of a read lock, the permits of a semaphore, and a name kept for
// its min hold as held.
func TestInspectKindsDoubleAsClient(t *testing.T) {
	c, _, _ := setup(t)
	d := dlocktest.MustNew()
	for _, tc := range []struct {
		name          string
		opts          []dlock.AcquireOption
		kind          string
		readers, held int
	}{
		{"ik:x", nil, dlock.KindExclusive, 0, 0},
		{"ik:r", []dlock.AcquireOption{dlock.WithShared()}, dlock.KindShared, 1, 0},
		{"ik:s", []dlock.AcquireOption{dlock.WithPermits(2)}, dlock.KindSemaphore, 0, 1},
	} {
		for _, l := range []interface {
			dlock.Locker
			Inspect(ctx context.Context, name string) (inspect.LockInfo, error)
		}{c, d} {
			lk, err := l.TryAcquire(bg, tc.name, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			i, err := l.Inspect(bg, tc.name)
			if err != nil || i.Kind != tc.kind || len(i.Readers) != tc.readers || len(i.Holders) != tc.held || i.TTL <= 0 {
				t.Errorf("%T: Inspect(%s) = kind %q, %d readers, %d permits, TTL %v, %v; want %q, %d, %d, a lease",
					l, tc.name, i.Kind, len(i.Readers), len(i.Holders), i.TTL, err, tc.kind, tc.readers, tc.held)
			}
			_ = lk.Release(bg)
		}
	}
	for _, l := range []interface {
		dlock.Locker
		Inspect(ctx context.Context, name string) (inspect.LockInfo, error)
	}{c, d} {
		lk, err := l.TryAcquire(bg, "ik:kept", dlock.WithMinHold(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		_ = lk.Release(bg)
		if i, err := l.Inspect(bg, "ik:kept"); err != nil || i.Token != "min-hold" || i.TTL <= 0 {
			t.Errorf("%T: Inspect of a name kept for its min hold = token %q, TTL %v, %v; want token min-hold, a lease", l, i.Token, i.TTL, err)
		}
	}
}

// The double's Inspect lists the waiters in line, first first, with their
// owners and kinds, as the Client's does.
func TestInspectQueueDoubleAsClient(t *testing.T) {
	c, _, _ := setup(t)
	d := dlocktest.MustNew()
	for _, l := range []interface {
		dlock.Locker
		Inspect(ctx context.Context, name string) (inspect.LockInfo, error)
	}{c, d} {
		lk, err := l.TryAcquire(bg, "ik:q", dlock.WithOwner("holder"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(bg)
		done := make(chan struct{}, 2)
		for _, w := range []struct {
			owner string
			opts  []dlock.AcquireOption
		}{{"first", nil}, {"second", []dlock.AcquireOption{dlock.WithShared()}}} {
			go func() {
				defer func() { done <- struct{}{} }()
				opts := append([]dlock.AcquireOption{dlock.WithOwner(w.owner), dlock.WithWait(20 * time.Second)}, w.opts...)
				if l, err := l.Acquire(ctx, "ik:q", opts...); err == nil {
					_ = l.Release(bg)
				}
			}()
			// In line before the next one comes.
			for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				if i, _ := l.Inspect(bg, "ik:q"); len(i.Queue) > 0 && i.Queue[len(i.Queue)-1].Owner == w.owner {
					break
				}
			}
		}
		i, err := l.Inspect(bg, "ik:q")
		if err != nil || i.Waiters != 2 || len(i.Queue) != 2 ||
			i.Queue[0].Owner != "first" || i.Queue[0].Shared || i.Queue[0].Alive <= 0 ||
			i.Queue[1].Owner != "second" || !i.Queue[1].Shared {
			t.Errorf("%T: Inspect = %d waiters, queue %+v, %v; want first (exclusive), then second (shared), alive", l, i.Waiters, i.Queue, err)
		}
		cancel()
		<-done
		<-done
		_ = lk.Release(bg)
	}
}
