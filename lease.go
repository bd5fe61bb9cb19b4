package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/lease"
	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/observe"
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
	return l.confirmLocked(sent, ttl, setTTL, last)
}

// confirmLocked is confirm with l.mu held.
func (l *redisLock) confirmLocked(sent time.Time, ttl time.Duration, setTTL, last bool) bool {
	if !l.life.Held() {
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
	if end := sent.Add(ttl); end.After(l.served) {
		l.served = end
	}
	if end := leaseEnd(sent, ttl); end.After(l.until) {
		l.until = end
		l.life.Rearm(l.leaseLeft())
	}
	return true
}

// askLocked records a lease of ttl asked for by a command sent at sent (a
// renewal or Refresh), before any answer: it may hold the key in Redis
// whether or not its answer is heard. l.mu must be held.
func (l *redisLock) askLocked(sent time.Time, ttl time.Duration) {
	if end := sent.Add(ttl); end.After(l.asked) {
		l.asked = end
	}
}

// leaseEnded runs on the deadline timer: no renewal was confirmed in time.
// It looks at the deadline and marks the lock lost under one hold of l.mu:
// a Refresh confirmed after the look finds the lock lost and says so,
// never success for a lock whose context then ends and whose key the
// give-back frees.
func (l *redisLock) leaseEnded() {
	l.mu.Lock()
	if !l.life.Held() {
		l.mu.Unlock()
		return
	}
	if left := l.leaseLeft(); left > 0 {
		// A renewal moved the deadline while this timer was firing.
		l.life.Rearm(left)
		l.mu.Unlock()
		return
	}
	var cause error
	reason := observe.ReasonExpired
	switch {
	case l.holdDone:
		reason = observe.ReasonHoldLimit
		cause = fmt.Errorf("%w: %w of %v reached", ErrLockLost, ErrHoldLimit, l.maxHold)
	case !l.renew:
		cause = fmt.Errorf("%w: lease of %v ran out (renewal off)", ErrLockLost, l.ttl)
	default:
		cause = fmt.Errorf("%w: no renewal confirmed before the lease deadline", ErrLockLost)
	}
	e, _ := l.markLocked(lost, cause)
	// A renewal or Refresh sent after the last confirmed lease may have
	// run in Redis with its reply still out, or lost: the key is then ours
	// beyond that lease, renewed and released by nobody, and the next
	// holder would wait it out. (A Release under way frees it itself.)
	at, until := lease.LapsedGiveBack(l.served, l.ttl), l.asked
	giveBack := until.After(at) && !l.releasing
	l.mu.Unlock()
	l.announce(lost, reason, e)
	if giveBack {
		l.giveBackLapsed(at, until)
	}
}

// giveBackLapsed gives the token of a lock lost at its deadline back at at:
// the end of the last lease Redis confirmed, or a margin after the context
// ended if that is later, and not before: the margin is the holder's, for
// its work to see the context end and stop, and a next holder let in
// during it would overlap a holder that has not yet stopped. The release keeps WithMinHold
// as any release does. It is retried, with the engine's backoff, until
// until, when whatever the unconfirmed renewal leased has ended anyway;
// Close ends it. (TestLapsedRenewalGivenBackAtLeaseEnd,
// TestLapsedRenewalKeepsMinHold.)
func (l *redisLock) giveBackLapsed(at, until time.Time) {
	c := l.c
	a := node.ReleaseArgs{Record: releaseRecordTTL, GiveUp: true, MinHold: l.minHold}
	// Refused once Close has begun: the key expires with its lease.
	c.own.Go(func() {
		if lease.Pause(time.Until(at), c.closing.Done()) {
			c.retryWithdraw(l.acquirer, l.keys, l.token, a, until)
		}
	})
}

// ending is what announce needs of a lock that markLocked just ended.
type ending struct {
	cancel context.CancelCauseFunc
	first  error // the first cause: the context's
	ttl    time.Duration
	cause  error // this ending's cause: the observers'
}

// markLocked moves a held lock to released or lost, once: it reports false
// when the lock had ended already (released, or lost and to is lost). l.mu
// must be held; announce must follow once it is let go.
func (l *redisLock) markLocked(to lockState, cause error) (ending, bool) {
	if !l.life.End(to, cause) {
		return ending{}, false
	}
	// The first cause wins also on the context: a Release that runs while a
	// loss is still being reported to the observers must not make the loss
	// read as a release (Run would then report a clean end).
	return ending{cancel: l.cancel, first: l.life.Cause(), ttl: l.ttl, cause: cause}, true
}

// announce tells of an ending that markLocked made: a loss to the
// observers first (whoever wakes on the context finds the metrics and logs
// already telling of it), then the context, the renewer and the held set.
func (l *redisLock) announce(to lockState, reason observe.Reason, e ending) {
	if to == lost {
		l.c.cfg.observers.lost(observe.LostEvent{Name: l.name, Fence: l.fence, Reason: reason, Held: time.Since(l.start), TTL: e.ttl, Cause: e.cause})
	}
	if e.cancel != nil {
		e.cancel(e.first)
	}
	l.c.renewer.Forget(&l.entry)
	l.c.own.Untrack(l)
}

// end moves a held lock to released or lost, once, and cancels its context
// with cause; a loss is reported to the observers.
func (l *redisLock) end(to lockState, reason observe.Reason, cause error) {
	l.mu.Lock()
	e, ok := l.markLocked(to, cause)
	l.mu.Unlock()
	if ok {
		l.announce(to, reason, e)
	}
}
