package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Re-entry (WithReentry) is scoped by context, Go having no goroutine
// identity: the context of the work done under a lock carries the lock
// (NewContext, Run), and a nested acquisition that finds it there shares it
// instead of waiting for itself. It lives outside every Locker's protocol:
// nothing of it reaches Redis, and the Redis Client, redlock and dlocktest
// share this one implementation (lockerkit.Reenter and lockerkit.Reentrant).

// reentry is one lock shared by its handles: the acquisition that took it
// and every nested acquisition since. It is released with the last handle.
type reentry struct {
	lock Lock
	// The kind it was taken as: a nested acquisition must not get more
	// than that (a write handle on a read lock, a lock on a permit).
	shared  bool
	permits int

	mu   sync.Mutex
	open int  // handles not released yet
	done bool // the last handle was released: the lock with it
}

// reentrantLock is one handle on a reentry. Its context is a child of the
// lock's: it ends with the lock, or on its own when the handle is released.
type reentrantLock struct {
	r        *reentry
	ctx      context.Context
	cancel   context.CancelCauseFunc
	released atomic.Bool
}

// reentrantOf makes l, just acquired with WithReentry as a lock of the kind
// shared/permits, the first handle of a re-entrant lock (lockerkit.Reentrant
// outside this package): a nested acquisition finds it in the context
// (reenter) and shares it, and l is released when the last handle is. A nil
// l stays nil.
func reentrantOf(l Lock, shared bool, permits int) Lock {
	if l == nil {
		return nil
	}
	r := &reentry{lock: l, shared: shared, permits: permits}
	return r.handle()
}

// reentryShort says what a re-entry handle's held lock lacks of what
// acquisition ac asks to be confirmed, or "" when it has it all: a grant
// confirmed on disk (WithDurableGrant) and by at least ac.replicas replicas
// (WithReplicas). A handle on a lock confirmed with less is not what the
// options promise.
func reentryShort(l Lock, ac acquireConfig) string {
	rl := heldRedisLock(l)
	switch {
	case rl == nil && (ac.durable > 0 || ac.replicas > 0):
		return "what confirmed its grant cannot be told, and this acquisition asks for confirmations"
	case rl == nil:
		return ""
	case ac.durable > 0 && rl.durable == 0:
		return "it was taken without WithDurableGrant, and this acquisition asks for a grant confirmed on disk"
	case ac.replicas > rl.replicas && rl.replicas == 0:
		return fmt.Sprintf("it was taken without WithReplicas, and this acquisition asks for %d replicas to confirm it", ac.replicas)
	case ac.replicas > rl.replicas:
		return fmt.Sprintf("its grant was confirmed by %d replicas, and this acquisition asks for %d", rl.replicas, ac.replicas)
	}
	return ""
}

// heldRedisLock is the Client's lock under a re-entry handle, or nil.
func heldRedisLock(l Lock) *redisLock {
	h, ok := l.(*reentrantLock)
	if !ok {
		return nil
	}
	rl, _ := h.r.lock.(*redisLock)
	return rl
}

// reenter is how an acquisition with WithReentry of the kind wantShared/permits
// looks for a lock its context holds (lockerkit.Reenter outside this
// package, which documents it; mine as for checkReentry).
func reenter(ctx context.Context, name string, wantShared bool, permits int, mine func(Lock) bool) (Lock, error) {
	for c, _ := ctx.Value(lockKey{}).(*ctxLock); c != nil; c = c.outer {
		for _, m := range members(c.l) { // a MultiLock holds each of its names
			h, shared := m.(*reentrantLock)
			inner := m
			if shared {
				inner = h.r.lock
			}
			if !mine(inner) || inner.Name() != name || m.Context().Err() != nil {
				continue
			}
			if !shared {
				return nil, reentrant(name, inner,
					"it was taken without WithReentry, and re-entry needs the consent of both acquisitions")
			}
			if why := h.r.covers(wantShared, permits); why != "" {
				return nil, reentrant(name, inner, why)
			}
			if nested := h.r.handle(); nested != nil {
				return nested, nil
			}
		}
	}
	return nil, nil
}

// covers says why a nested acquisition of the kind shared/permits cannot share r, or "" when it
// can: a read may share a write lock (the writer excludes everyone), but a
// write may not share a read lock, and a permit is neither.
func (r *reentry) covers(shared bool, permits int) string {
	switch {
	case r.permits != permits:
		return fmt.Sprintf("it holds WithPermits(%d) and this acquisition asks WithPermits(%d); re-entry shares only the same kind", r.permits, permits)
	case r.shared && !shared:
		return "it holds a read lock (WithShared), and a nested write acquisition would write beside other readers"
	}
	return ""
}

// reentrant is the error of an acquisition of a name the caller holds.
func reentrant(name string, held Lock, why string) error {
	return opError("acquire", name, fmt.Errorf("%w: the caller's context holds it already (fence %d); %s",
		ErrReentrant, held.Fence(), why))
}

// handle adds a handle, or returns nil when the lock was released meanwhile
// (its last handle went between the context check and now).
func (r *reentry) handle() *reentrantLock {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return nil
	}
	r.open++
	h := &reentrantLock{r: r}
	ctx, cancel := context.WithCancelCause(r.lock.Context())
	// The handle's context carries the handle, not the Locker's lock that
	// the lock's context carries: work given the handle's Context() then
	// re-enters through the count, and cannot release the lock past it.
	h.ctx, h.cancel = NewContext(ctx, h), cancel
	return h
}

func (h *reentrantLock) Name() string  { return h.r.lock.Name() }
func (h *reentrantLock) Token() string { return h.r.lock.Token() }
func (h *reentrantLock) Fence() int64  { return h.r.lock.Fence() }

// Context returns the handle's context, a child of the lock's. The lock's
// Context is asked first: it ends a lock whose lease deadline has passed at
// once, and a child context is cancelled within that call.
// (TestReentrantContextOfLeaseOverIsEndedAtOnce.)
func (h *reentrantLock) Context() context.Context {
	h.r.lock.Context()
	return h.ctx
}

// TTL is the lock's lease left, while this handle is not released.
func (h *reentrantLock) TTL(ctx context.Context) (time.Duration, error) {
	if err := h.check("ttl"); err != nil {
		return 0, err
	}
	return h.r.lock.TTL(ctx)
}

// Refresh extends the lock's lease, while this handle is not released.
func (h *reentrantLock) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := h.check("refresh"); err != nil {
		return err
	}
	return h.r.lock.Refresh(ctx, ttl)
}

// Release ends this handle; the last handle's release releases the lock.
func (h *reentrantLock) Release(ctx context.Context) error {
	if !h.released.CompareAndSwap(false, true) {
		return opError("release", h.Name(), fmt.Errorf("%w: this handle was released before", ErrNotHeld))
	}
	h.r.mu.Lock()
	h.r.open--
	last := h.r.open == 0
	h.r.done = last
	h.r.mu.Unlock()
	if last {
		err := h.r.lock.Release(ctx)
		if err != nil && !errors.Is(err, ErrNotHeld) {
			// Redis did not answer: the lock may still be held, and the
			// caller may retry, as with any lock. Nothing was released.
			h.r.mu.Lock()
			h.r.open++
			h.r.done = false
			h.r.mu.Unlock()
			h.released.Store(false)
			return err
		}
		h.cancel(ErrReleased)
		return err
	}
	h.cancel(ErrReleased)
	if lctx := h.r.lock.Context(); lctx.Err() != nil {
		// Ended though handles were open: lost, or released by Close.
		return opError("release", h.Name(), fmt.Errorf("%w: %w", ErrNotHeld, context.Cause(lctx)))
	}
	return nil
}

func (h *reentrantLock) check(op string) error {
	if h.released.Load() {
		return opError(op, h.Name(), fmt.Errorf("%w: this handle was released", ErrNotHeld))
	}
	return nil
}
