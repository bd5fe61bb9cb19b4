package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/lease"
	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/observe"
)

// redisLock is the Lock a Client hands out: one acquisition of a named
// lock. It is safe for concurrent use.
//
// Its token identifies this acquisition only: Release, Refresh and TTL act
// in Redis only while the stored token is still this one, so a holder whose
// lease ran out can never free or extend the next holder's lock.
//
// A Lock is renewed in the background (unless acquired WithoutRenewal) and
// has a context of its own, cancelled the moment the lock ends: see Context.
type redisLock struct {
	c       *Client
	name    string
	keys    node.Keys
	token   string
	fence   int64
	renew   bool          // the client's renewal loop keeps it alive
	start   time.Time     // when it was acquired (send time), for held times
	maxHold time.Duration // WithMaxHold, or 0
	minHold time.Duration // WithMinHold, or 0
	hold    time.Time     // no lease beyond this when maxHold is set
	// durable is WithDurableGrant's timeout: renewals and refreshes are
	// confirmed on disk (WAITAOF) before they extend the lease; 0: not.
	durable time.Duration
	// replicas is how many replicas confirmed the grant (WithReplicas'
	// WAIT, or WAITAOF's replicas with durable): what a re-entry asking
	// for more may not get a handle on.
	replicas int

	holdWarn time.Duration // report a hold this long (WithHoldWarning); 0: never
	warned   atomic.Bool   // reported: once per lock

	// acquirer is the acquirer's context: the lock's context is made from
	// its values, without its cancellation, on the first call of Context.
	acquirer context.Context

	// releaseMu lets one Release run at a time, across its round trip.
	// The lock order: releaseMu, then mu, then the renewer's mu (see
	// lease.Renewer.mu); never the other way round.
	releaseMu sync.Mutex

	mu sync.Mutex // guards the fields below
	// life is the lock's state (held, then released or lost), why it
	// ended, and its deadline timer, which fires at until unless a renewal
	// moved it: the engine's one copy of those rules.
	life lease.Life
	ttl  time.Duration // the lease each renewal asks for: WithTTL, or the last Refresh
	// leased is the send time of the latest confirmed acquire, renewal or
	// refresh: renewals are scheduled from it.
	leased time.Time
	// until is the lease deadline: the latest end, less the drift margin, of
	// any lease Redis confirmed, each dated from its send time. Redis never
	// shortens a lease (see extend in common.lua), so whatever order lease
	// changes ran in, the lease in Redis ends after until.
	until time.Time
	// served is the end in Redis of the latest lease Redis confirmed
	// (send time + its ttl, no margin), and asked the latest end any
	// lease asked for (an acquisition, a renewal or Refresh sent, answered
	// or not): when asked is later, a lease nobody heard of may hold the
	// key beyond served (see giveBackLapsed).
	served, asked time.Time
	holdDone      bool // renewal stopped at the hold limit
	// renewFailures counts the renewals in a row that got no answer.
	renewFailures int
	entry         lease.Entry // the lock's place in the renewer
	// releasing: a Release is under way. A renewal or Refresh that finds the
	// lock gone then saw our own release, not a loss.
	releasing bool
	// unconfirmed: a Release was sent and got no answer (its reply lost,
	// Redis unreachable): it may have run. confirmRelease sends it again
	// until an answer comes while the lock is held.
	unconfirmed bool
	// retryOK: confirmRelease found the release done; the caller's Release
	// tried again reports success, once, as the record in Redis says.
	retryOK bool
	// The lock's context is made on the first call of Context: most
	// callers of Acquire never ask for it, and it costs allocations.
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// lockState is the lock's phase in the engine's Life.
type lockState = lease.Phase

const (
	held     = lease.Held
	released = lease.Released
	lost     = lease.Lost
)

func (c *Client) newLock(ctx context.Context, name string, k node.Keys, token string, fence int64, ac acquireConfig, sent time.Time) *redisLock {
	l := &redisLock{c: c, name: name, keys: k, token: token, fence: fence, renew: ac.renew, start: sent, ttl: ac.ttl,
		leased: sent, until: leaseEnd(sent, ac.ttl), served: sent.Add(ac.ttl), asked: sent.Add(ac.ttl), minHold: ac.minHold,
		durable: ac.durable, replicas: ac.replicas}
	if ac.maxHold > 0 {
		l.maxHold, l.hold = ac.maxHold, sent.Add(ac.maxHold)
	}
	l.holdWarn = ac.holdWarn
	l.acquirer = ctx
	// Tracked before the deadline timer exists: a lease already over fires
	// it at once, and its untrack must come after this track.
	c.own.Track(l) // refused once Close began: afterClose releases it
	l.mu.Lock()
	l.life.Arm(l.leaseLeft(), l.leaseEnded)
	l.renewLater()
	l.mu.Unlock()
	return l
}

// Name returns the lock's name as given to Acquire.
func (l *redisLock) Name() string { return l.name }

// Token returns this acquisition's random token (128 bits, hex). It is a
// secret of the holder: whoever knows it can release the lock, so do not log
// it in full.
func (l *redisLock) Token() string { return l.token }

// Fence returns this acquisition's fencing token. Fences of one name grow
// with every acquisition, also across expiry, a Redis restarted empty and a
// failover that lost the last grant: each is at least the previous one + 1
// and at least the Redis server's clock in µs. A
// resource that remembers the largest fence it has seen, and refuses writes
// with a smaller one, is safe from a holder whose lease ran out unnoticed.
func (l *redisLock) Fence() int64 { return l.fence }

// Context returns the lock's context: cancelled when the lock ends. Pass it
// to the work the lock protects. context.Cause tells why it ended:
//   - ErrReleased: Release was called;
//   - an error matching ErrLockLost: a renewal found the lock gone or taken
//     over, or no renewal was confirmed before the lease deadline (the last
//     confirmed lease minus a drift margin, on the local monotonic clock:
//     before Redis lets the key expire, never after), or the lease of a lock
//     acquired WithoutRenewal ran out;
//   - an error matching both ErrLockLost and ErrHoldLimit: WithMaxHold's limit
//     stopped renewal and the lease then ran out.
//
// A holder paused (GC, SIGSTOP, a VM freeze) past its deadline finds the
// context cancelled as soon as it runs again, without a network round trip
// (Context itself looks at the deadline, and the timer ends the context
// it returned before); but what it did during the pause is unprotected: use
// fencing for writes.
func (l *redisLock) Context() context.Context {
	// A deadline that passed while this process did not run (stopped,
	// frozen, starved of CPU) ends the lock here, at once: the deadline
	// timer's goroutine may run only after the holder has asked and begun
	// its work. (TestContextOfLeaseOverIsEndedAtOnce.)
	l.mu.Lock()
	over := l.life.Held() && l.leaseLeft() <= 0
	l.mu.Unlock()
	if over {
		l.leaseEnded()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		// The lock's context keeps the values of the acquirer's (trace
		// ids) but not its cancellation: the lock lives until it is
		// released or lost. It carries the lock itself, so that
		// FromContext on it finds this lock and not one the acquirer's
		// context held.
		l.ctx, l.cancel = context.WithCancelCause(NewContext(context.WithoutCancel(l.acquirer), l))
		if !l.life.Held() {
			l.cancel(l.life.Cause())
		}
	}
	return l.ctx
}

// TTL returns the remaining lease as Redis sees it. It returns ErrNotHeld when
// the lock is no longer ours.
func (l *redisLock) TTL(ctx context.Context) (time.Duration, error) {
	if !l.is(held) {
		return 0, opError("ttl", l.name, ErrNotHeld)
	}
	left, err := l.c.batch.Run(ctx, node.PTTL(l.keys, l.token)).Int64()
	if err != nil {
		return 0, opError("ttl", l.name, redisError(err))
	}
	if left < 0 {
		return 0, opError("ttl", l.name, ErrNotHeld)
	}
	return time.Duration(left) * time.Millisecond, nil
}

// Refresh makes the lease last at least ttl from now, if the lock is still
// ours; else it returns ErrNotHeld and changes nothing. It never shortens the
// lease in Redis: a shorter ttl takes effect from the next renewal on, once
// the longer lease has run down. ttl must lie within the client's bounds.
// Later renewals use the new ttl. Like a renewal, a Refresh never leases
// beyond the hold limit of WithMaxHold.
//
// A refresh whose answer arrives after the lease deadline passed reports
// ErrNotHeld: the lock's context has ended by then.
func (l *redisLock) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := l.c.cfg.checkTTL(ttl); err != nil {
		return opError("refresh", l.name, err)
	}
	ttl = ttl.Truncate(time.Millisecond)
	if l.durable > 0 && l.renew {
		if err := durableWithinTTL(l.durable, ttl); err != nil {
			return opError("refresh", l.name, err)
		}
	}
	if !l.is(held) {
		return opError("refresh", l.name, ErrNotHeld)
	}
	sent := time.Now()
	l.mu.Lock()
	if !l.life.Held() {
		// Ended since the look above: a refresh sent now would lease the
		// key for nobody, with no give-back to free it.
		l.mu.Unlock()
		return opError("refresh", l.name, ErrNotHeld)
	}
	ttl, within, last := l.capAtHold(sent, ttl)
	if within {
		l.askLocked(sent, ttl)
	}
	l.mu.Unlock()
	if !within {
		return opError("refresh", l.name, fmt.Errorf("%w: %w of %v reached", ErrNotHeld, ErrHoldLimit, l.maxHold))
	}
	ok, err := l.refreshScript(ctx, ttl)
	if err != nil {
		return opError("refresh", l.name, redisError(err))
	}
	if !ok {
		if !l.isReleasing() {
			l.end(lost, observe.ReasonTakenOver, fmt.Errorf("%w: refresh found the lock gone or taken over", ErrLockLost))
		}
		return opError("refresh", l.name, ErrNotHeld)
	}
	if !l.confirm(sent, ttl, true, last) {
		return opError("refresh", l.name, fmt.Errorf("%w: %w", ErrNotHeld, context.Cause(l.Context())))
	}
	l.mu.Lock()
	l.renewLater()
	l.mu.Unlock()
	return nil
}

// Release lets the lock go, hands it to the next waiter and cancels the
// lock's context. It returns ErrNotHeld when the lock was not ours any more
// (released before, expired, or taken by another holder); then nothing in
// Redis is changed.
//
// Release stops renewal first, then runs on a context of its own: ctx's
// values (trace ids) but not its cancellation or deadline, bounded by the
// client's release timeout (WithReleaseTimeout). A deferred Release works
// after the request's context was cancelled, and a caller's deadline cannot
// cut it short and leave the lock blocking others for its TTL. Close
// follows the same rule.
func (l *redisLock) Release(ctx context.Context) error {
	rctx, cancel := l.c.cleanupContext(ctx)
	defer cancel()
	return l.release(rctx, ErrReleased)
}

// releaseOrGiveBack releases a lock its caller will not return to anyone (a
// hand-off or a grant it cannot use). When the release fails, the token is
// given back in the background, retried until the lease would have ended:
// nobody else can free the lock, and it must not block others for its TTL.
func (l *redisLock) releaseOrGiveBack(ctx context.Context) error {
	err := l.Release(ctx)
	if err != nil && !errors.Is(err, ErrNotHeld) {
		l.mu.Lock()
		ttl := l.ttl
		l.mu.Unlock()
		l.c.giveBack(ctx, l.keys, l.token, ttl)
	}
	return err
}

// release is Release on the caller's context as it is; cause is what the
// lock's context ends with.
func (l *redisLock) release(ctx context.Context, cause error) error {
	l.releaseMu.Lock()
	defer l.releaseMu.Unlock()
	l.mu.Lock()
	phase, retryOK := l.life.Phase(), l.retryOK
	l.retryOK = false
	l.mu.Unlock()
	if phase == released {
		if retryOK {
			return nil // the release that failed to answer ran: confirmRelease heard it
		}
		return opError("release", l.name, ErrNotHeld)
	}
	l.c.renewer.Forget(&l.entry)
	l.setReleasing(true)
	res, err := l.sendRelease(ctx)
	if err != nil {
		l.setReleasing(false)
		l.mu.Lock()
		now := time.Now()
		phase := l.life.Phase()
		// A lapsed lock whose give-back was left to this Release
		// (leaseEnded skips it while one is under way): the key a renewal
		// may have leased for nobody is given back now, the holder being
		// done with it.
		lapsed, until := l.lapsedLocked(now), l.asked
		// A held one: the release may have run. It is sent again in the
		// background until it is answered, so that a release that ran is
		// not reported lost at the lease deadline, and one that did not
		// frees the key before that.
		confirm := phase == held && !l.unconfirmed
		l.unconfirmed = l.unconfirmed || phase == held
		l.mu.Unlock()
		switch {
		case lapsed:
			l.giveBackLapsed(now, until)
		case confirm:
			l.c.own.Go(func() { l.confirmRelease(cause, until) })
		}
	} else {
		l.setUnconfirmed(false)
	}
	e := observe.ReleaseEvent{Name: l.name, Fence: l.fence, Held: time.Since(l.start), AfterLoss: l.is(lost), TTL: l.leaseTTL()}
	switch {
	case err == nil && e.AfterLoss && (res == 1 || res == 2):
		// The lock's context already told the holder it was lost (its
		// lease deadline passed, a margin before Redis' own): the key, still
		// ours, is freed early for the next holder, but the holder learns
		// what its context said. Nothing was exclusive since the loss.
		err = opError("release", l.name, fmt.Errorf("%w: lost before the release (%v)", ErrNotHeld, l.lostCause()))
		e.Result = observe.ResultNotHeld
	case err != nil:
		// State unknown: the caller may try again, and a re-sent release
		// that finds the record of its release still reports success.
		// Until one is answered (confirmRelease) the lease deadline still
		// ends the lock's context.
		err = opError("release", l.name, redisError(err))
		e.Result = observe.ResultError
	case res == 1 || res == 2: // 2: this token's release had already run (a re-sent command)
		e.Result = observe.ResultOK
	case res == 0:
		err = opError("release", l.name, ErrNotHeld)
		e.Result = observe.ResultNotHeld
	default:
		err = opError("release", l.name, fmt.Errorf("unexpected reply %d", res))
		e.Result = observe.ResultError
	}
	if e.Result == observe.ResultOK {
		// Held until now: a lock lost before (AfterLoss), or found gone,
		// was held only until its loss.
		l.warnLongHold(e.Held, e.TTL)
	}
	if e.Result != observe.ResultError {
		l.end(released, "", cause)
	}
	e.Err = err
	l.c.cfg.observers.release(ctx, e)
	return err
}

// confirmRelease sends a Release that got no answer again, with the
// engine's backoff, until one is answered or the key could hold nothing of
// ours any more (until, the latest lease asked for) or Close begins. The
// caller's own Release tried again meanwhile settles it as well. Answered
// "released" (1 now, 2 before), the lock ends released, not lost, and the
// caller's next Release reports success; "not ours" (0), it was lost
// before any release of ours ran.
func (l *redisLock) confirmRelease(cause error, until time.Time) {
	lease.Retry(until, l.c.closing.Done(), func() error {
		l.releaseMu.Lock()
		defer l.releaseMu.Unlock()
		l.mu.Lock()
		pending := l.unconfirmed && l.life.Held()
		if pending {
			l.releasing = true // under the same hold: a renewal's "gone" is our release
		}
		l.mu.Unlock()
		if !pending {
			return nil // settled by the caller's Release, or the lock ended
		}
		rctx, cancel := l.c.cleanupContext(context.Background())
		defer cancel()
		res, err := l.sendRelease(rctx)
		l.mu.Lock()
		now := time.Now()
		phase := l.life.Phase()
		if err != nil {
			l.releasing = false
			// The deadline may have passed during this try, and left the
			// give-back of a key a renewal may have leased for nobody to
			// it (leaseEnded skips it while a release is under way): give
			// it back now, as a failed Release does.
			lapsed, asked := l.lapsedLocked(now), l.asked
			l.mu.Unlock()
			if lapsed {
				l.giveBackLapsed(now, asked)
			}
			return err
		}
		l.unconfirmed = false
		done := res == 1 || res == 2
		// Answered after the deadline ended the lock: the key is freed,
		// but the holder was told the lock was lost, and its retried
		// Release says so (as release does for a reply after the loss).
		l.retryOK = done && phase == held
		if !done || phase != held {
			l.releasing = false
		}
		l.mu.Unlock()
		switch {
		case phase != held:
		case done:
			e := observe.ReleaseEvent{Name: l.name, Fence: l.fence, Held: time.Since(l.start), TTL: l.leaseTTL(), Result: observe.ResultOK}
			l.warnLongHold(e.Held, e.TTL)
			l.end(released, "", cause)
			l.c.cfg.observers.release(rctx, e)
		default:
			l.end(lost, observe.ReasonTakenOver, fmt.Errorf("%w: found gone or taken over before its release was answered", ErrLockLost))
		}
		return nil
	})
}

// sendRelease runs the holder's release of the lock: a 30 s record, and
// the min hold.
func (l *redisLock) sendRelease(ctx context.Context) (int64, error) {
	return l.c.releaseWith(ctx, l.keys, l.token, node.ReleaseArgs{Record: releaseRecordTTL, MinHold: l.minHold})
}

// lapsedLocked reports whether the lock was lost while a lease asked for
// but never confirmed may still hold its key in Redis. l.mu must be held.
func (l *redisLock) lapsedLocked(now time.Time) bool {
	return l.life.Phase() == lost && l.asked.After(now)
}

func (l *redisLock) setUnconfirmed(v bool) {
	l.mu.Lock()
	l.unconfirmed = v
	l.mu.Unlock()
}

// releaseWith runs the release script with a's record, give-up and min hold,
// and the client's channels and fence lifetime.
func (c *Client) releaseWith(ctx context.Context, k node.Keys, token string, a node.ReleaseArgs) (int64, error) {
	a.Sharded, a.FenceLifetime = c.notify.channels.sharded(), c.cfg.fenceLifetime
	return c.batch.Run(ctx, node.Release(k, token, a)).Int64()
}

// releaseRecordTTL is how long Redis keeps the record of a token's release
// (see lease.ReleaseRecordTTL).
const releaseRecordTTL = lease.ReleaseRecordTTL

// forcedRecordTTL is how long Redis keeps the record of a forced unlock. It
// outlives the holder's renewals by far (a renewal comes every third of a
// TTL, and TTLs are at most a day by default) and an operator's pace in
// forcing a Redlock's nodes one after another; it costs one small key per
// forced unlock, a rare act.
const forcedRecordTTL = 24 * time.Hour

// refreshScript runs the owner-checked refresh whatever the local state. It
// reports what Redis answered; the caller confirms the lease.
func (l *redisLock) refreshScript(ctx context.Context, ttl time.Duration) (bool, error) {
	if l.durable > 0 {
		return l.refreshDurable(ctx, ttl)
	}
	ok, err := l.c.batch.Run(ctx, node.Refresh(l.keys, l.token, ttl)).Int64()
	return err == nil && ok == 1, err
}

// lostCause is the cause the lock's context ended with.
func (l *redisLock) lostCause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.life.Cause()
}

func (l *redisLock) setReleasing(v bool) {
	l.mu.Lock()
	l.releasing = v
	l.mu.Unlock()
}

func (l *redisLock) isReleasing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.releasing
}

func (l *redisLock) is(s lockState) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.life.Phase() == s
}

// warnLongHold reports a hold of held that ran past the lock's warning
// threshold, once. The renewal loop asks after every renewal, Release at the
// end: a lock that is not renewed is reported when it is let go.
func (l *redisLock) warnLongHold(held, ttl time.Duration) {
	if l.holdWarn <= 0 || held < l.holdWarn || !l.warned.CompareAndSwap(false, true) {
		return
	}
	l.c.cfg.observers.holdWarning(observe.HoldWarningEvent{Name: l.name, Fence: l.fence, Held: held, TTL: ttl, Threshold: l.holdWarn})
}

// leaseTTL is the lease renewals ask for.
func (l *redisLock) leaseTTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}
