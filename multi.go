package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// MultiLock is several names held together, as AcquireAll took them: all of
// them or none. It is a Lock, so Run, Do-style helpers and the context
// (NewContext, FromContext, lockerkit.CheckReentry) take it as they take one lock.
//
// It is not an atomic grant: each name is its own lock in Redis with its own
// lease, fence, renewal and FIFO queue, taken one after the other in a
// canonical order. What it guarantees, and what it does not, is told at
// AcquireAll.
type MultiLock struct {
	locks []Lock // in canonical order: sorted by name, bytewise
	ctx   context.Context
	// cancel ends ctx. The first cause wins: a loss reported by a member
	// stays the cause even when a Release follows.
	cancel context.CancelCauseFunc
}

var _ Lock = (*MultiLock)(nil)

// AcquireAll takes every lock of names from locker, all or nothing, and
// returns them as one MultiLock. opts apply to each name (WithTTL,
// WithoutRenewal, WithMaxHold, WithReplicas), except the wait limit
// (WithWait, default DefaultWait): it bounds the whole call, not each name.
// ctx bounds it too.
//
// Names are taken in a canonical order, sorted bytewise, whatever the order
// given: two callers whose sets overlap always wait for the shared names in
// the same order, so neither can hold one the other waits for while waiting
// for one the other holds, and they never deadlock. (A caller that already
// holds a lock outside the set and then waits for the set, or the reverse,
// is outside that order: acquire everything a piece of work needs in one
// AcquireAll.)
//
// When a name cannot be taken (busy past the wait limit, ctx ended, Redis
// unreachable), or a name already taken is lost before the last is, the
// names taken so far are released before AcquireAll returns the error of the
// failing name: an *Error naming it. A release that fails is joined to that
// error; that lock then ends with its TTL.
//
// Input is checked before anything is taken: an empty set, a duplicate name
// or an invalid name (see Acquire) gives an *Error of Op "acquire" matching
// ErrInvalidName that names the offending name, and a negative wait one
// matching ErrInvalidOption. A name the caller's context already holds
// (alone, or in a MultiLock in the context) gives ErrReentrant.
//
// The grant is not atomic: while AcquireAll runs, and when it rolls back,
// others can see some of the names held and not the rest, and a name rolled
// back was held for a moment (its fence was used). Nobody gets to work under
// a partial set, which is what all-or-nothing means here. Each name keeps
// its own FIFO queue: a caller waiting for a set waits in each name's queue
// in turn, holding the names before it.
func AcquireAll(ctx context.Context, locker Locker, names []string, opts ...AcquireOption) (*MultiLock, error) {
	sorted, wait, err := checkNames(names, opts)
	if err == nil && locker == nil {
		err = opError("acquire", strings.Join(sorted, ","), fmt.Errorf("%w: nil Locker", ErrInvalidOption))
	}
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	m := &MultiLock{locks: make([]Lock, 0, len(sorted))}
	for _, name := range sorted {
		// The wait left for this name: the whole wait limit, less what the
		// names before it took. Once it is spent, each name left gets one
		// attempt (WithWait(0)), as a TryAcquire would.
		left := max(time.Until(deadline), 0)
		l, err := locker.Acquire(ctx, name, append(slices.Clip(opts), WithWait(left))...)
		switch {
		case err == nil && l == nil:
			err = opError("acquire", name, fmt.Errorf("the %T returned neither a lock nor an error", locker))
		case err == nil:
			m.locks = append(m.locks, l)
			err = m.lostMember()
		}
		if err != nil {
			return nil, errors.Join(err, m.rollback(ctx))
		}
	}
	m.start(ctx)
	return m, nil
}

// checkNames refuses a name set AcquireAll cannot take, before anything is
// sent, and returns its names sorted and the wait limit of the whole.
func checkNames(names []string, opts []AcquireOption) ([]string, time.Duration, error) {
	if len(names) == 0 {
		return nil, 0, opError("acquire", "", fmt.Errorf("%w: AcquireAll needs at least one name, got none", ErrInvalidName))
	}
	for _, name := range names {
		if err := checkName(name); err != nil {
			return nil, 0, opError("acquire", name, err)
		}
	}
	// A sorted copy: the caller's slice is theirs.
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return nil, 0, opError("acquire", sorted[i], fmt.Errorf("%w: given twice to AcquireAll", ErrInvalidName))
		}
	}
	ac := acquireConfig{wait: DefaultWait}
	for _, o := range opts {
		o.applyAcquire(&ac)
	}
	if ac.wait < 0 {
		return nil, 0, opError("acquire", strings.Join(sorted, ","), fmt.Errorf("%w: wait %v is negative", ErrInvalidOption, ac.wait))
	}
	if ac.minHold > 0 && len(sorted) > 1 {
		// A rollback releases what was taken, and a release before the min
		// hold keeps the name: one busy name would block the others for the
		// whole min hold though no work ran under them.
		return nil, 0, opError("acquire", strings.Join(sorted, ","), fmt.Errorf(
			"%w: WithMinHold(%v) with several names: a rollback would keep the names taken for the min hold", ErrInvalidOption, ac.minHold))
	}
	return sorted, ac.wait, nil
}

// lostMember reports a member already taken whose context has ended (lost
// while a later name was awaited): the set is not held whole.
func (m *MultiLock) lostMember() error {
	for _, l := range m.locks {
		if l.Context().Err() != nil {
			return opError("acquire", l.Name(), fmt.Errorf("%w: ended while AcquireAll took the names after it: %w",
				ErrLockLost, context.Cause(l.Context())))
		}
	}
	return nil
}

// rollback releases what AcquireAll took, on a context that outlives the
// caller's: the caller's has often ended, which is why we are here.
func (m *MultiLock) rollback(ctx context.Context) error {
	rctx := context.WithoutCancel(ctx)
	var errs []error
	for _, l := range slices.Backward(m.locks) {
		// One lost while we waited reports ErrNotHeld: nothing to give back.
		if err := l.Release(rctx); err != nil && !errors.Is(err, ErrNotHeld) {
			errs = append(errs, fmt.Errorf("rolling back: %w", err))
		}
	}
	return errors.Join(errs...)
}

// start makes the MultiLock's context: it carries the MultiLock and the
// caller's values, and ends with the first member's end, with that cause.
func (m *MultiLock) start(ctx context.Context) {
	m.ctx, m.cancel = context.WithCancelCause(NewContext(context.WithoutCancel(ctx), m))
	for _, l := range m.locks {
		lctx, name := l.Context(), l.Name()
		// Never stopped: it runs once, when the member ends, which a
		// released or lost MultiLock's members all do.
		context.AfterFunc(lctx, func() {
			m.cancel(fmt.Errorf("lock %q: %w", name, context.Cause(lctx)))
		})
	}
}

// Name returns the names joined with "," in canonical order (sorted
// bytewise): for messages and logs. Names may contain commas themselves:
// Names gives them exactly.
func (m *MultiLock) Name() string { return strings.Join(m.Names(), ",") }

// Names returns the names in canonical order (sorted bytewise).
func (m *MultiLock) Names() []string {
	names := make([]string, len(m.locks))
	for i, l := range m.locks {
		names[i] = l.Name()
	}
	return names
}

// Locks returns the member locks in canonical order: for the fence of one
// name, or to hand one name's lock to code that takes a Lock. Releasing a
// member ends the MultiLock's context.
func (m *MultiLock) Locks() []Lock { return slices.Clone(m.locks) }

// Token returns the members' tokens joined with ",", in canonical order.
// Like every token it is a secret of the holder: never log it in full.
func (m *MultiLock) Token() string {
	tokens := make([]string, len(m.locks))
	for i, l := range m.locks {
		tokens[i] = l.Token()
	}
	return strings.Join(tokens, ",")
}

// Fence returns the fence of the first name in canonical order. There is no
// single fence for several names: each name's fence grows with that name's
// acquisitions only. A resource protected by one name must be given that
// name's fence: see Fences and Locks.
func (m *MultiLock) Fence() int64 { return m.locks[0].Fence() }

// Fences returns each name's fence, in the order of Names.
func (m *MultiLock) Fences() []int64 {
	fences := make([]int64, len(m.locks))
	for i, l := range m.locks {
		fences[i] = l.Fence()
	}
	return fences
}

// Context returns a context that ends when the first member lock ends: lost
// (a cause matching ErrLockLost, naming the lock), or released (ErrReleased).
// It carries the MultiLock (FromContext), so acquiring any of its names under
// it fails with ErrReentrant.
//
// Each member's Context looks at its own lease deadline when asked (see
// Lock.Context), and a member found ended ends this context here, at once,
// rather than when its AfterFunc goroutine runs.
func (m *MultiLock) Context() context.Context {
	for _, l := range m.locks {
		if lctx := l.Context(); lctx.Err() != nil {
			m.cancel(fmt.Errorf("lock %q: %w", l.Name(), context.Cause(lctx)))
		}
	}
	return m.ctx
}

// TTL returns the smallest lease left among the members, or the first error
// (ErrNotHeld once any member is no longer held).
func (m *MultiLock) TTL(ctx context.Context) (time.Duration, error) {
	least := time.Duration(-1)
	for _, l := range m.locks {
		d, err := l.TTL(ctx)
		if err != nil {
			return 0, err
		}
		if least < 0 || d < least {
			least = d
		}
	}
	return least, nil
}

// Refresh refreshes every member to ttl, all of them even when one fails,
// and returns the first error: a member that is no longer held gives
// ErrNotHeld, and its loss ends the MultiLock's context.
func (m *MultiLock) Refresh(ctx context.Context, ttl time.Duration) error {
	var first error
	for _, l := range m.locks {
		if err := l.Refresh(ctx, ttl); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Release releases every member, in reverse canonical order, all of them
// even when one fails, and returns the first error: ErrNotHeld when a member
// was no longer held (lost, or released before). The context ends with
// ErrReleased unless a loss ended it first. A second Release changes
// nothing and reports ErrNotHeld, as a single lock's does.
func (m *MultiLock) Release(ctx context.Context) error {
	var first error
	for _, l := range slices.Backward(m.locks) {
		if err := l.Release(ctx); err != nil && first == nil {
			first = err
		}
	}
	// Each member's release ended the context already, through its
	// AfterFunc, with that member's cause; this covers a Locker whose
	// Release did not end its lock's context.
	m.cancel(ErrReleased)
	return first
}

// members returns the locks l stands for in a context: a MultiLock's
// members, or l itself.
func members(l Lock) []Lock {
	if m, ok := l.(*MultiLock); ok && m != nil {
		return m.locks
	}
	return []Lock{l}
}
