package dlocktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// sharedTests are the subtests of read locks (dlock.WithShared): run when the
// Harness says the Locker has them, else one subtest checks that the Locker
// refuses Shared, so that no Locker ignores it and hands out a write lock
// to a caller who asked to share.
func (s *suite) sharedTests() []conformanceTest {
	if !s.h.Shared {
		return []conformanceTest{{"SharedRefused", s.sharedRefused}}
	}
	return []conformanceTest{
		{"SharedCoexist", s.sharedCoexist},
		{"SharedExcludesWriter", s.sharedExcludesWriter},
		{"WriterExcludesShared", s.writerExcludesShared},
		{"SharedWaitingWriterFirst", s.sharedWaitingWriterFirst},
		{"SharedLoss", s.sharedLoss},
		{"SharedReentryKeepsKind", s.sharedReentryKeepsKind},
	}
}

func (s *suite) sharedRefused(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	lk, err := l.TryAcquire(context.Background(), name, dlock.WithShared())
	if lk != nil {
		t.Fatalf("TryAcquire with WithShared on a Locker without read locks gave %v", lk)
	}
	isOpError(t, err, dlock.ErrInvalidOption, "acquire", name)
}

func (s *suite) sharedCoexist(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	a := s.try(t, l, name, dlock.WithShared())
	b := s.try(t, l, name, dlock.WithShared())
	if b.Fence() <= a.Fence() {
		t.Fatalf("reader fences %d then %d: each acquisition's fence must grow", a.Fence(), b.Fence())
	}
	leased(t, a, "first reader")
	leased(t, b, "second reader")
	s.release(t, a)
	leased(t, b, "the other reader after one left")
	s.release(t, b)
	// Free again: a writer gets it at once.
	s.release(t, s.try(t, l, name))
}

func (s *suite) sharedExcludesWriter(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	r := s.try(t, l, name, dlock.WithShared())
	_, err := l.TryAcquire(context.Background(), name, dlock.WithTTL(s.ttl))
	isOpError(t, err, dlock.ErrNotObtained, "acquire", name)
	w := acquireAsync(context.Background(), l, name, dlock.WithTTL(s.ttl), dlock.WithWait(s.patience))
	s.inLine(t, l, name, 1)
	select {
	case got := <-w:
		t.Fatalf("writer got %v, %v while a reader held", got.lock, got.err)
	case <-time.After(s.ttl / 2):
	}
	s.release(t, r)
	got := s.receive(t, w)
	if got.err != nil {
		t.Fatalf("writer after the reader left: %v", got.err)
	}
	if got.lock.Fence() <= r.Fence() {
		t.Fatalf("writer's fence %d not above the reader's %d", got.lock.Fence(), r.Fence())
	}
	s.release(t, got.lock)
}

func (s *suite) writerExcludesShared(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	w := s.try(t, l, name)
	_, err := l.TryAcquire(context.Background(), name, dlock.WithTTL(s.ttl), dlock.WithShared())
	isOpError(t, err, dlock.ErrNotObtained, "acquire", name)
	r := acquireAsync(context.Background(), l, name, dlock.WithTTL(s.ttl), dlock.WithWait(s.patience), dlock.WithShared())
	s.inLine(t, l, name, 1)
	select {
	case got := <-r:
		t.Fatalf("reader got %v, %v while a writer held", got.lock, got.err)
	case <-time.After(s.ttl / 2):
	}
	s.release(t, w)
	got := s.receive(t, r)
	if got.err != nil {
		t.Fatalf("reader after the writer left: %v", got.err)
	}
	s.release(t, got.lock)
}

// sharedWaitingWriterFirst: while a writer waits, new readers are refused,
// even though readers hold the name; WithoutWriterPriority gets past it.
func (s *suite) sharedWaitingWriterFirst(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	r := s.try(t, l, name, dlock.WithShared())
	w := acquireAsync(ctx, l, name, dlock.WithTTL(s.ttl), dlock.WithWait(s.patience))
	s.inLine(t, l, name, 1)
	// A waiter may take a moment to be seen by every instance (in Redis,
	// it lines up once its hand-off channel is confirmed): until then a
	// reader may still join. Then every new reader must be refused.
	deadline := time.Now().Add(s.patience)
	for {
		lk, err := l.TryAcquire(ctx, name, dlock.WithTTL(s.ttl), dlock.WithShared())
		if err != nil {
			isOpError(t, err, dlock.ErrNotObtained, "acquire", name)
			break
		}
		s.release(t, lk)
		if time.Now().After(deadline) {
			t.Fatalf("new readers still join after %v while a writer waits", s.patience)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 3 {
		_, err := l.TryAcquire(ctx, name, dlock.WithTTL(s.ttl), dlock.WithShared())
		isOpError(t, err, dlock.ErrNotObtained, "acquire", name)
	}
	skip := s.try(t, l, name, dlock.WithShared(), dlock.WithoutWriterPriority())
	s.release(t, skip)
	select {
	case got := <-w:
		t.Fatalf("writer got %v, %v while a reader held", got.lock, got.err)
	default:
	}
	s.release(t, r)
	got := s.receive(t, w)
	if got.err != nil {
		t.Fatalf("writer after the readers left: %v", got.err)
	}
	s.release(t, got.lock)
	// WithoutWriterPriority is a reader's option only.
	_, err := l.TryAcquire(ctx, name, dlock.WithoutWriterPriority())
	isOpError(t, err, dlock.ErrInvalidOption, "acquire", name)
}

// sharedLoss: readers lost behind their back learn it, as a writer does.
func (s *suite) sharedLoss(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	a := s.try(t, l, name, dlock.WithShared())
	b := s.try(t, l, name, dlock.WithShared())
	s.h.Expire(t, l, name)
	for _, lk := range []dlock.Lock{a, b} {
		cause := s.ended(t, lk.Context(), "reader after Expire")
		if !errors.Is(cause, dlock.ErrLockLost) {
			t.Fatalf("reader's cause after Expire: %v, want ErrLockLost", cause)
		}
		isOpError(t, lk.Refresh(ctx, s.ttl), dlock.ErrNotHeld, "refresh", name)
		_, err := lk.TTL(ctx)
		isOpError(t, err, dlock.ErrNotHeld, "ttl", name)
		isOpError(t, lk.Release(ctx), dlock.ErrNotHeld, "release", name)
	}
	next := s.await(t, l, name)
	if next.Fence() <= b.Fence() {
		t.Fatalf("fence %d after the lost readers' %d", next.Fence(), b.Fence())
	}
	s.release(t, next)
}

// sharedReentryKeepsKind checks that WithReentry never turns a read lock
// into a write lock: a nested exclusive acquisition under a read lock the
// context holds is refused (the caller would believe it writes alone while
// other readers read), and a nested read under a write lock shares it (the
// writer already excludes everyone).
func (s *suite) sharedReentryKeepsKind(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	re := dlock.WithReentry()
	r := s.try(t, l, name, dlock.WithShared(), re)
	w, err := l.TryAcquire(r.Context(), name, re, dlock.WithTTL(s.ttl))
	if w != nil {
		s.release(t, w)
		t.Fatalf("a nested exclusive WithReentry under a read lock got a handle: a writer beside readers")
	}
	isOpError(t, err, dlock.ErrReentrant, "acquire", name)
	s.release(t, r)

	x := s.try(t, l, name, re)
	in, err := l.TryAcquire(x.Context(), name, re, dlock.WithShared(), dlock.WithTTL(s.ttl))
	if err != nil {
		t.Fatalf("a nested read WithReentry under the write lock: %v", err)
	}
	s.release(t, in)
	live(t, x, "the write lock after a nested read")
	s.release(t, x)
	_ = ctx
}
