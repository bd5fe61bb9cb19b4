package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// The semaphore subtests (dlock.WithPermits). Harness.NoSemaphores skips all
// but SemaphoreRefused, which then checks that WithPermits is refused.

const semN = 3

// permit takes one of semN permits of name at once.
func (s *suite) permit(t *testing.T, l dlock.Locker, name string, opts ...dlock.AcquireOption) dlock.Lock {
	t.Helper()
	return s.try(t, l, name, append([]dlock.AcquireOption{dlock.WithPermits(semN)}, opts...)...)
}

// semPermits: n holders at once, each with its own token and a growing
// fence; the n+1st is busy with the Client's error; a release hands the
// permit to a waiter.
func (s *suite) semPermits(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	var held []dlock.Lock
	for i := range semN {
		lk := s.permit(t, l, name)
		leased(t, lk, "a permit")
		if i > 0 && lk.Fence() <= held[i-1].Fence() {
			t.Fatalf("permit fences %d then %d: not growing", held[i-1].Fence(), lk.Fence())
		}
		if i > 0 && lk.Token() == held[i-1].Token() {
			t.Fatal("two permits with one token")
		}
		held = append(held, lk)
	}
	lk, err := l.TryAcquire(ctx, name, dlock.WithTTL(s.ttl), dlock.WithPermits(semN))
	s.isBusy(t, lk, err, name, nil)

	ch := acquireAsync(ctx, l, name, dlock.WithTTL(s.ttl), dlock.WithWait(s.patience), dlock.WithPermits(semN))
	s.inLine(t, l, name, 1)
	s.release(t, held[1])
	r := s.receive(t, ch)
	if r.err != nil {
		t.Fatalf("waiter after a permit's release: %v", r.err)
	}
	if r.lock.Fence() <= held[semN-1].Fence() {
		t.Fatalf("handed-over permit's fence %d not above the last grant's %d", r.lock.Fence(), held[semN-1].Fence())
	}
	leased(t, r.lock, "the handed-over permit")
	for _, x := range []dlock.Lock{held[0], held[2], r.lock} {
		leased(t, x, "a holder after the hand-off")
		s.release(t, x)
	}
	isOpError(t, held[1].Release(ctx), dlock.ErrNotHeld, "release", name)
}

// semFIFO: with every permit held, waiters get freed permits in arrival
// order.
func (s *suite) semFIFO(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	var held []dlock.Lock
	for range semN {
		held = append(held, s.permit(t, l, name))
	}
	const n = 4
	type turn struct {
		i   int
		err error
	}
	turns := make(chan turn, n)
	locks := make(chan dlock.Lock, n)
	for i := range n {
		go func() {
			lk, err := l.Acquire(context.Background(), name, dlock.WithTTL(s.ttl), dlock.WithWait(s.patience), dlock.WithPermits(semN))
			turns <- turn{i: i, err: err}
			if err == nil {
				locks <- lk
			}
		}()
		s.inLine(t, l, name, i+1)
	}
	// One release at a time: each freed permit goes to the next in line.
	next := held[0]
	for want := range n {
		s.release(t, next)
		select {
		case got := <-turns:
			if got.err != nil || got.i != want {
				t.Fatalf("freed permit %d went to waiter %d (%v); want waiter %d", want, got.i, got.err, want)
			}
			next = <-locks
		case <-time.After(s.patience):
			t.Fatalf("freed permit %d reached nobody within %v", want, s.patience)
		}
	}
	for _, x := range append(held[1:], next) {
		s.release(t, x)
	}
}

// semLease: a permit not renewed comes back when its lease runs out, and a
// waiter gets it; the stale holder cannot touch it, and the other permits
// are untouched.
func (s *suite) semLease(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	var held []dlock.Lock
	for range semN - 1 {
		held = append(held, s.permit(t, l, name))
	}
	stale := s.permit(t, l, name, dlock.WithTTL(s.short()), dlock.WithoutRenewal())
	r := s.receive(t, acquireAsync(ctx, l, name, dlock.WithTTL(s.ttl), dlock.WithWait(s.patience), dlock.WithPermits(semN)))
	if r.err != nil {
		t.Fatalf("waiter for an expiring permit: %v", r.err)
	}
	if cause := s.ended(t, stale.Context(), "permit without renewal"); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause: %v, want ErrLockLost", cause)
	}
	if r.lock.Fence() <= stale.Fence() {
		t.Fatalf("fence %d after the expired %d", r.lock.Fence(), stale.Fence())
	}
	isOpError(t, stale.Refresh(ctx, s.ttl), dlock.ErrNotHeld, "refresh", name)
	_, err := stale.TTL(ctx)
	isOpError(t, err, dlock.ErrNotHeld, "ttl", name)
	isOpError(t, stale.Release(ctx), dlock.ErrNotHeld, "release", name)
	for _, x := range append(held, r.lock) {
		leased(t, x, "a permit after another's expiry")
		s.release(t, x)
	}
}

// semMismatch: holders agree on n; a semaphore cannot take a name held as
// an exclusive lock; bad n is refused before any effect.
func (s *suite) semMismatch(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	lk := s.permit(t, l, name)
	for _, acquire := range []func(context.Context, string, ...dlock.AcquireOption) (dlock.Lock, error){l.TryAcquire, l.Acquire} {
		start := time.Now()
		got, err := acquire(ctx, name, dlock.WithTTL(s.ttl), dlock.WithWait(s.patience), dlock.WithPermits(semN+1))
		if got != nil {
			t.Fatalf("WithPermits(%d) on a name held with %d returned a lock", semN+1, semN)
		}
		isOpError(t, err, dlock.ErrMismatch, "acquire", name)
		if msg := err.Error(); !strings.Contains(msg, "3") || !strings.Contains(msg, "4") {
			t.Fatalf("mismatch error %q does not name both numbers", msg)
		}
		if took := time.Since(start); took > s.patience/2 {
			t.Fatalf("a mismatch took %v: it must be refused at once, not waited out", took)
		}
	}
	s.release(t, lk)
	// Nobody holds a permit: another n is fine.
	s.release(t, s.try(t, l, name, dlock.WithPermits(semN+1)))

	excl := s.name(t) + ":exclusive"
	x := s.try(t, l, excl)
	got, err := l.TryAcquire(ctx, excl, dlock.WithTTL(s.ttl), dlock.WithPermits(semN))
	if got != nil {
		t.Fatal("a permit of a name held as an exclusive lock")
	}
	isOpError(t, err, dlock.ErrMismatch, "acquire", excl)
	s.release(t, x)

	// The other way round: an exclusive lock, or a read lock, of a name
	// whose permits are held is refused at once too, naming the permits.
	p := s.permit(t, l, name)
	type kind struct {
		what string
		opts []dlock.AcquireOption
	}
	kinds := []kind{{"an exclusive lock", nil}}
	if s.h.Shared {
		kinds = append(kinds, kind{"a read lock", []dlock.AcquireOption{dlock.WithShared()}})
	}
	for _, k := range kinds {
		kind, opts := k.what, k.opts
		for _, acquire := range []func(context.Context, string, ...dlock.AcquireOption) (dlock.Lock, error){l.TryAcquire, l.Acquire} {
			start := time.Now()
			got, err := acquire(ctx, name, append([]dlock.AcquireOption{dlock.WithTTL(s.ttl), dlock.WithWait(s.patience)}, opts...)...)
			if got != nil {
				_ = got.Release(ctx)
				t.Fatalf("%s of a name whose permits are held", kind)
			}
			isOpError(t, err, dlock.ErrMismatch, "acquire", name)
			if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("WithPermits(%d)", semN)) {
				t.Fatalf("%s refused with %q, which does not name the holders' WithPermits(%d)", kind, msg, semN)
			}
			if took := time.Since(start); took > s.patience/2 {
				t.Fatalf("%s refused after %v: it must be refused at once, not waited out", kind, took)
			}
		}
	}
	s.release(t, p)

	for _, n := range []int{0, -1, dlock.MaxPermits + 1} {
		got, err := l.TryAcquire(ctx, name, dlock.WithTTL(s.ttl), dlock.WithPermits(n))
		if got != nil {
			t.Fatalf("WithPermits(%d) returned a lock", n)
		}
		isOpError(t, err, dlock.ErrInvalidOption, "acquire", name)
	}
}

// semRefused: a Locker without semaphores (Harness.NoSemaphores) refuses
// Permits with ErrInvalidOption rather than hand out an exclusive lock or
// more than n; one with semaphores passes trivially.
func (s *suite) semRefused(t *testing.T) {
	if s.h.NoSemaphores == "" {
		t.Skip("the Locker offers semaphores: the other Semaphore subtests check them")
	}
	l, name := s.h.New(t), s.name(t)
	for _, acquire := range []func(context.Context, string, ...dlock.AcquireOption) (dlock.Lock, error){l.TryAcquire, l.Acquire} {
		got, err := acquire(context.Background(), name, dlock.WithTTL(s.ttl), dlock.WithPermits(2))
		if got != nil {
			_ = got.Release(context.Background())
			t.Fatal("a Locker without semaphores accepted Permits")
		}
		isOpError(t, err, dlock.ErrInvalidOption, "acquire", name)
	}
}
