package dlocktest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lockerkit"
)

// Harness tells Conformance how to drive one implementation of
// dlock.Locker. It is a struct of functions, not an interface, so that a
// hook added later is one more optional field rather than a method every
// harness must grow.
type Harness struct {
	// New returns a fresh Locker for one subtest and registers its cleanup
	// (Close) on t. Required. Every subtest uses lock names of its own, so
	// the Lockers may share one backend (one redis-server for the suite).
	New func(t *testing.T) dlock.Locker

	// Expire ends the lease of the lock name, held through l, behind the
	// holder's back, the way the implementation really loses a lock: for a
	// *dlock.Client, delete its key in Redis, so that its next renewal finds
	// it gone; for a Redlock, delete it on a majority of the nodes; for
	// dlocktest, (*Locker).Expire or (*Locker).ForceUnlock. Required.
	Expire func(t *testing.T, l dlock.Locker, name string)

	// Waiters, when set, returns how many Acquire calls wait for name on l.
	// The tests of waiting use it to know a waiter is in line before they
	// go on; without it they give each waiter 100ms to get in line, and the
	// FIFO test is less certain of the order it checks.
	Waiters func(l dlock.Locker, name string) int

	// Bounds are the Locker's TTL bounds, for the tests of invalid TTLs.
	// Zero means lockerkit.DefaultTTLBounds.
	Bounds lockerkit.TTLBounds

	// TTL is the lease of the suite's locks; zero means 500ms. A renewed
	// lock must survive scheduling delays of a third of it, so keep it at
	// 300ms or more on a loaded machine. The suite takes a few TTLs of real
	// time.
	TTL time.Duration

	// Patience bounds every wait for something that must happen (a loss
	// noticed, a hand-off); zero means 5s. Only a failing test waits that
	// long.
	Patience time.Duration

	// Shared says the Locker has read locks (dlock.WithShared): the Shared*
	// subtests run. Without it one subtest, SharedRefused, checks that the
	// Locker refuses WithShared with ErrInvalidOption instead.
	Shared bool

	// Skip names subtests the implementation does not support, each with
	// the reason, for example {"MaxHold": "Redlock refuses WithMaxHold"}.
	// A name that is no subtest fails the suite, so the list cannot rot.
	Skip map[string]string

	// NoSemaphores, when set, is why the Locker does not offer
	// dlock.WithPermits: the Semaphore* subtests are skipped with it, and the
	// suite checks instead that WithPermits is refused with ErrInvalidOption.
	NoSemaphores string
}

// Conformance checks that the Lockers h makes behave as dlock.Locker
// promises, and as *dlock.Client does: one subtest per property, each with
// a fresh Locker and names of its own. Run it from a test of every
// implementation; dlocktest runs it against its Locker and the dlock
// package against a Client on a real redis-server, so the double cannot
// drift from the real thing.
//
// The subtests run one after the other on the real clock, a few seconds in
// all. They check: an acquire and release round trip; the shape of a busy
// error; the hand-off from a releasing holder to a waiter, and waiters
// served in arrival order; the wait limit, and a context cancelled or past
// its deadline during the wait or before the call; fences that grow with
// every acquisition, across a loss; invalid input refused before any effect;
// Release, Refresh and TTL after Release; a loss behind the holder's back
// (Expire), a lease without renewal running out (the stale holder cannot
// touch the next one's lock, and its methods report ErrNotHeld from the
// moment its context ended), renewal keeping a lock
// past its TTL, WithMaxHold's limit, WithMinHold's minimum; Refresh within and outside the bounds;
// Do and dlock.Run (the lock in fn's context, release after fn and on a
// panic, a loss during fn reported); mutual exclusion among goroutines;
// Close, when the Locker has a Close(context.Context) error method; and read
// locks (see Harness.Shared): readers coexist, exclude a writer both ways, a
// waiting writer keeps new readers out, a lost reader learns it.
func Conformance(t *testing.T, h Harness) {
	if h.New == nil || h.Expire == nil {
		t.Fatal("dlocktest.Conformance: Harness.New and Harness.Expire are required")
	}
	s := &suite{h: h, bounds: h.Bounds, ttl: h.TTL, patience: h.Patience}
	if s.bounds == (lockerkit.TTLBounds{}) {
		s.bounds = lockerkit.DefaultTTLBounds
	}
	if s.ttl == 0 {
		s.ttl = 500 * time.Millisecond
	}
	if s.patience == 0 {
		s.patience = 5 * time.Second
	}
	tests := s.tests()
	for name := range h.Skip {
		if !slices.ContainsFunc(tests, func(c conformanceTest) bool { return c.name == name }) {
			t.Errorf("Harness.Skip names %q, which is no subtest of Conformance", name)
		}
	}
	for _, c := range tests {
		t.Run(c.name, func(t *testing.T) {
			if why, ok := h.Skip[c.name]; ok {
				t.Skip(why)
			}
			if why := h.NoSemaphores; why != "" && strings.HasPrefix(c.name, "Semaphore") && c.name != "SemaphoreRefused" {
				t.Skip(why)
			}
			c.run(t)
		})
	}
}

type conformanceTest struct {
	name string
	run  func(t *testing.T)
}

type suite struct {
	h             Harness
	bounds        lockerkit.TTLBounds
	ttl, patience time.Duration
}

// arrival is how long a waiter is given to get in line without a Waiters
// hook.
const arrival = 100 * time.Millisecond

func (s *suite) tests() []conformanceTest {
	tests := []conformanceTest{
		{"RoundTrip", s.roundTrip},
		{"BusyError", s.busyError},
		{"HandOff", s.handOff},
		{"FIFO", s.fifo},
		{"WaitLimit", s.waitLimit},
		{"ContextCancelled", s.contextCancelled},
		{"ContextDeadline", s.contextDeadline},
		{"ContextEndedBefore", s.contextEndedBefore},
		{"FencesGrow", s.fencesGrow},
		{"InvalidInput", s.invalidInput},
		{"AfterRelease", s.afterRelease},
		{"Loss", s.loss},
		{"LeaseWithoutRenewal", s.leaseWithoutRenewal},
		{"NotHeldOnceLost", s.notHeldOnceLost},
		{"RenewalKeepsLock", s.renewalKeepsLock},
		{"MaxHold", s.maxHold},
		{"MinHold", s.minHold},
		{"Refresh", s.refresh},
		{"Do", s.do},
		{"DoPanic", s.doPanic},
		{"DoLoss", s.doLoss},
		{"DoBusy", s.doBusy},
		{"Run", s.runLock},
		{"Reentry", s.reentry},
		{"ReentryOptIn", s.reentryOptIn},
		{"MutualExclusion", s.mutualExclusion},
		{"Close", s.close},
		{"SemaphorePermits", s.semPermits},
		{"SemaphoreFIFO", s.semFIFO},
		{"SemaphoreLease", s.semLease},
		{"SemaphoreMismatch", s.semMismatch},
		{"SemaphoreRefused", s.semRefused},
	}
	return append(tests, s.sharedTests()...)
}

// name is the lock name of one subtest: unique, so subtests can share a
// backend.
func (s *suite) name(t *testing.T) string { return "conformance:" + t.Name() }

// try takes name at once, with the suite's TTL before opts.
func (s *suite) try(t *testing.T, l dlock.Locker, name string, opts ...dlock.AcquireOption) dlock.Lock {
	t.Helper()
	lk, err := l.TryAcquire(context.Background(), name, append([]dlock.AcquireOption{dlock.WithTTL(s.ttl)}, opts...)...)
	if err != nil || lk == nil {
		t.Fatalf("TryAcquire(%q) = %v, %v; want a lock", name, lk, err)
	}
	return lk
}

// await takes name, waiting for it at most the suite's patience.
func (s *suite) await(t *testing.T, l dlock.Locker, name string) dlock.Lock {
	t.Helper()
	lk, err := l.Acquire(context.Background(), name, dlock.WithTTL(s.ttl), dlock.WithWait(s.patience))
	if err != nil || lk == nil {
		t.Fatalf("Acquire(%q) = %v, %v; want a lock", name, lk, err)
	}
	return lk
}

func (s *suite) release(t *testing.T, lk dlock.Lock) {
	t.Helper()
	if err := lk.Release(context.Background()); err != nil {
		t.Fatalf("Release(%q): %v", lk.Name(), err)
	}
}

type acquired struct {
	lock dlock.Lock
	err  error
}

// acquireAsync runs Acquire in a goroutine; the result arrives on the
// channel (buffered: the goroutine never blocks on it).
func acquireAsync(ctx context.Context, l dlock.Locker, name string, opts ...dlock.AcquireOption) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		lk, err := l.Acquire(ctx, name, opts...)
		ch <- acquired{lk, err}
	}()
	return ch
}

func (s *suite) receive(t *testing.T, ch <-chan acquired) acquired {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(s.patience):
		t.Fatalf("Acquire did not return within %v", s.patience)
		return acquired{}
	}
}

// inLine waits until n Acquire calls wait for name on l.
func (s *suite) inLine(t *testing.T, l dlock.Locker, name string, n int) {
	t.Helper()
	if s.h.Waiters == nil {
		time.Sleep(arrival)
		return
	}
	deadline := time.Now().Add(s.patience)
	for s.h.Waiters(l, name) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters for %q after %v, want %d", s.h.Waiters(l, name), name, s.patience, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// ended waits for ctx to end and returns its cause.
func (s *suite) ended(t *testing.T, ctx context.Context, what string) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(s.patience):
		t.Fatalf("%s: the lock's context did not end within %v", what, s.patience)
		return nil
	}
}

func live(t *testing.T, lk dlock.Lock, what string) {
	t.Helper()
	if err := lk.Context().Err(); err != nil {
		t.Fatalf("%s: the lock's context ended: %v", what, context.Cause(lk.Context()))
	}
}

// leased checks that lk is live and that its TTL reports lease left.
func leased(t *testing.T, lk dlock.Lock, what string) {
	t.Helper()
	live(t, lk, what)
	if left, err := lk.TTL(context.Background()); err != nil || left <= 0 {
		t.Fatalf("%s: TTL() = %v, %v; want lease left", what, left, err)
	}
}

// isOpError checks that err matches target and that its first *dlock.Error
// names op and name.
func isOpError(t *testing.T, err error, target error, op, name string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v does not match %v", err, target)
	}
	var de *dlock.Error
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T) is no *dlock.Error", err, err)
	}
	if de.Op != op || de.Name != name {
		t.Fatalf("error %v names op %q and lock %q, want %q and %q", err, de.Op, de.Name, op, name)
	}
}

// isBusy checks the shape of a busy error: ErrNotObtained, a
// *dlock.NotObtainedError naming the lock with the holder's lease, inside a
// *dlock.Error of Op "acquire"; and whether it matches the context errors.
func (s *suite) isBusy(t *testing.T, lk dlock.Lock, err error, name string, cause error) {
	t.Helper()
	if lk != nil {
		t.Fatalf("a busy acquisition returned a lock (%v) with error %v", lk, err)
	}
	isOpError(t, err, dlock.ErrNotObtained, "acquire", name)
	var nob *dlock.NotObtainedError
	if !errors.As(err, &nob) {
		t.Fatalf("busy error %v holds no *dlock.NotObtainedError", err)
	}
	if nob.Name != name {
		t.Fatalf("NotObtainedError.Name = %q, want %q", nob.Name, name)
	}
	if nob.HolderTTL < 0 || nob.HolderTTL > s.ttl {
		t.Fatalf("NotObtainedError.HolderTTL = %v, want within [0, %v]", nob.HolderTTL, s.ttl)
	}
	for _, c := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, c) != (c == cause) {
			t.Fatalf("busy error %v: matches %v = %v, want %v", err, c, errors.Is(err, c), c == cause)
		}
	}
}

func (s *suite) roundTrip(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	lk := s.try(t, l, name)
	if lk.Name() != name || lk.Fence() <= 0 || lk.Token() == "" {
		t.Fatalf("lock: name %q fence %d token %q; want %q, a positive fence, a token", lk.Name(), lk.Fence(), lk.Token(), name)
	}
	live(t, lk, "held")
	left, err := lk.TTL(ctx)
	if err != nil || left <= 0 || left > s.ttl {
		t.Fatalf("TTL() = %v, %v; want within (0, %v]", left, err, s.ttl)
	}
	s.release(t, lk)
	if cause := s.ended(t, lk.Context(), "released"); !errors.Is(cause, dlock.ErrReleased) || errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause after Release: %v, want ErrReleased", cause)
	}
	again := s.await(t, l, name)
	if again.Token() == lk.Token() || again.Fence() <= lk.Fence() {
		t.Fatalf("second acquisition: token %s… fence %d after %s… %d; want a new token, a larger fence",
			tokenPrefix(again), again.Fence(), tokenPrefix(lk), lk.Fence())
	}
	s.release(t, again)
}

// tokenPrefix shows enough of a token to tell two apart, never all of it:
// a token releases the lock.
func tokenPrefix(lk dlock.Lock) string { return lk.Token()[:min(8, len(lk.Token()))] }

func (s *suite) busyError(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	holder := s.try(t, l, name)
	lk, err := l.TryAcquire(ctx, name)
	s.isBusy(t, lk, err, name, nil)
	lk, err = l.Acquire(ctx, name, dlock.WithWait(0))
	s.isBusy(t, lk, err, name, nil)
	live(t, holder, "holder after busy attempts")
	s.release(t, holder)
}

func (s *suite) handOff(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	first := s.try(t, l, name)
	ch := acquireAsync(context.Background(), l, name, dlock.WithTTL(s.ttl), dlock.WithWait(s.patience))
	s.inLine(t, l, name, 1)
	s.release(t, first)
	r := s.receive(t, ch)
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if r.lock.Fence() <= first.Fence() {
		t.Fatalf("handed-over fence %d, want above %d", r.lock.Fence(), first.Fence())
	}
	live(t, r.lock, "handed over")
	s.release(t, r.lock)
}

func (s *suite) fifo(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	holder := s.try(t, l, name)
	const n = 4
	type turn struct {
		i     int
		fence int64
		err   error
	}
	turns := make(chan turn, n)
	for i := range n {
		go func() {
			lk, err := l.Acquire(context.Background(), name, dlock.WithTTL(s.ttl), dlock.WithWait(s.patience))
			if err != nil {
				turns <- turn{i: i, err: err}
				return
			}
			// Sent before the release: the next waiter's turn comes after.
			turns <- turn{i: i, fence: lk.Fence()}
			_ = lk.Release(context.Background())
		}()
		s.inLine(t, l, name, i+1)
	}
	s.release(t, holder)
	last := holder.Fence()
	for want := range n {
		select {
		case got := <-turns:
			if got.err != nil {
				t.Fatalf("waiter %d: %v", got.i, got.err)
			}
			if got.i != want || got.fence <= last {
				t.Fatalf("turn %d went to waiter %d with fence %d (last %d); want waiter %d and a larger fence", want, got.i, got.fence, last, want)
			}
			last = got.fence
		case <-time.After(s.patience):
			t.Fatalf("turn %d did not come within %v", want, s.patience)
		}
	}
}

func (s *suite) waitLimit(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	holder := s.try(t, l, name)
	const wait = 100 * time.Millisecond
	// Patience bounds an implementation that ignores the limit; its error
	// then matches DeadlineExceeded, which isBusy refuses.
	ctx, cancel := context.WithTimeout(context.Background(), s.patience)
	defer cancel()
	start := time.Now()
	lk, err := l.Acquire(ctx, name, dlock.WithWait(wait))
	s.isBusy(t, lk, err, name, nil)
	if took := time.Since(start); took < wait {
		t.Fatalf("Acquire gave up after %v, before the wait limit %v", took, wait)
	}
	live(t, holder, "holder after a waiter gave up")
	s.release(t, holder)
}

func (s *suite) contextCancelled(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	holder := s.try(t, l, name)
	ctx, cancel := context.WithCancel(context.Background())
	ch := acquireAsync(ctx, l, name, dlock.WithTTL(s.ttl), dlock.WithWait(s.patience))
	s.inLine(t, l, name, 1)
	cancel()
	r := s.receive(t, ch)
	s.isBusy(t, r.lock, r.err, name, context.Canceled)
	// The waiter that gave up is not handed the lock: the next caller gets
	// it.
	s.release(t, holder)
	s.release(t, s.await(t, l, name))
}

func (s *suite) contextDeadline(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	holder := s.try(t, l, name)
	const wait = 150 * time.Millisecond
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	lk, err := l.Acquire(ctx, name, dlock.WithWait(s.patience))
	s.isBusy(t, lk, err, name, context.DeadlineExceeded)
	if took := time.Since(start); took < wait {
		t.Fatalf("Acquire gave up after %v, before the deadline %v", took, wait)
	}
	s.release(t, holder)
	s.release(t, s.await(t, l, name))
}

func (s *suite) contextEndedBefore(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := map[string]func() (dlock.Lock, error){
		"TryAcquire": func() (dlock.Lock, error) { return l.TryAcquire(ctx, name, dlock.WithTTL(s.ttl)) },
		"Acquire":    func() (dlock.Lock, error) { return l.Acquire(ctx, name, dlock.WithTTL(s.ttl)) },
		"Do": func() (dlock.Lock, error) {
			return nil, l.Do(ctx, name, func(context.Context) error {
				t.Error("Do ran fn on a cancelled context")
				return nil
			})
		},
	}
	for _, call := range []string{"TryAcquire", "Acquire", "Do"} {
		lk, err := calls[call]()
		if lk != nil {
			t.Fatalf("%s on a cancelled context returned a lock", call)
		}
		isOpError(t, err, context.Canceled, "acquire", name)
		if errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("%s on a cancelled context of a free lock: %v matches ErrNotObtained, want the context's error alone", call, err)
		}
	}
	s.release(t, s.try(t, l, name)) // nothing was taken
}

func (s *suite) fencesGrow(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	var last int64
	next := func(lk dlock.Lock) {
		t.Helper()
		if lk.Fence() <= last {
			t.Fatalf("fence %d after %d, want it larger", lk.Fence(), last)
		}
		last = lk.Fence()
	}
	for range 3 {
		lk := s.try(t, l, name)
		next(lk)
		s.release(t, lk)
	}
	lost := s.try(t, l, name)
	next(lost)
	s.h.Expire(t, l, name)
	s.ended(t, lost.Context(), "after Expire")
	lk := s.await(t, l, name)
	next(lk)
	s.release(t, lk)
}

func (s *suite) invalidInput(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	// The name is busy: bad input must be reported as such, at once, not
	// as busy after a wait.
	holder := s.try(t, l, name)
	long := strings.Repeat("x", dlock.MaxNameLength+1)
	cases := []struct {
		what string
		name string
		opts []dlock.AcquireOption
		want error
	}{
		{"empty name", "", nil, dlock.ErrInvalidName},
		{"name too long", long, nil, dlock.ErrInvalidName},
		{"name starting with }", "}" + name, nil, dlock.ErrInvalidName},
		{"ttl zero", name, []dlock.AcquireOption{dlock.WithTTL(0)}, dlock.ErrInvalidTTL},
		{"ttl negative", name, []dlock.AcquireOption{dlock.WithTTL(-time.Second)}, dlock.ErrInvalidTTL},
		{"ttl below min", name, []dlock.AcquireOption{dlock.WithTTL(s.bounds.Min / 2)}, dlock.ErrInvalidTTL},
		{"ttl above max", name, []dlock.AcquireOption{dlock.WithTTL(s.bounds.Max + time.Millisecond)}, dlock.ErrInvalidTTL},
		{"negative wait", name, []dlock.AcquireOption{dlock.WithWait(-time.Second)}, dlock.ErrInvalidOption},
		{"negative max hold", name, []dlock.AcquireOption{dlock.WithMaxHold(-time.Second)}, dlock.ErrInvalidOption},
		{"negative min hold", name, []dlock.AcquireOption{dlock.WithMinHold(-time.Second)}, dlock.ErrInvalidOption},
		{"min hold above max hold", name, []dlock.AcquireOption{dlock.WithMinHold(2 * s.ttl), dlock.WithMaxHold(s.ttl)}, dlock.ErrInvalidOption},
		{"negative durable grant", name, []dlock.AcquireOption{dlock.WithDurableGrant(-time.Second)}, dlock.ErrInvalidOption},
		{"durable grant below 1ms", name, []dlock.AcquireOption{dlock.WithDurableGrant(500 * time.Microsecond)}, dlock.ErrInvalidOption},
		{"durable grant above a third of the TTL", name, []dlock.AcquireOption{dlock.WithDurableGrant(s.ttl / 2)}, dlock.ErrInvalidOption},
	}
	for _, c := range cases {
		opts := append([]dlock.AcquireOption{dlock.WithTTL(s.ttl), dlock.WithWait(s.patience)}, c.opts...)
		start := time.Now()
		for _, call := range []string{"TryAcquire", "Acquire", "Do"} {
			var lk dlock.Lock
			var err error
			switch call {
			case "TryAcquire":
				lk, err = l.TryAcquire(ctx, c.name, opts...)
			case "Acquire":
				lk, err = l.Acquire(ctx, c.name, opts...)
			case "Do":
				err = l.Do(ctx, c.name, func(context.Context) error {
					t.Errorf("%s: Do ran fn", c.what)
					return nil
				}, opts...)
			}
			if lk != nil {
				t.Fatalf("%s: %s returned a lock", c.what, call)
			}
			isOpError(t, err, c.want, "acquire", c.name)
			if errors.Is(err, dlock.ErrNotObtained) {
				t.Fatalf("%s: %s: %v matches ErrNotObtained too", c.what, call, err)
			}
		}
		if took := time.Since(start); took > s.patience/2 {
			t.Fatalf("%s: refusing took %v: it waited", c.what, took)
		}
	}
	live(t, holder, "holder after refused input")
	s.release(t, holder)
	s.release(t, s.try(t, l, name)) // nothing left behind
}

func (s *suite) afterRelease(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	lk := s.try(t, l, name)
	s.release(t, lk)
	isOpError(t, lk.Release(ctx), dlock.ErrNotHeld, "release", name)
	isOpError(t, lk.Refresh(ctx, s.ttl), dlock.ErrNotHeld, "refresh", name)
	_, err := lk.TTL(ctx)
	isOpError(t, err, dlock.ErrNotHeld, "ttl", name)
	if cause := context.Cause(lk.Context()); !errors.Is(cause, dlock.ErrReleased) {
		t.Fatalf("cause after a second Release: %v, want ErrReleased", cause)
	}
}

func (s *suite) loss(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	lk := s.try(t, l, name)
	s.h.Expire(t, l, name)
	cause := s.ended(t, lk.Context(), "after Expire")
	if !errors.Is(cause, dlock.ErrLockLost) || errors.Is(cause, dlock.ErrHoldLimit) {
		t.Fatalf("cause after Expire: %v, want ErrLockLost without ErrHoldLimit", cause)
	}
	isOpError(t, lk.Refresh(ctx, s.ttl), dlock.ErrNotHeld, "refresh", name)
	_, err := lk.TTL(ctx)
	isOpError(t, err, dlock.ErrNotHeld, "ttl", name)
	isOpError(t, lk.Release(ctx), dlock.ErrNotHeld, "release", name)
	if cause := context.Cause(lk.Context()); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause after releasing a lost lock: %v, want it to stay ErrLockLost", cause)
	}
	next := s.await(t, l, name)
	if next.Fence() <= lk.Fence() {
		t.Fatalf("fence %d after the lost %d", next.Fence(), lk.Fence())
	}
	s.release(t, next)
}

// short is a lease that runs out quickly, within the bounds.
func (s *suite) short() time.Duration {
	return min(max(s.bounds.Min, 200*time.Millisecond), s.bounds.Max)
}

func (s *suite) leaseWithoutRenewal(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	ttl := s.short()
	start := time.Now()
	lk := s.try(t, l, name, dlock.WithTTL(ttl), dlock.WithoutRenewal())
	cause := s.ended(t, lk.Context(), "lease without renewal")
	if took := time.Since(start); took < ttl/2 {
		t.Fatalf("a lease of %v ended after %v", ttl, took)
	}
	if !errors.Is(cause, dlock.ErrLockLost) || errors.Is(cause, dlock.ErrHoldLimit) {
		t.Fatalf("cause: %v, want ErrLockLost without ErrHoldLimit", cause)
	}
	s.staleCannotTouch(t, l, lk)
}

// staleCannotTouch checks a lock whose lease ran out: the next caller gets
// the name, and the old holder's Release, Refresh and TTL report ErrNotHeld
// and leave the new holder alone.
func (s *suite) staleCannotTouch(t *testing.T, l dlock.Locker, stale dlock.Lock) {
	t.Helper()
	ctx, name := context.Background(), stale.Name()
	next := s.await(t, l, name)
	if next.Fence() <= stale.Fence() {
		t.Fatalf("fence %d after the expired %d", next.Fence(), stale.Fence())
	}
	isOpError(t, stale.Refresh(ctx, s.ttl), dlock.ErrNotHeld, "refresh", name)
	_, err := stale.TTL(ctx)
	isOpError(t, err, dlock.ErrNotHeld, "ttl", name)
	isOpError(t, stale.Release(ctx), dlock.ErrNotHeld, "release", name)
	if cause := context.Cause(stale.Context()); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause after releasing an expired lock: %v, want it to stay ErrLockLost", cause)
	}
	leased(t, next, "the next holder after the stale one's calls")
	s.release(t, next)
}

// notHeldOnceLost checks the promise of dlock.Lock: once the lock's context
// ended with a loss, its methods report ErrNotHeld, at once, even while the
// backend may still keep the lease (a Client ends the context a drift
// margin before Redis lets the key expire).
func (s *suite) notHeldOnceLost(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	lk := s.try(t, l, name, dlock.WithTTL(s.short()), dlock.WithoutRenewal())
	s.ended(t, lk.Context(), "lease without renewal")
	_, err := lk.TTL(ctx)
	isOpError(t, err, dlock.ErrNotHeld, "ttl", name)
	isOpError(t, lk.Refresh(ctx, s.ttl), dlock.ErrNotHeld, "refresh", name)
	isOpError(t, lk.Release(ctx), dlock.ErrNotHeld, "release", name)
	if cause := context.Cause(lk.Context()); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause after releasing a lost lock: %v, want it to stay ErrLockLost", cause)
	}
}

func (s *suite) renewalKeepsLock(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	lk := s.try(t, l, name)
	time.Sleep(2 * s.ttl)
	leased(t, lk, "renewed lock after two TTLs")
	other, err := l.TryAcquire(ctx, name)
	s.isBusy(t, other, err, name, nil)
	s.release(t, lk)
}

func (s *suite) maxHold(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	limit := s.ttl * 6 / 5 // a renewal or two, then the limit
	start := time.Now()
	lk := s.try(t, l, name, dlock.WithMaxHold(limit))
	cause := s.ended(t, lk.Context(), "WithMaxHold")
	if took := time.Since(start); took < limit/2 {
		t.Fatalf("a hold limit of %v ended the lock after %v", limit, took)
	}
	if !errors.Is(cause, dlock.ErrLockLost) || !errors.Is(cause, dlock.ErrHoldLimit) {
		t.Fatalf("cause: %v, want ErrLockLost and ErrHoldLimit", cause)
	}
	s.staleCannotTouch(t, l, lk)
}

func (s *suite) refresh(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	lk := s.try(t, l, name, dlock.WithoutRenewal())
	longer := min(3*s.ttl, s.bounds.Max)
	if err := lk.Refresh(ctx, longer); err != nil {
		t.Fatalf("Refresh(%v): %v", longer, err)
	}
	if left, err := lk.TTL(ctx); err != nil || left <= s.ttl {
		t.Fatalf("TTL() after Refresh(%v) = %v, %v; want above %v", longer, left, err, s.ttl)
	}
	for _, bad := range []time.Duration{0, -time.Second, s.bounds.Min / 2, s.bounds.Max + time.Millisecond} {
		isOpError(t, lk.Refresh(ctx, bad), dlock.ErrInvalidTTL, "refresh", name)
	}
	// Past the first lease: the refreshed one carries the lock.
	time.Sleep(s.ttl * 3 / 2)
	leased(t, lk, "refreshed lock after its first lease")
	s.release(t, lk)
}

func (s *suite) do(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	errFn := errors.New("fn failed")
	var inFn dlock.Lock
	err := l.Do(ctx, name, func(fctx context.Context) error {
		lk, ok := dlock.FromContext(fctx)
		if !ok {
			t.Error("fn's context carries no lock")
			return errFn
		}
		inFn = lk
		if lk.Name() != name || lk.Fence() <= 0 || lk.Context().Err() != nil {
			t.Errorf("fn's lock: name %q fence %d ended %v; want %q, a fence, live", lk.Name(), lk.Fence(), lk.Context().Err(), name)
		}
		other, err := l.TryAcquire(context.Background(), name)
		if other != nil || !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("TryAcquire while Do runs fn: %v, %v; want busy", other, err)
		}
		return errFn
	}, dlock.WithTTL(s.ttl), dlock.WithWait(s.patience))
	if !errors.Is(err, errFn) || errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do: %v, want fn's error alone", err)
	}
	if inFn == nil {
		t.Fatal("Do did not run fn")
	}
	if cause := context.Cause(inFn.Context()); !errors.Is(cause, dlock.ErrReleased) {
		t.Fatalf("lock after Do: cause %v, want ErrReleased", cause)
	}
	isOpError(t, inFn.Release(ctx), dlock.ErrNotHeld, "release", name)
	s.release(t, s.try(t, l, name))
}

func (s *suite) doPanic(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want fn's panic boom", p)
			}
		}()
		_ = l.Do(context.Background(), name, func(context.Context) error { panic("boom") },
			dlock.WithTTL(s.ttl), dlock.WithWait(s.patience))
	}()
	s.release(t, s.try(t, l, name)) // released on the panic
}

func (s *suite) doLoss(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	errFn := errors.New("fn gave up")
	err := l.Do(context.Background(), name, func(fctx context.Context) error {
		s.h.Expire(t, l, name)
		select {
		case <-fctx.Done():
		case <-time.After(s.patience):
			t.Errorf("fn's context did not end within %v of Expire", s.patience)
			return errFn
		}
		if cause := context.Cause(fctx); !errors.Is(cause, dlock.ErrLockLost) {
			t.Errorf("fn's context cause: %v, want ErrLockLost", cause)
		}
		return errFn
	}, dlock.WithTTL(s.ttl), dlock.WithWait(s.patience))
	if !errors.Is(err, errFn) {
		t.Fatalf("Do: %v, want fn's error", err)
	}
	isOpError(t, err, dlock.ErrLockLost, "do", name)
	s.release(t, s.await(t, l, name))
}

func (s *suite) doBusy(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	holder := s.try(t, l, name)
	err := l.Do(context.Background(), name, func(context.Context) error {
		t.Error("Do ran fn on a busy lock")
		return nil
	}, dlock.WithWait(0))
	s.isBusy(t, nil, err, name, nil)
	s.release(t, holder)
}

func (s *suite) runLock(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	outer := s.try(t, l, name+"/outer")
	inner := s.try(t, l, name)
	octx := dlock.NewContext(ctx, outer)
	if got, ok := dlock.FromContext(octx); !ok || got != outer {
		t.Fatalf("FromContext(NewContext(ctx, l)) = %v, %v; want l", got, ok)
	}
	// A lock's own context carries that lock, not one its acquirer's
	// context held: fencing code reading its context must get its fence.
	nested, err := l.TryAcquire(octx, name+"/nested", dlock.WithTTL(s.ttl))
	if err != nil {
		t.Fatalf("TryAcquire under a lock: %v", err)
	}
	if got, ok := dlock.FromContext(nested.Context()); !ok || got.Name() != nested.Name() {
		t.Fatalf("FromContext(lock.Context()) = %v, %v; want that lock", got, ok)
	}
	s.release(t, nested)
	err = dlock.Run(octx, inner, func(fctx context.Context) error {
		if got, ok := dlock.FromContext(fctx); !ok || got != inner {
			t.Errorf("FromContext in Run = %v, %v; want the innermost lock", got, ok)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if cause := context.Cause(inner.Context()); !errors.Is(cause, dlock.ErrReleased) {
		t.Fatalf("lock after Run: cause %v, want ErrReleased", cause)
	}
	live(t, outer, "the outer lock after Run")
	s.release(t, outer)
}

// reentry: acquiring a name the caller's context already holds fails at
// once with ErrReentrant, instead of waiting for the caller itself until
// the wait limit and then calling it busy. The check is by context: another
// context, or the same one after the release, is an ordinary caller.
func (s *suite) reentry(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	err := l.Do(ctx, name, func(fctx context.Context) error {
		for _, try := range []struct {
			what string
			call func() (dlock.Lock, error)
		}{
			// A wait limit far beyond the suite's patience, bounded by it: a
			// Locker that waited for the caller answers busy, late.
			{"Acquire", func() (dlock.Lock, error) {
				wctx, cancel := context.WithTimeout(fctx, s.patience)
				defer cancel()
				return l.Acquire(wctx, name, dlock.WithWait(time.Hour))
			}},
			{"TryAcquire", func() (dlock.Lock, error) { return l.TryAcquire(fctx, name) }},
		} {
			lk, err := try.call()
			if lk != nil || !errors.Is(err, dlock.ErrReentrant) || errors.Is(err, dlock.ErrNotObtained) {
				t.Errorf("%s of a name the context holds: %v, %v; want ErrReentrant at once", try.what, lk, err)
			}
			isOpError(t, err, dlock.ErrReentrant, "acquire", name)
		}
		held, ok := dlock.FromContext(fctx)
		if !ok {
			t.Fatal("Do's context carries no lock")
		}
		// The lock's own context carries it too.
		if _, err := l.TryAcquire(held.Context(), name); !errors.Is(err, dlock.ErrReentrant) {
			t.Errorf("TryAcquire with the lock's own context: %v, want ErrReentrant", err)
		}
		// Another name is no re-entry; another context is an ordinary
		// (busy) caller.
		other := s.try(t, l, name+"/other")
		s.release(t, other)
		_, err := l.TryAcquire(ctx, name)
		s.isBusy(t, nil, err, name, nil)
		live(t, held, "the held lock after the refused acquisitions")
		return nil
	}, dlock.WithTTL(s.ttl))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	// The context of a released lock holds nothing.
	lk := s.try(t, l, name)
	rctx := dlock.NewContext(ctx, lk)
	s.release(t, lk)
	again, err := l.TryAcquire(rctx, name, dlock.WithTTL(s.ttl))
	if err != nil {
		t.Fatalf("TryAcquire with the context of a released lock: %v", err)
	}
	s.release(t, again)
}

// reentryOptIn checks WithReentry: a nested acquisition of a name the
// context holds is a counted handle on the same lock, and the lock is
// released when the last handle is, whatever the order.
func (s *suite) reentryOptIn(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	re := dlock.WithReentry()
	busy := func(what string) {
		t.Helper()
		lk, err := l.TryAcquire(ctx, name, dlock.WithTTL(s.ttl))
		if lk != nil {
			s.release(t, lk)
			t.Fatalf("%s: another caller got the lock", what)
		}
		s.isBusy(t, lk, err, name, nil)
	}
	err := l.Do(ctx, name, func(fctx context.Context) error {
		outer, _ := dlock.FromContext(fctx)
		for _, try := range []struct {
			what string
			call func() (dlock.Lock, error)
		}{
			{"Acquire", func() (dlock.Lock, error) {
				wctx, cancel := context.WithTimeout(fctx, s.patience)
				defer cancel()
				return l.Acquire(wctx, name, re, dlock.WithWait(time.Hour))
			}},
			{"TryAcquire", func() (dlock.Lock, error) { return l.TryAcquire(fctx, name, re) }},
		} {
			in, err := try.call()
			if err != nil {
				t.Fatalf("%s with WithReentry of a name the context holds: %v", try.what, err)
			}
			if in.Name() != name || in.Token() != outer.Token() || in.Fence() != outer.Fence() {
				t.Errorf("%s: nested handle (%q, fence %d) is not the held lock (%q, fence %d)",
					try.what, in.Name(), in.Fence(), outer.Name(), outer.Fence())
			}
			if _, err := in.TTL(ctx); err != nil {
				t.Errorf("%s: TTL of the nested handle: %v", try.what, err)
			}
			if err := in.Refresh(ctx, s.ttl); err != nil {
				t.Errorf("%s: Refresh of the nested handle: %v", try.what, err)
			}
			s.release(t, in)
			// Its own end, not the lock's.
			if !errors.Is(context.Cause(in.Context()), dlock.ErrReleased) {
				t.Errorf("%s: nested handle's context after its release: %v, want ErrReleased", try.what, context.Cause(in.Context()))
			}
			live(t, outer, try.what+": the lock after the nested release")
			busy(try.what + ": after the nested release")
			err = in.Release(ctx)
			isOpError(t, err, dlock.ErrNotHeld, "release", name)
			_, err = in.TTL(ctx)
			isOpError(t, err, dlock.ErrNotHeld, "ttl", name)
			err = in.Refresh(ctx, s.ttl)
			isOpError(t, err, dlock.ErrNotHeld, "refresh", name)
		}
		// Nested Do: the function sees the nested handle, and the lock
		// outlives it.
		err := l.Do(fctx, name, func(ictx context.Context) error {
			in, ok := dlock.FromContext(ictx)
			if !ok || in.Fence() != outer.Fence() {
				t.Errorf("nested Do's context: %v, %v; want the held lock", in, ok)
			}
			return nil
		}, re)
		if err != nil {
			t.Errorf("nested Do: %v", err)
		}
		live(t, outer, "the lock after a nested Do")
		return nil
	}, dlock.WithTTL(s.ttl), re)
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	// Released when the outer Do returned: free for others.
	s.release(t, s.try(t, l, name))

	// Released out of order: the outer first. The lock stays held until
	// the last handle goes.
	outer := s.try(t, l, name, re)
	in, err := l.TryAcquire(dlock.NewContext(ctx, outer), name, re)
	if err != nil {
		t.Fatalf("nested TryAcquire: %v", err)
	}
	s.release(t, outer)
	live(t, in, "the nested handle after the outer's release")
	busy("after the outer's release, with a nested handle left")
	s.release(t, in)
	if !errors.Is(context.Cause(in.Context()), dlock.ErrReleased) {
		t.Errorf("context after the last release: %v, want ErrReleased", context.Cause(in.Context()))
	}
	s.release(t, s.try(t, l, name))

	// The lock's own context, which the work is given, re-enters too, and
	// what it carries is the handle: releasing it goes through the count.
	outer = s.try(t, l, name, re)
	in, err = l.TryAcquire(outer.Context(), name, re)
	if err != nil {
		t.Fatalf("nested TryAcquire with the outer handle's Context(): %v", err)
	}
	if got, _ := dlock.FromContext(in.Context()); got != in {
		t.Errorf("FromContext(handle.Context()) = %v, want the handle itself", got)
	}
	s.release(t, in)
	busy("after a nested release through the lock's own context")
	// A nested acquisition with an ended context fails as any acquisition
	// does, though it would send nothing.
	ended, cancel := context.WithCancel(outer.Context())
	cancel()
	if lk, err := l.TryAcquire(ended, name, re); lk != nil || !errors.Is(err, context.Canceled) {
		t.Errorf("nested TryAcquire with an ended context: %v, %v; want context.Canceled", lk, err)
	}
	s.release(t, outer)
	s.release(t, s.try(t, l, name))

	// A lock taken without WithReentry is not re-entered: the outer code
	// did not agree to share it.
	plain := s.try(t, l, name)
	lk, err := l.TryAcquire(dlock.NewContext(ctx, plain), name, re)
	if lk != nil {
		t.Fatalf("WithReentry re-entered a lock taken without it")
	}
	isOpError(t, err, dlock.ErrReentrant, "acquire", name)
	s.release(t, plain)
}

func (s *suite) mutualExclusion(t *testing.T) {
	l, name := s.h.New(t), s.name(t)
	const workers, rounds = 6, 5
	var (
		inside  atomic.Int32
		mu      sync.Mutex
		fences  []int64
		wg      sync.WaitGroup
		errs    = make(chan error, workers*rounds)
		overlap atomic.Bool
	)
	for range workers {
		wg.Go(func() {
			for range rounds {
				errs <- l.Do(context.Background(), name, func(ctx context.Context) error {
					if inside.Add(1) != 1 {
						overlap.Store(true)
					}
					lk, _ := dlock.FromContext(ctx)
					mu.Lock()
					fences = append(fences, lk.Fence())
					mu.Unlock()
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					return nil
				}, dlock.WithTTL(s.ttl), dlock.WithWait(s.patience))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
	}
	if overlap.Load() {
		t.Fatal("two holders were inside at once")
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fences in order of entry: %v; want them growing", fences)
		}
	}
}

func (s *suite) close(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	c, ok := l.(interface{ Close(context.Context) error })
	if !ok {
		t.Skipf("%T has no Close(context.Context) error method", l)
	}
	holder := s.try(t, l, name)
	ch := acquireAsync(ctx, l, name, dlock.WithTTL(s.ttl), dlock.WithWait(s.patience))
	s.inLine(t, l, name, 1)
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	r := s.receive(t, ch)
	if r.lock != nil {
		t.Fatalf("a wait ended by Close returned a lock")
	}
	isOpError(t, r.err, dlock.ErrClosed, "acquire", name)
	if cause := s.ended(t, holder.Context(), "after Close"); !errors.Is(cause, dlock.ErrReleased) || !errors.Is(cause, dlock.ErrClosed) {
		t.Fatalf("held lock after Close: cause %v, want ErrReleased and ErrClosed", cause)
	} else if n := strings.Count(cause.Error(), "dlock:"); n != 1 {
		t.Errorf("held lock after Close: cause %q says \"dlock:\" %d times; one text, as the Client's", cause, n)
	}
	isOpError(t, holder.Release(ctx), dlock.ErrNotHeld, "release", name)
	lk, err := l.TryAcquire(ctx, name+"/after")
	if lk != nil {
		t.Fatal("TryAcquire after Close returned a lock")
	}
	isOpError(t, err, dlock.ErrClosed, "acquire", name+"/after")
}
