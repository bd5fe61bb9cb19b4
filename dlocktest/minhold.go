package dlocktest

import (
	"time"
)

// freeOrKeep frees the name lk held, which it has just stopped holding
// (released, or its lease ran out): at once, or, before lk's min hold
// (dlock.WithMinHold) has passed since the grant, at that moment. Until
// then the name is busy and nobody is handed it, as the Client's release
// script keeps the key in Redis. Locker.mu must be held.
func (l *Locker) freeOrKeep(lk *lock, now time.Time) {
	until := lk.granted.Add(lk.minHold)
	e := l.names[lk.name]
	if e == nil || e.holder != lk {
		l.drop(lk)
		return
	}
	if lk.minHold == 0 || !now.Before(until) {
		l.free(lk.name)
		return
	}
	e.holder, e.kept = nil, until
	e.keptStop = l.clock.AfterFunc(until.Sub(now), func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.names[lk.name] == e && !e.kept.IsZero() {
			l.free(lk.name)
		}
	})
}

// unkeep ends a min hold's wait, if any. Locker.mu must be held.
func (e *entry) unkeep() {
	if e.keptStop != nil {
		e.keptStop()
	}
	e.kept, e.keptStop = time.Time{}, nil
}

// left is what a busy error tells of the name's lease at now: the holder's,
// or what is left of a released holder's min hold. Locker.mu must be held.
func (e *entry) left(now time.Time) time.Duration {
	if e.held() {
		return e.leaseLeft(now)
	}
	return max(e.kept.Sub(now), 0)
}
