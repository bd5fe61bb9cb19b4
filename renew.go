package dlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/lease"
	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/observe"
)

// A Client's locks are renewed by one lease.Renewer (Client.renewer): it
// keeps them in a heap by their next renewal and sends each node's due
// renewals in one pipeline of that node's lane. The lock supplies what a
// renewal is (Renewal) and what its reply means (renewal.Answer).

// renewAt is when a lease confirmed at leased with ttl is renewed: after a
// third of it, leaving two thirds for retries before the deadline.
func renewAt(leased time.Time, ttl time.Duration) time.Time {
	return leased.Add(ttl / 3)
}

// Renewal is the lock's renewal due at now: one refresh of its lease on the
// node that serves its key. It looks at nothing of the lock: renewal.Call
// does, under one hold of l.mu, when the call leaves (the lock may have
// ended, reached its hold limit or passed its deadline, and then nothing is
// sent: renewing then could revive a lease already given up). One lock
// hold per renewal, not two: 100,000 held locks renew every third of a TTL.
func (l *redisLock) Renewal(time.Time) ([]lease.Part, lease.Round, bool) {
	rdb := l.c.rdb
	// The round and its part come from a pool: a round is done with at
	// its one Answer, or when its Call finds nothing to send.
	r := renewals.Get().(*renewal)
	r.l = l
	r.part[0] = lease.Part{Lane: lease.LaneOf(context.Background(), rdb, l.keys.Lock), Conn: rdb, Durable: l.durable}
	return r.part[:], r, true
}

// Call makes the refresh at now, when it leaves, bounded by the lease
// deadline: its lease is cut to the hold limit as of now, not as of when
// the renewal was due (it may have waited in its lane behind another
// pipeline to the node).
func (r *renewal) Call(_ int, now time.Time) (node.Call, time.Time, bool) {
	l := r.l
	l.mu.Lock()
	ttl, ok, last := l.capAtHold(now, l.ttl)
	deadline := l.until
	live := l.life.Held() && now.Before(deadline)
	if ok && live {
		l.askLocked(now, ttl)
	}
	l.mu.Unlock()
	if !ok || !live {
		*r = renewal{}
		renewals.Put(r)
		return node.Call{}, time.Time{}, false
	}
	r.ttl, r.last = ttl, last
	return node.Refresh(l.keys, l.token, ttl), deadline, true
}

var renewals = sync.Pool{New: func() any { return new(renewal) }}

// renewal is one renewal of a lock: the lease it asked for, whether that
// lease ends at the hold limit (both set by Call), and its one part.
type renewal struct {
	l    *redisLock
	ttl  time.Duration
	last bool
	part [1]lease.Part
}

// Answer applies the renewal's reply and schedules the next one: a third
// of the TTL later on success, sooner with backoff on error. A lock found
// gone or taken over is lost at once.
func (r *renewal) Answer(_ int, reply node.Reply) {
	l, ttl, last := r.l, r.ttl, r.last
	*r = renewal{} // its one part is answered: nobody uses it after this
	renewals.Put(r)
	ok, err := reply.Int64()
	switch {
	case err == nil && ok == 1:
		l.c.cfg.observers.renew(observe.RenewEvent{Name: l.name, Fence: l.fence, Result: observe.ResultOK})
		// One hold of l.mu for the lease and the next renewal.
		l.mu.Lock()
		confirmed := l.confirmLocked(reply.Sent, ttl, false, last)
		l.renewFailures = 0
		if confirmed && !l.holdDone {
			l.scheduleLocked(renewAt(reply.Sent, ttl))
		}
		l.mu.Unlock()
		if confirmed {
			l.warnLongHold(time.Since(l.start), ttl)
		}
	case err == nil && l.isReleasing():
		// Our own Release ran first: not a loss.
	case err == nil:
		l.c.cfg.observers.renew(observe.RenewEvent{Name: l.name, Fence: l.fence, Result: observe.ResultLost})
		l.end(lost, observe.ReasonTakenOver, fmt.Errorf("%w: renewal found the lock gone or taken over", ErrLockLost))
	default:
		l.c.cfg.observers.renew(observe.RenewEvent{Name: l.name, Fence: l.fence, Result: observe.ResultError, Err: err})
		// Unanswered: try again soon, with backoff. The deadline timer
		// ends the lock if no renewal gets through in time.
		l.mu.Lock()
		l.renewFailures++
		backoff := lease.RetryBackoff(ttl, l.renewFailures)
		l.scheduleLocked(time.Now().Add(backoff))
		l.mu.Unlock()
	}
}

// scheduleLocked has the renewer renew l at next, if l is still held and
// renewed in the background. l.mu must be held (see lease.Renewer.mu).
func (l *redisLock) scheduleLocked(next time.Time) {
	if l.renew && l.life.Held() {
		l.c.renewer.Schedule(&l.entry, l, next)
	}
}
