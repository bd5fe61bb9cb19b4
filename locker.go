package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Lock is a held lock: one acquisition of a name. *Client, the redlock
// package's Redlock and dlocktest's in-memory Locker all hand out Locks, so
// code written against Lock and Locker runs on any of them, and unit tests
// can use dlocktest instead of Redis.
//
// A Lock is safe for concurrent use. Once Release returned, or the lock was
// lost, its methods report ErrNotHeld.
type Lock interface {
	// Name returns the lock's name as given to Acquire.
	Name() string
	// Token returns this acquisition's random token. It is a secret of the
	// holder: whoever knows it can release the lock, so never log it in
	// full.
	Token() string
	// Fence returns this acquisition's fencing token: it grows with every
	// acquisition of the name. Pass it to the resource the lock protects,
	// which refuses writes carrying a smaller fence than it has seen.
	Fence() int64
	// Context returns the lock's context, cancelled the moment the lock
	// ends: released (cause ErrReleased) or lost (a cause matching
	// ErrLockLost), before the lease runs out in Redis. Pass it to the work
	// the lock protects.
	Context() context.Context
	// TTL returns what is left of the lease.
	TTL(ctx context.Context) (time.Duration, error)
	// Refresh makes the lease last at least ttl from now, if the lock is
	// still held; later renewals use ttl.
	Refresh(ctx context.Context, ttl time.Duration) error
	// Release lets the lock go and ends its context. It reports ErrNotHeld
	// when the lock was no longer held (released before, expired, taken
	// over); then it changed nothing.
	Release(ctx context.Context) error
}

// Locker hands out Locks by name. *Client implements it on one Redis
// deployment; redlock.Redlock on a quorum of independent ones; dlocktest's
// Locker in memory, for unit tests.
type Locker interface {
	// Acquire takes the lock name, waiting while another holder has it: up
	// to the wait limit (WithWait; DefaultWait, 10 s, when not given) or
	// until ctx ends. A busy lock gives an error matching ErrNotObtained. On
	// error the returned Lock is nil.
	//
	// The lock is renewed in the background by default (WithoutRenewal
	// turns it off), so there is no refresh to call: hold it as long as the
	// work takes, and watch Lock.Context, which ends before the lease can
	// run out if renewals fail. The TTL (WithTTL; DefaultTTL, 10 s) is only
	// how long a crashed holder blocks others.
	Acquire(ctx context.Context, name string, opts ...AcquireOption) (Lock, error)
	// TryAcquire makes one attempt, without waiting.
	TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (Lock, error)
	// Do runs fn while holding the lock name: see Run.
	Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...AcquireOption) error
}

var _ Locker = (*Client)(nil)

type lockKey struct{}

// ctxLock is a lock in a context, with the locks of the contexts around it:
// nested Do calls each add one.
type ctxLock struct {
	l     Lock
	outer *ctxLock
}

// NewContext returns a copy of ctx that carries l, for FromContext. Do, Run,
// and dlockhttp's and dlockgrpc's handlers put their lock there themselves.
// A nil l leaves ctx as it is.
func NewContext(ctx context.Context, l Lock) context.Context {
	if l == nil {
		return ctx // nothing to carry (the nil Lock of a failed acquisition)
	}
	outer, _ := ctx.Value(lockKey{}).(*ctxLock)
	return context.WithValue(ctx, lockKey{}, &ctxLock{l: l, outer: outer})
}

// FromContext returns the lock held for the work whose context is ctx: the
// one Do, Run, dlockhttp's middleware or dlockgrpc's interceptors hold, or
// one put there with NewContext. The innermost wins when locks nest. ok is
// false when ctx carries no lock.
func FromContext(ctx context.Context) (l Lock, ok bool) {
	c, _ := ctx.Value(lockKey{}).(*ctxLock)
	if c == nil {
		return nil, false
	}
	return c.l, true
}

// DetachContext returns a copy of ctx that carries no lock (its values,
// deadline and cancellation stay): for work started under a lock that is not
// the lock holder's own, such as a goroutine that should wait for the lock
// once the holder releases it instead of being refused with ErrReentrant.
func DetachContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, lockKey{}, (*ctxLock)(nil))
}

// checkReentry refuses to acquire name for a caller that holds it already
// (lockerkit.CheckReentry outside this package, which documents it).
func checkReentry(ctx context.Context, name string, mine func(Lock) bool) error {
	for c, _ := ctx.Value(lockKey{}).(*ctxLock); c != nil; c = c.outer {
		// A MultiLock holds each of its names: each member is checked.
		for _, m := range members(c.l) {
			l := m
			if h, ok := m.(*reentrantLock); ok {
				l = h.r.lock // a WithReentry handle: its Locker's own lock is inside
			}
			// mine first: it is the cheap test, and it keeps dlock from
			// calling methods of another Locker's locks (a typed nil among them).
			if mine(l) && l.Name() == name && m.Context().Err() == nil {
				return reentrant(name, l, "a second acquisition would wait for the caller itself (WithReentry shares it)")
			}
		}
	}
	return nil
}

// Run runs fn under l, a lock the caller holds, and releases l when fn
// returns or panics. Do is Acquire followed by Run; dlockhttp and dlockgrpc
// run handlers through it.
//
// fn's context ends when ctx does and also the moment l is lost, with the
// loss as its cause; it carries l, for FromContext. When l was lost while fn
// ran, Run returns fn's error joined with an error matching ErrLockLost: the
// work may not have been exclusive, and the caller must treat it so (retry
// idempotently, or rely on the fence at the resource). A lock released under
// fn by the Locker's Close is reported the same way, matching ErrClosed; one
// fn released itself is not. A failed release is joined too.
//
// A panic in fn is not recovered: the release runs in a deferred call and
// the panic goes on with its original value and stack.
func Run(ctx context.Context, l Lock, fn func(ctx context.Context) error) (err error) {
	lctx := l.Context()
	fctx, cancel := context.WithCancelCause(NewContext(ctx, l))
	// Stopped before the release, whose own cancellation of the lock's
	// context (cause ErrReleased) must not reach fn's.
	stop := context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) })
	if lctx.Err() != nil {
		// Ended already (Context found the lease deadline passed: the
		// process stopped after Acquire returned): fn must not begin its
		// work on a live context while the AfterFunc goroutine has yet to
		// run. (TestRunFnContextOfLeaseOverIsEndedAtOnce.)
		cancel(context.Cause(lctx))
	}
	defer func() {
		stop()
		cancel(context.Canceled)
		// fn may have released the lock itself: a clean end, not a loss.
		// A release by Close (the Locker shutting down) is not fn's.
		early := context.Cause(lctx)
		releasedByFn := errors.Is(early, ErrReleased) && !errors.Is(early, ErrClosed)
		// The release must run even when ctx has ended: that is when
		// deferred releases usually run.
		relErr := l.Release(context.WithoutCancel(ctx))
		cause := context.Cause(lctx)
		switch {
		case (errors.Is(cause, ErrLockLost) || errors.Is(cause, ErrClosed)) && err != nil && errors.Is(err, cause):
			// fn returned the cause (context.Cause of its context), maybe
			// wrapped: say it once, naming the lock.
			err = &Error{Op: "do", Name: l.Name(), Err: err}
		case errors.Is(cause, ErrLockLost), errors.Is(cause, ErrClosed):
			err = errors.Join(err, &Error{Op: "do", Name: l.Name(), Err: cause})
		case releasedByFn:
		case errors.Is(relErr, ErrNotHeld):
			// Gone before the release, though no renewal noticed: lost all
			// the same.
			err = errors.Join(err, &Error{Op: "do", Name: l.Name(), Err: fmt.Errorf("%w: gone at release", ErrLockLost)})
		case relErr != nil:
			err = errors.Join(err, relErr)
		}
	}()
	return fn(fctx)
}

// Do runs fn while holding the lock name: it acquires (waiting as Acquire
// does, with the same options), then runs fn as Run does: fn's context ends
// when the lock is lost and carries the lock (FromContext, for its Fence),
// the lock is released when fn returns or panics, and a loss while fn ran
// is reported as an error matching ErrLockLost.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...AcquireOption) error {
	l, err := c.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	return Run(ctx, l, fn)
}
