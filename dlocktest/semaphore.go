package dlocktest

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lockerkit"
)

// semPrefix starts a permit's token, as the Client's.
const semPrefix = "S"

// A semaphore (dlock.WithPermits) is an entry of Locker.sems, apart from the
// exclusive lock of the same name, as in Redis: a permit acquisition on a
// name held as a lock is refused with dlock.ErrMismatch, and so is a lock
// or read lock of a name whose permits are held, as the Client does. Each
// permit is a lock of its own with its own lease; a freed permit goes
// straight to the first waiter still waiting, so a semaphore with free
// permits has no waiters, and n stays agreed while it has holders or
// waiters.

// tryPermit takes a permit of name if one is free, or returns the entry to
// wait in, or a mismatch. l.mu must be held.
func (l *Locker) tryPermit(ctx context.Context, name string, s lockerkit.AcquireSettings) (*entry, *lock, error) {
	if x := l.names[name]; x != nil && (x.held() || !x.kept.IsZero()) { // kept for a min hold: the key is still there
		return nil, nil, opError("acquire", name, fmt.Errorf("%w: WithPermits(%d) asked, but the name is held as an exclusive lock", dlock.ErrMismatch, s.Permits))
	}
	e := l.sems[name]
	if e == nil {
		e = &entry{permits: s.Permits}
		l.sems[name] = e
	}
	if e.permits != s.Permits {
		return nil, nil, opError("acquire", name, fmt.Errorf("%w: WithPermits(%d) asked, but the holders use WithPermits(%d)", dlock.ErrMismatch, s.Permits, e.permits))
	}
	if len(e.sem) < e.permits && len(e.waiters) == 0 {
		return e, l.grant(ctx, name, s), nil
	}
	return e, nil, nil
}

// permitsHeld is the refusal of a lock or read lock of name while permits
// of it are held, or nil. l.mu must be held.
func (l *Locker) permitsHeld(name string, s lockerkit.AcquireSettings) error {
	e := l.sems[name]
	if e == nil || len(e.sem) == 0 {
		return nil
	}
	kind := "an exclusive lock"
	if s.Shared {
		kind = "a read lock (WithShared)"
	}
	return opError("acquire", name, fmt.Errorf("%w: %s asked, but the name is held as a semaphore: %d of its WithPermits(%d) held",
		dlock.ErrMismatch, kind, len(e.sem), e.permits))
}

// entryOf is the entry a waiter of name waits in. l.mu must be held.
func (l *Locker) entryOf(name string, sem bool) *entry {
	if sem {
		return l.sems[name]
	}
	return l.names[name]
}

// busyTTL is the HolderTTL of a busy error on e: the holder's lease left,
// or for a semaphore, the earliest end of a permit's lease. l.mu must be
// held.
func (l *Locker) busyTTL(e *entry) time.Duration {
	now := l.clock.Now()
	if e.permits == 0 { // a lock's entry, not a semaphore's
		return e.left(now)
	}
	var left time.Duration
	for i, lk := range e.sem {
		if d := lk.leaseLeft(now); i == 0 || d < left {
			left = d
		}
	}
	return left
}

// freeOf frees what lk held: the name, or one permit. l.mu must be held.
func (l *Locker) freeOf(lk *lock) {
	if !lk.sem {
		l.free(lk.name)
		return
	}
	e := l.sems[lk.name]
	if e == nil {
		return
	}
	i := slices.Index(e.sem, lk)
	if i < 0 {
		return
	}
	e.sem = slices.Delete(e.sem, i, i+1)
	now := l.clock.Now()
	for len(e.waiters) > 0 && len(e.sem) < e.permits {
		w := e.waiters[0]
		switch {
		case w.ctx.Err() != nil:
			l.giveUp(lk.name, w, w.ctx.Err())
		case !now.Before(w.deadline):
			l.giveUp(lk.name, w, nil)
		default:
			e.waiters = e.waiters[1:]
			w.stop()
			w.lock = l.grant(w.ctx, lk.name, w.settings)
			close(w.done)
		}
	}
	if len(e.sem) == 0 && len(e.waiters) == 0 {
		delete(l.sems, lk.name)
	}
}

// expirePermit is Expire on a semaphore: the oldest permit's lease ends.
// l.mu must be held.
func (l *Locker) expirePermit(name string) bool {
	e := l.sems[name]
	if e == nil || len(e.sem) == 0 {
		return false
	}
	lk := e.sem[0]
	lk.lose(fmt.Errorf("%w: no renewal confirmed before the lease deadline (dlocktest: Expire)", dlock.ErrLockLost))
	l.freeOf(lk)
	return true
}

// Permits returns the holders of the semaphore name (WithPermits), oldest first.
func (l *Locker) Permits(name string) []dlock.Lock {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []dlock.Lock
	if e := l.sems[name]; e != nil {
		for _, lk := range e.sem {
			out = append(out, lk)
		}
	}
	return out
}
