package dlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/node"
)

// waiter is one Acquire's wait for a busy lock: first in this process's
// line for the name, then, once first, in the queue in Redis. Only the first
// local waiter of a name gets past the local line, so one goroutine per name
// and process talks to Redis.
//
// Until Redis confirms the subscription to this client's hand-off channel,
// the waiter makes plain attempts on its timer, without queueing: a hand-off
// published before the confirmation would be missed. Once confirmed, its
// attempts queue it in Redis, and a release hands the lock over with a
// message "token:fence" (see handOff).
type waiter struct {
	c    *Client
	name string
	keys node.Keys
	ac   acquireConfig
	q    *localQueue   // this process's line for the name
	sub  *subscription // this client's hand-off channel for the name

	token string // of the attempts: a fresh one after a grant was given back
	// queued: an attempt may have put token in the Redis queue. Every
	// attempt after the subscription's confirmation queues, so it also
	// tells whether the last attempt did.
	queued bool
	// seen is the largest holder fence of a queued busy reply, lastSeen
	// the send time of the last queued busy attempt: see handOff.
	seen     int64
	lastSeen time.Time
}

// wait waits for the lock, up to the wait limit, the end of ctx or Close.
func (w *waiter) wait(ctx context.Context) (*redisLock, error) {
	wctx, cancel := context.WithTimeout(ctx, w.ac.wait)
	defer cancel()
	defer context.AfterFunc(w.c.closing, cancel)() // Close ends the wait

	q, turn := w.c.joinLocal(w.name)
	defer w.c.leaveLocal(w.name, q, turn)
	w.q = q
	select {
	case <-turn:
	case <-wctx.Done():
		return nil, w.gaveUp(ctx)
	}
	sub, err := w.c.notify.subscribe(wctx, w.keys.Handoff+w.c.id)
	if err != nil {
		return nil, opError("acquire", w.name, redisError(err))
	}
	defer w.c.notify.unsubscribe(sub)
	w.sub, w.token = sub, w.ac.newToken()
	return w.inLine(ctx, wctx)
}

// inLine attempts, and listens between attempts, until the lock is ours or
// the wait ends. Two contexts meet here: wctx, the wait's, bounds the
// attempts; the caller's ctx bounds the work on a lock already handed over
// (a refresh, a release), which the wait limit must not cut short, and
// tells gaveUp whether the caller ended the wait.
func (w *waiter) inLine(ctx, wctx context.Context) (*redisLock, error) {
	for {
		r := w.try(wctx)
		switch {
		case r.lock != nil:
			return r.lock, nil
		case r.late:
			// The grant came too late and was given up: try again at
			// once, with a fresh token.
			w.freshToken()
			continue
		case !r.busy:
			// attempt has given the token up, queue entry included.
			if wctx.Err() != nil {
				return nil, w.gaveUp(ctx)
			}
			return nil, r.err
		}
		fence, ok := w.listen(wctx.Done(), r.holderTTL)
		if !ok {
			w.leave(ctx)
			return nil, w.gaveUp(ctx)
		}
		if fence == 0 {
			continue // attempt again
		}
		l, err := w.handedOver(ctx, fence)
		if !errors.Is(err, ErrNotHeld) {
			return l, err
		}
		// The handed-over lease ran out before it could be confirmed:
		// that hand-off is over; wait on, with a fresh token (the failed
		// one was released).
		w.seen = max(w.seen, fence)
		w.freshToken()
	}
}

// try makes one attempt with token: a queued one once the subscription is
// confirmed, a plain one before.
func (w *waiter) try(ctx context.Context) attemptResult {
	confirmed := w.c.notify.confirmed(w.sub)
	w.queued = w.queued || confirmed
	sent := time.Now()
	r := w.c.attempt(ctx, w.name, w.keys, w.ac, w.token, confirmed)
	if r.busy {
		if confirmed {
			w.seen, w.lastSeen = max(w.seen, r.holderFence), sent
		}
		w.q.setHolderTTL(r.holderTTL)
	}
	return r
}

// freshToken starts over with a new token after the last one was given
// back (released by token): it is in no queue yet.
func (w *waiter) freshToken() { w.token, w.queued = w.ac.newToken(), false }

// listen waits, after a busy attempt, for what comes first: a hand-off of
// the lock to token (its fence, above 0), the subscription's confirmation or
// the wake-up timer (0: attempt again), or the end of the wait (false).
func (w *waiter) listen(done <-chan struct{}, holder time.Duration) (fence int64, ok bool) {
	var ready <-chan struct{}
	if !w.queued {
		ready = w.sub.ready // confirmed: queue now
	}
	timer := time.NewTimer(wakeAfter(holder, w.ac.ttl))
	defer timer.Stop()
	for {
		select {
		case msg := <-w.sub.msgs:
			if fence, ok := w.handOff(msg); ok {
				return fence, true
			}
			// For another waiter of this process, or stale.
		case <-ready:
			return 0, true
		case <-timer.C:
			return 0, true
		case <-done:
			return 0, false
		}
	}
}

// handOff reads a hand-off message "token:fence" and reports whether it
// hands the lock to token now.
//
// The message travels on the pub/sub connection, the replies on another: a
// message published before an attempt ran can be read after that attempt's
// reply. A busy reply carries the holder's fence, so a hand-off whose fence
// is not above the largest such fence seen happened before that attempt,
// and was lost since (the lease ran out while this process stalled, and
// somebody else took the lock): it is ignored. A newer one happened after
// every busy attempt, so its lease started after lastSeen, the last one's
// send time (see handedOver).
func (w *waiter) handOff(msg string) (int64, bool) {
	fence, ok := handedTo(msg, w.token)
	return fence, ok && w.queued && fence > w.seen
}

// handedTo parses a hand-off message "token:fence" meant for token.
func handedTo(msg, token string) (int64, bool) {
	t, f, ok := strings.Cut(msg, ":")
	if !ok || t != token {
		return 0, false
	}
	fence, err := strconv.ParseInt(f, 10, 64)
	return fence, err == nil
}

// handedOver makes the Lock a release handed to us. Its lease started after
// lastSeen; when too little of it is known to be left, it is refreshed before
// the caller starts work. An error matching ErrNotHeld means the hand-off's
// lease ran out before it was confirmed: the caller waits on.
func (w *waiter) handedOver(ctx context.Context, fence int64) (*redisLock, error) {
	c, ac := w.c, w.ac
	l := c.newLock(ctx, w.name, w.keys, w.token, fence, ac, w.lastSeen)
	fail := func(err error) (*redisLock, error) {
		// Nobody else can release this lock: do it before giving up, or it
		// stays held and renewed with no owner.
		_ = l.releaseOrGiveBack(ctx)
		return nil, err
	}
	if ac.replicas > 0 {
		// The releaser wrote the hand-off on its own connection; a WAIT
		// after our refresh on ours covers it too, replication being in
		// order.
		acked, err := c.refreshWithWait(ctx, l, ac)
		if err == nil {
			err = c.checkReplicated(ctx, l, ac, acked)
		}
		if err != nil {
			return fail(err)
		}
		return l, nil
	}
	if time.Since(w.lastSeen) > ac.ttl/2 {
		if err := l.Refresh(ctx, ac.ttl); err != nil {
			return fail(err)
		}
	}
	return l, nil
}

// leave gives token back when the wait ends while it may be in the Redis
// queue. In the background: the caller's wait is over, and a Redis that
// stopped answering must not hold it up for the release timeout. A late
// attempt of token is refused once it is withdrawn.
func (w *waiter) leave(ctx context.Context) {
	if w.queued {
		w.c.giveBack(ctx, w.keys, w.token, w.ac.ttl)
	}
}

// gaveUp is the error of a wait that ended without the lock.
func (w *waiter) gaveUp(ctx context.Context) error {
	return w.c.gaveUp(ctx, w.name, w.q.holderTTL())
}

// wakeAfter is when a waiter checks again without a message: when the
// holder's lease would run out (a crashed holder publishes nothing), and no
// later than its renewal time, with jitter so waiters of many processes do
// not arrive together.
func wakeAfter(holder, ttl time.Duration) time.Duration {
	renew := waiterRenew(ttl)
	d := renew - time.Duration(rand.Int64N(int64(renew)/5+1))
	if holder > 0 && holder+time.Millisecond < d {
		d = holder + time.Millisecond
	}
	return d
}

// waiterRenew is how often a waiter renews its entry in the Redis queue, and
// waiterAlive how long the entry counts as alive without renewal. Renewing
// at most every TTL/4 keeps a handed-over lease well known: the hand-off
// happened after the last renewal that found us still waiting.
func waiterRenew(ttl time.Duration) time.Duration {
	return min(max(ttl/4, 10*time.Millisecond), time.Second)
}

func waiterAlive(ttl time.Duration) time.Duration { return 3 * waiterRenew(ttl) }

// queueExpiry is how long a name's waiter queue outlives its last renewed
// entry: twice the longest an entry lives (waiterAlive is at most 3s).
const queueExpiry = 6 * time.Second
