package dlock

import (
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/lease"
)

// A lock's lease as this process knows it, on the local monotonic clock:
// each lease Redis confirmed is dated from the send time of its command and
// shortened by a margin, and the deadline timer ends the lock when no
// confirmed lease reaches further. So this process never counts on a lease
// that ends later than the one in Redis.

// renewLater schedules the next renewal of a lock that the renewal loop
// keeps alive: a third of its TTL after its latest confirmed lease (an
// acquisition, a Refresh). l.mu must be held (see lease.Renewer.mu).
func (l *redisLock) renewLater() {
	l.scheduleLocked(renewAt(l.leased, l.ttl))
}

// capAtHold cuts a lease of ttl asked for at now so that it ends at the hold
// limit (WithMaxHold) at the latest: such a lease is the last one, and its
// deadline ends the lock (last). It reports !ok when the limit leaves no
// whole millisecond. l.mu must be held.
func (l *redisLock) capAtHold(now time.Time, ttl time.Duration) (capped time.Duration, ok, last bool) {
	if l.hold.IsZero() {
		return ttl, true, false
	}
	left := l.hold.Sub(now).Truncate(time.Millisecond)
	if left >= ttl {
		return ttl, true, false
	}
	if left < time.Millisecond {
		// The limit is reached: no lease is asked for any more, and the
		// deadline of the last confirmed one ends the lock.
		l.holdDone = true
		return 0, false, true
	}
	// The last lease, but only once Redis confirms it (confirm): a
	// request that fails must not stop the renewals still needed before
	// the limit.
	return left, true, true
}

// leaseEnd is the deadline of a lease of ttl confirmed by a command sent at
// sent (see lease.End).
func leaseEnd(sent time.Time, ttl time.Duration) time.Time { return lease.End(sent, ttl) }

// leaseLeft is how long the lease is known to be ours. l.mu must be held.
func (l *redisLock) leaseLeft() time.Duration { return time.Until(l.until) }

// confirm records a lease of ttl that Redis confirmed, sent at sent, and
// moves the deadline if the lease ends later than the one known. setTTL makes
// ttl the one later renewals ask for (a Refresh). A confirmation that arrives
// after the lock ended does not revive it: it reports false.
func (l *redisLock) confirm(sent time.Time, ttl time.Duration, setTTL, last bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != held {
		return false
	}
	if last {
		l.holdDone = true // this lease ends at the hold limit: no renewal after it
	}
	if setTTL {
		l.ttl = ttl
	}
	if sent.After(l.leased) {
		l.leased = sent
	}
	if end := leaseEnd(sent, ttl); end.After(l.until) {
		l.until = end
		l.deadline.Reset(l.leaseLeft())
	}
	return true
}

// leaseEnded runs on the deadline timer: no renewal was confirmed in time.
func (l *redisLock) leaseEnded() {
	l.mu.Lock()
	if l.state != held {
		l.mu.Unlock()
		return
	}
	if left := l.leaseLeft(); left > 0 {
		// A renewal moved the deadline while this timer was firing.
		l.deadline.Reset(left)
		l.mu.Unlock()
		return
	}
	var cause error
	reason := ReasonExpired
	switch {
	case l.holdDone:
		reason = ReasonHoldLimit
		cause = fmt.Errorf("%w: %w of %v reached", ErrLockLost, ErrHoldLimit, l.maxHold)
	case !l.renew:
		cause = fmt.Errorf("%w: lease of %v ran out (renewal off)", ErrLockLost, l.ttl)
	default:
		cause = fmt.Errorf("%w: no renewal confirmed before the lease deadline", ErrLockLost)
	}
	l.mu.Unlock()
	l.end(lost, reason, cause)
}

// end moves a held lock to released or lost, once, and cancels its context
// with cause; a loss is reported to the observers.
func (l *redisLock) end(to lockState, reason Reason, cause error) {
	l.mu.Lock()
	from := l.state
	if from == released || (from == lost && to == lost) {
		l.mu.Unlock()
		return
	}
	l.state = to
	if l.cause == nil {
		l.cause = cause
	}
	l.deadline.Stop()
	// The first cause wins also on the context: a Release that runs while a
	// loss is still being reported to the observers must not make the loss
	// read as a release (Run would then report a clean end).
	cancel, first, ttl := l.cancel, l.cause, l.ttl
	l.mu.Unlock()
	// Observers first: whoever wakes on the context finds the metrics and
	// logs already telling of the loss.
	if to == lost {
		l.c.cfg.observers.lost(LostEvent{Name: l.name, Reason: reason, Held: time.Since(l.start), TTL: ttl, Cause: cause})
	}
	if cancel != nil {
		cancel(first)
	}
	l.c.renewer.Forget(&l.entry)
	l.c.untrack(l)
}
