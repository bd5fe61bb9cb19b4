package dlocktest

import (
	"slices"
	"time"

	"github.com/dlock-go/dlock/lockerkit"
)

// Read locks (dlock.WithShared), as the Client's scripts have them: readers
// share a name while no writer holds it; a new reader does not join them
// while a writer waits (unless dlock.WithoutWriterPriority); when the name
// frees, the first waiter gets it and, if it is a reader, so does every
// reader behind it up to the next writer.

// admits reports whether an acquisition with s may take the name now
// without waiting: only a reader, while readers hold it and no writer waits
// (or it skips them). Locker.mu must be held.
func (e *entry) admits(s lockerkit.AcquireSettings) bool {
	if !s.Shared || e.holder != nil || len(e.readers) == 0 {
		return false
	}
	return s.NoWriterPriority || !slices.ContainsFunc(e.waiters, func(w *waiter) bool { return !w.settings.Shared })
}

// held reports whether anybody holds the name. Locker.mu must be held.
func (e *entry) held() bool { return e.holder != nil || len(e.readers) > 0 }

// holders are the name's holders: the writer, or the readers oldest first.
// Locker.mu must be held.
func (e *entry) holders() []*lock {
	if e.holder != nil {
		return []*lock{e.holder}
	}
	out := make([]*lock, 0, len(e.readers))
	for lk := range e.readers {
		out = append(out, lk)
	}
	slices.SortFunc(out, func(a, b *lock) int { return int(a.fence - b.fence) })
	return out
}

// leaseLeft is what is left of the holders' leases at now: the longest, the
// name being free only when every holder is gone. Locker.mu must be held.
func (e *entry) leaseLeft(now time.Time) time.Duration {
	var left time.Duration
	for _, lk := range e.holders() {
		left = max(left, lk.leaseLeft(now))
	}
	return left
}

// drop removes lk from its name's holders and hands the name on when
// nobody holds it any more. Locker.mu must be held.
func (l *Locker) drop(lk *lock) {
	e := l.names[lk.name]
	if e == nil {
		return
	}
	switch {
	case e.holder == lk:
		e.holder = nil
	case lk.shared:
		delete(e.readers, lk)
	default:
		return
	}
	l.handOff(lk.name)
}

// handOff gives the name to the waiters that may have it now, in arrival
// order: the first writer when nobody holds it, or the readers up to the
// next writer when nobody or readers hold it. Waiters whose context ended or
// whose wait limit passed are dropped on the way. A name nobody holds or
// waits for is forgotten. Locker.mu must be held.
func (l *Locker) handOff(name string) {
	e := l.names[name]
	if e == nil {
		return
	}
	now := l.clock.Now()
	// A name kept for a min hold (dlock.WithMinHold) goes to nobody until
	// the wait ends.
	for len(e.waiters) > 0 && e.holder == nil && e.kept.IsZero() {
		w := e.waiters[0]
		switch {
		case w.ctx.Err() != nil:
			l.giveUp(name, w, w.ctx.Err())
			continue
		case !now.Before(w.deadline):
			l.giveUp(name, w, nil)
			continue
		case !w.settings.Shared && len(e.readers) > 0:
			return // the writer waits for the readers
		}
		e.waiters = e.waiters[1:]
		w.stop()
		w.lock = l.grant(w.ctx, name, w.settings)
		close(w.done)
	}
	if !e.held() && e.kept.IsZero() && len(e.waiters) == 0 {
		delete(l.names, name)
	}
}
