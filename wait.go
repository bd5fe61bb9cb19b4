package dlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/lease"
	"github.com/dlock-go/dlock/internal/node"
)

// waiter is one Acquire's wait for a busy lock, in the queue in Redis with
// its own token, whatever the lock's kind: waiters are handed the lock in
// the order they arrived in Redis, across processes.
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
	msgs <-chan string // this waiter's copy of sub's messages

	token string // of the attempts: a fresh one after a grant was given back
	// queued: an attempt may have put token in the Redis queue. Every
	// attempt after the subscription's confirmation queues, so it also
	// tells whether the last attempt did.
	queued bool
	// placed: a queued attempt was answered busy, so the waiter has its
	// place in line (counted in q.placed, for the waiters a test sees).
	placed bool
	// unsure: an attempt of token got no answer (an outage), so token may
	// hold a grant or a place in line that nobody heard of: the wait gives
	// it back if it ends without the lock.
	unsure bool
	// outage is the last error of an outage the wait is riding out (nil
	// once Redis answers again), since when it began, and the backoff
	// between the attempts it fails.
	outage      error
	outageSince time.Time
	outageWait  lease.Backoff
	lateWait    lease.Backoff // between attempts whose grants came late
	// seen is the largest holder fence of a queued busy reply, lastSeen
	// the send time of the last queued busy attempt: see handOff.
	// firstQueued is the send time of token's first queued attempt: a
	// hand-off to token comes after it, whether or not its reply was heard.
	seen        int64
	lastSeen    time.Time
	firstQueued time.Time
}

// wait waits for the lock, up to the wait limit, the end of ctx or Close.
func (w *waiter) wait(ctx context.Context) (*redisLock, error) {
	wctx, cancel := context.WithTimeout(ctx, w.ac.wait)
	defer cancel()
	defer context.AfterFunc(w.c.closing, cancel)() // Close ends the wait

	// Every waiter takes its own place in the Redis queue, with its own
	// token, when it arrives: the order is the server's arrival order
	// across processes. (A process-local line in front of it, with one
	// goroutine per name in Redis, put a goroutine that arrived behind
	// another of its process behind every waiter of other processes.)
	w.q = w.c.joinWaiters(w.name)
	defer w.c.leaveWaiters(w.name, w.q)
	defer func() {
		if w.placed {
			w.c.place(w.q, -1)
		}
	}()
	sub, err := w.subscribe(wctx)
	if err != nil {
		w.leave(ctx)
		if wctx.Err() != nil {
			return nil, w.gaveUp(ctx)
		}
		return nil, err
	}
	defer w.c.notify.unsubscribe(sub)
	msgs, stop := w.c.notify.listen(sub)
	defer stop()
	w.sub, w.msgs = sub, msgs
	if w.token == "" {
		w.token = w.ac.newToken()
	}
	return w.inLine(ctx, wctx)
}

// subscribe subscribes to this client's hand-off channel for the name,
// riding out an outage as the attempts do: an error ErrUnavailable matches
// is tried again after a pause, until the wait ends.
func (w *waiter) subscribe(wctx context.Context) (*subscription, error) {
	for {
		sub, err := w.c.notify.subscribe(wctx, w.keys.Handoff+w.c.id)
		if err == nil {
			return sub, nil
		}
		err = opError("acquire", w.name, redisError(err))
		if !w.c.outage(err) || wctx.Err() != nil {
			return nil, err
		}
		w.sawOutage(err)
		if !lease.Pause(w.outagePause(), wctx.Done()) {
			return nil, err
		}
	}
}

// latePause is how long the wait pauses after a grant that came too late:
// the engine's backoff, jittered.
func (w *waiter) latePause() time.Duration { return jittered(w.lateWait.Next()) }

// jittered is d drawn again between its half and itself, so that the
// waiters of many processes do not all come back at once.
func jittered(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// sawOutage records err, an outage's, for the wait's error should the wait
// end before Redis is back.
func (w *waiter) sawOutage(err error) {
	if w.outage == nil {
		w.outageSince = time.Now()
	}
	if redirect(err) && !unavailable(err) {
		// A redirect a Cluster client could not follow: its slot map is
		// in flux, which the wait's error reports as unavailable, as it
		// does any outage (outage explains why a wait rides it out).
		// Wrapped inside the *Error, whose operation and name the wait's
		// error already says.
		inner, oe := err, (*Error)(nil)
		if errors.As(err, &oe) {
			inner = oe.Err
		}
		inner = fmt.Errorf("%w: the Cluster's slot map is changing: %w", ErrUnavailable, inner)
		if oe != nil {
			cp := *oe
			cp.Err = inner
			inner = &cp
		}
		err = inner
	}
	w.outage = err
}

// outagePause is how long the wait pauses after an attempt an outage
// failed: the engine's backoff, jittered, and no longer than a waiter's
// renewal of its place in line, so that a place survives an outage that
// ends soon enough.
func (w *waiter) outagePause() time.Duration {
	return min(jittered(w.outageWait.Next()), waiterRenew(w.ac.ttl))
}

// inLine attempts, and listens between attempts, until the lock is ours or
// the wait ends. Two contexts meet here: wctx, the wait's, bounds the
// attempts; the caller's ctx bounds the work on a lock already handed over
// (a refresh, a release), which the wait limit must not cut short, and
// tells gaveUp whether the caller ended the wait.
func (w *waiter) inLine(ctx, wctx context.Context) (*redisLock, error) {
	for {
		r := w.try(wctx)
		var wake time.Duration
		switch {
		case r.lock != nil:
			return r.lock, nil
		case r.late:
			// The grant came too late and was given up: try again with a
			// fresh token, after a pause that grows while grants keep
			// coming late (a TTL near the round trip, a stalled process),
			// or the wait would grant, give back and grant again as fast
			// as Redis answers. The fresh token is in no line, so nothing
			// is to be heard meanwhile.
			w.freshToken()
			if !lease.Pause(w.latePause(), wctx.Done()) {
				return nil, w.gaveUp(ctx)
			}
			continue
		case r.unreplicated:
			// Granted, but too few replicas acknowledged it, and it was
			// released: replicas lag, are missing or resync after a
			// failover, which a later attempt may find over. As after an
			// outage, try again after a pause that grows, until the wait
			// ends; with a fresh token, since the released one's record
			// refuses it.
			w.freshToken()
			w.sawOutage(r.err)
			if !lease.Pause(w.outagePause(), wctx.Done()) {
				return nil, w.gaveUp(ctx)
			}
			continue
		case r.refused:
			// The token is dead in Redis (a forced unlock of the lock a
			// release handed to it, its message lost): start over, at once,
			// with a fresh one. A fresh token has no record, so this
			// happens once per forced token.
			w.freshToken()
			continue
		case r.transient:
			// Redis could not answer (a failover, a restart, a network
			// fault): the wait still has time, so the token keeps its
			// place and is sent again after a pause, and a release that
			// hands the lock over meanwhile still reaches it.
			w.unsure = true
			w.sawOutage(r.err)
			wake = w.outagePause()
		case !r.busy:
			// attempt has given the token up, queue entry included.
			w.queued, w.unsure = false, false
			if wctx.Err() != nil {
				return nil, w.gaveUp(ctx)
			}
			return nil, r.err
		default:
			// Busy: another holds the lock, so a lost reply of token
			// left it no grant; a place in line it may have is queued's
			// to give back.
			w.outage, w.outageWait, w.lateWait = nil, lease.Backoff{}, lease.Backoff{}
			w.unsure = false
			wake = wakeAfter(r.holderTTL, w.ac.ttl)
		}
		fence, ok := w.listen(wctx.Done(), wake)
		if !ok {
			w.leave(ctx)
			return nil, w.gaveUp(ctx)
		}
		if fence == 0 || w.unsure || w.handOffUndated() {
			// Attempt again; after a hand-off message too when a reply
			// of token was lost since its last answer (it may hold a
			// grant of another fence than the message's: the attempt
			// says "ours already" with the fence it really holds), or
			// when nothing known dates the hand-off's lease: the attempt
			// dates it from now.
			continue
		}
		l, err := w.handedOver(ctx, fence)
		if err != nil && w.c.outage(err) {
			// Confirming the hand-off met an outage: the lock was let go
			// (or its token given back); wait on, as after a lapsed one,
			// or, the wait over, say so.
			w.sawOutage(err)
			if wctx.Err() != nil {
				return nil, w.gaveUp(ctx)
			}
			err = ErrNotHeld
		}
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
	sent := time.Now()
	if confirmed && !w.queued {
		w.firstQueued = sent
	}
	w.queued = w.queued || confirmed
	w.keys = w.keys.WithToken(w.token) // built once per token, not per attempt
	r := w.c.attempt(ctx, w.name, w.keys, w.ac, w.token, confirmed, true)
	if r.busy {
		if confirmed {
			w.seen, w.lastSeen = max(w.seen, r.holderFence), sent
			if !w.placed {
				w.placed = true
				w.c.place(w.q, 1)
			}
		}
		w.q.setHolder(r.holder)
	}
	return r
}

// freshToken starts over with a new token after the last one was given
// back (released by token): it is in no queue yet.
func (w *waiter) freshToken() {
	w.token, w.queued, w.unsure, w.lastSeen, w.firstQueued = w.ac.newToken(), false, false, time.Time{}, time.Time{}
}

// listen waits, after an attempt, for what comes first: a hand-off of the
// lock to token (its fence, above 0), the subscription's confirmation or
// wake, the pause before the next attempt (0: attempt again), or the end
// of the wait (false).
func (w *waiter) listen(done <-chan struct{}, wake time.Duration) (fence int64, ok bool) {
	var ready <-chan struct{}
	if !w.queued {
		ready = w.sub.ready // confirmed: queue now
	}
	timer := time.NewTimer(wake)
	defer timer.Stop()
	for {
		select {
		case msg := <-w.msgs:
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

// handedTo parses a hand-off message meant for token: "token:fence", or,
// when one release let several readers of this client in, one entry per
// token joined by ';' ("token:fence;token:fence"). A client waits with one
// token per name, so the rest are stale entries or another Client's.
func handedTo(msg, token string) (int64, bool) {
	for entry := range strings.SplitSeq(msg, ";") {
		t, f, ok := strings.Cut(entry, ":")
		if !ok || t != token {
			continue
		}
		fence, err := strconv.ParseInt(f, 10, 64)
		return fence, err == nil
	}
	return 0, false
}

// handOffStart is when a hand-off to token began at the earliest: after
// lastSeen, or, with no busy reply heard for the token, after its first
// queued attempt.
func (w *waiter) handOffStart() time.Time {
	if w.lastSeen.IsZero() {
		return w.firstQueued
	}
	return w.lastSeen
}

// handOffUndated reports whether a hand-off to token now would have no
// lease left dated from handOffStart.
func (w *waiter) handOffUndated() bool {
	return !time.Now().Before(leaseEnd(w.handOffStart(), w.ac.ttl))
}

// handedOver makes the Lock a release handed to us. Its lease started after
// handOffStart, which has some of it left (inLine attempts again when not);
// when too little of it is known to be left, it is refreshed before the
// caller starts work. An error matching ErrNotHeld means the hand-off's
// lease ran out before it was confirmed: the caller waits on.
func (w *waiter) handedOver(ctx context.Context, fence int64) (*redisLock, error) {
	c, ac := w.c, w.ac
	start := w.handOffStart()
	l := c.newLock(ctx, w.name, w.keys, w.token, fence, ac, start)
	fail := func(err error) (*redisLock, error) {
		// Nobody else can release this lock: do it before giving up, or it
		// stays held and renewed with no owner.
		_ = l.releaseOrGiveBack(ctx)
		return nil, err
	}
	if ac.waits() {
		// The releaser wrote the hand-off on its own connection; a WAIT
		// (or WAITAOF) after our refresh on ours covers it too,
		// replication and the AOF being in order.
		ack, err := c.refreshWithWait(ctx, l, ac)
		if err == nil {
			err = c.checkReplicated(ctx, l, ac, ack)
		}
		if err != nil {
			return fail(err)
		}
		return l, nil
	}
	if time.Since(start) > ac.ttl/2 {
		if err := l.Refresh(ctx, ac.ttl); err != nil {
			return fail(err)
		}
	}
	return l, nil
}

// leave gives token back when the wait ends while it may be in the Redis
// queue, or hold a grant an outage kept from us. In the background: the
// caller's wait is over, and a Redis that stopped answering must not hold
// it up for the release timeout. A late attempt of token is refused once
// it is withdrawn. Only once: the give-back is under way.
func (w *waiter) leave(ctx context.Context) {
	if w.token != "" && (w.queued || w.unsure) {
		w.c.giveBack(ctx, w.keys, w.token, w.ac.ttl)
	}
	w.queued, w.unsure = false, false
}

// gaveUp is the error of a wait that ended without the lock; during an
// outage, it says what the outage was and since when.
func (w *waiter) gaveUp(ctx context.Context) error {
	err := w.c.gaveUp(ctx, w.name, w.q.lastHolder())
	var ne *NotObtainedError
	if w.outage != nil && errors.As(err, &ne) {
		ne.DuringOutage(w.outage, time.Since(w.outageSince))
	}
	return err
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
