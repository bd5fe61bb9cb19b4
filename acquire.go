package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/lease"
	"github.com/dlock-go/dlock/internal/node"
)

// TryAcquire makes one attempt to take the lock name. When another holder
// has it, the error matches ErrNotObtained and is a *NotObtainedError that
// tells the holder's remaining lease.
//
// The attempt is one round trip: one script checks, writes the lock hash with
// its TTL and hands out the next fencing token atomically.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (Lock, error) {
	start := time.Now()
	ac, nested, err := c.prepare(ctx, name, opts)
	if nested != nil {
		return nested, nil
	}
	var l *redisLock
	if err == nil {
		l, err = c.tryAcquire(ctx, name, ac)
	}
	return c.acquired(ctx, name, start, l, err, ac)
}

// tryAcquire is TryAcquire's attempt, as an acquisition Close waits for.
func (c *Client) tryAcquire(ctx context.Context, name string, ac acquireConfig) (*redisLock, error) {
	if !c.own.Begin() {
		return nil, opError("acquire", name, ErrClosed)
	}
	defer c.own.End()
	r := c.attempt(ctx, name, c.keys(name), ac, ac.newToken(), false, false)
	return c.afterClose(ctx, name, r.lock, c.confirmSelf(r.err))
}

// confirmSelf keeps a busy error's self hint only when the holder is a lock
// this Client holds, by its fence: two processes can write one owner text
// (containers on the host's network, each its process 1). It walks the held
// locks, so it runs once per error returned, not per busy reply.
func (c *Client) confirmSelf(err error) error {
	if err == nil {
		return nil // ne below escapes (errors.As): no allocation for a success
	}
	var ne *NotObtainedError
	if errors.As(err, &ne) && ne.Self {
		ne.Self = c.own.Holds(func(l *redisLock) bool { return l.name == ne.Name && l.fence == ne.holderFence })
	}
	return err
}

// Acquire takes the lock name, waiting while another holder has it: until
// the lock is handed over, the wait limit (WithWait, default DefaultWait:
// 10 s) passes, or ctx ends. Giving up returns an error matching
// ErrNotObtained, whose *NotObtainedError names the holder; when ctx ended
// the wait it also matches ctx's error, so callers can tell "busy" from
// "cancelled".
//
// By default the Client renews the lock until Release (every third of its
// TTL, in one batch per Redis node for all its locks): unlike redsync's or
// redislock's locks there is nothing to extend by hand. If renewals fail,
// the Lock's Context ends, with ErrLockLost, before the lease can run out
// in Redis. WithoutRenewal makes a lease that just runs out.
//
// Waiting does not poll. Waiters line up in a queue in Redis, one entry per
// waiting goroutine in the order they arrived, across processes, and the
// holder's release hands the lock straight to the first live entry and
// tells it with one message: a release costs Redis the same whatever the
// number of waiters. A waiter also wakes when the holder's lease would run out (a
// crashed holder releases nothing) and renews its place in line on a
// jittered timer; a waiter that stops renewing (it crashed) is skipped.
//
// An outage does not end a wait that has time left: an error that matches
// ErrUnavailable (a failover, a restart, READONLY, LOADING, BUSY, a refused
// or reset connection) is tried again after a jittered backoff, with the
// same token, which keeps its place in line. A wait that ends during an
// outage matches ErrNotObtained and ErrUnavailable, and its text says what
// Redis answered and for how long. Other errors end the wait at once.
func (c *Client) Acquire(ctx context.Context, name string, opts ...AcquireOption) (Lock, error) {
	start := time.Now()
	ac, nested, err := c.prepare(ctx, name, opts)
	if nested != nil {
		return nested, nil
	}
	var l *redisLock
	if err == nil {
		l, err = c.acquireTracked(ctx, name, ac)
	}
	return c.acquired(ctx, name, start, l, err, ac)
}

// acquireTracked is acquire as an acquisition Close waits for.
func (c *Client) acquireTracked(ctx context.Context, name string, ac acquireConfig) (*redisLock, error) {
	if !c.own.Begin() {
		return nil, opError("acquire", name, ErrClosed)
	}
	defer c.own.End()
	l, err := c.acquire(ctx, name, ac)
	return c.afterClose(ctx, name, l, err)
}

// acquired reports an acquisition to the observers and returns its result,
// with a nil Lock (not a nil *redisLock in a Lock) on error; a lock taken
// WithReentry as the first handle of its re-entry.
func (c *Client) acquired(ctx context.Context, name string, start time.Time, l *redisLock, err error, ac acquireConfig) (Lock, error) {
	c.cfg.observers.acquire(ctx, name, start, l, err)
	switch {
	case err != nil:
		return nil, err
	case ac.reentrant:
		return reentrantOf(l, ac.shared, ac.permits), nil
	}
	return l, nil
}

// afterClose releases a lock obtained while Close ran, before Close returns
// (it waits for the acquisitions in flight): Close may have released what
// it knew of before this lock was made, and stops renewal.
func (c *Client) afterClose(ctx context.Context, name string, l *redisLock, err error) (*redisLock, error) {
	if l == nil || !c.own.Closed() {
		return l, err
	}
	_ = l.Release(ctx)
	return nil, opError("acquire", name, ErrClosed)
}

// acquire is Acquire before the observers hear of it: one plain attempt
// when the name is not contended, else the wait of a waiter.
func (c *Client) acquire(ctx context.Context, name string, ac acquireConfig) (*redisLock, error) {
	// The keys are built once per call: every attempt and the wait use them.
	k := c.keys(name)
	if ac.wait == 0 {
		r := c.attempt(ctx, name, k, ac, ac.newToken(), false, false)
		return r.lock, c.confirmSelf(r.err)
	}
	w := &waiter{c: c, name: name, keys: k, ac: ac}
	if !c.waitersOf(name) && !c.notify.active(k.Handoff, c.id) {
		// Nobody of this process waits for the name, nor did lately: one
		// plain attempt first, so an uncontended Acquire costs what
		// TryAcquire does. A name contended lately goes straight into the
		// queue, which costs the same when the lock is free.
		token := ac.newToken()
		r := c.attempt(ctx, name, k, ac, token, false, true)
		switch {
		case r.transient:
			// Redis is out for a moment: wait it out, with the token,
			// which a lost reply may have granted.
			w.token, w.unsure = token, true
			w.sawOutage(r.err)
		case r.unreplicated:
			// Granted and released for too few replicas: wait on, with a
			// fresh token, as the wait does (inLine).
			w.sawOutage(r.err)
		case !r.busy && !r.late:
			return r.lock, r.err
		}
	}
	return w.wait(ctx)
}

// prepare validates the name and options before anything is sent. nested
// is a handle on a lock the context holds, for WithReentry.
func (c *Client) prepare(ctx context.Context, name string, opts []AcquireOption) (ac acquireConfig, nested Lock, err error) {
	ac, err = readAcquire(name, ttlBounds{Default: c.cfg.defaultTTL, Min: c.cfg.minTTL, Max: c.cfg.maxTTL}, opts)
	if err == nil {
		err = c.checkReplicaWait(ac)
	}
	if err == nil {
		// Closed or cancelled before the durable check, which asks the
		// server: those errors are the caller's to see, not ErrUnavailable.
		err = c.checkUsable(ctx)
	}
	if err == nil && ac.durable > 0 {
		// The durable check may wait for the server within the wait: what
		// it used is not waited again.
		start := time.Now()
		err = c.checkDurable(ctx, ac)
		if ac.wait > 0 {
			ac.wait = max(ac.wait-time.Since(start), 0)
		}
	}
	if err != nil {
		return ac, nil, opError("acquire", name, err)
	}
	if ac.reentrant {
		nested, err = reenter(ctx, name, ac.shared, ac.permits, c.owns)
		if err == nil && nested != nil {
			if short := reentryShort(nested, ac); short != "" {
				_ = nested.Release(ctx) // the handle just added; the held lock stays
				return ac, nil, reentrant(name, nested, short)
			}
		}
		return ac, nested, err
	}
	return ac, nil, checkReentry(ctx, name, c.owns)
}

// applyAcquire applies opts over ac. It is apart from readAcquire because
// the options take a pointer through an interface, which moves the config
// it points at to the heap: an acquisition without options (the common
// TryAcquire(ctx, name)) keeps its config on the stack.
func applyAcquire(ac acquireConfig, opts []AcquireOption) acquireConfig {
	p := &ac
	for _, o := range opts {
		o.applyAcquire(p)
	}
	return *p
}

// readAcquire applies opts over the defaults and checks them and the name:
// the rules every Locker applies (lockerkit.ReadAcquireOptions). The TTL is rounded
// down to whole ms, and cut to the hold limit.
func readAcquire(name string, b ttlBounds, opts []AcquireOption) (acquireConfig, error) {
	ac := acquireConfig{ttl: b.Default, wait: DefaultWait, renew: true}
	if len(opts) > 0 {
		ac = applyAcquire(ac, opts)
	}
	err := checkName(name)
	if err == nil {
		err = checkTTL(ac.ttl, b.Min, b.Max)
	}
	if err == nil && ac.wait < 0 {
		err = fmt.Errorf("%w: wait %v is negative", ErrInvalidOption, ac.wait)
	}
	if err == nil && (ac.replicas < 0 || (ac.replicas > 0 && ac.replicaWait < time.Millisecond)) {
		// WAIT takes whole ms, and WAIT n 0 would block for ever.
		err = fmt.Errorf("%w: WithReplicas(%d, %v) needs n >= 0 and a timeout of at least 1ms", ErrInvalidOption, ac.replicas, ac.replicaWait)
	}
	if err == nil && ac.durable != 0 && ac.durable < time.Millisecond {
		// WAITAOF takes whole ms, and WAITAOF 1 0 0 would block for ever.
		err = fmt.Errorf("%w: WithDurableGrant(%v) needs a timeout of at least 1ms", ErrInvalidOption, ac.durable)
	}
	if err == nil && ac.semaphore {
		err = checkPermits(ac.permits)
	}
	if err == nil && ac.maxHold < 0 {
		err = fmt.Errorf("%w: max hold %v is negative", ErrInvalidOption, ac.maxHold)
	}
	if err == nil && ac.semaphore && ac.shared {
		err = fmt.Errorf("%w: WithPermits(%d) with WithShared: a permit is not a read lock; choose one", ErrInvalidOption, ac.permits)
	}
	if err == nil && ac.minHold > 0 && (ac.semaphore || ac.shared) {
		// Only the exclusive release keeps a lock for its min hold.
		err = fmt.Errorf("%w: WithMinHold(%v) is for exclusive locks, not with WithShared or WithPermits", ErrInvalidOption, ac.minHold)
	}
	if err == nil && ac.skipWriters && !ac.shared {
		err = fmt.Errorf("%w: WithoutWriterPriority without WithShared: only a reader can skip writers", ErrInvalidOption)
	}
	if err == nil && ac.maxHold > 0 && ac.maxHold < b.Min {
		err = fmt.Errorf("%w: max hold %v is below the minimum TTL %v", ErrInvalidOption, ac.maxHold, b.Min)
	}
	if err == nil && ac.holdWarn < 0 {
		err = fmt.Errorf("%w: hold warning %v is negative (0 turns it off)", ErrInvalidOption, ac.holdWarn)
	}
	if err == nil {
		err = ac.checkMinHold(b)
	}
	if err != nil {
		return ac, err
	}
	if !ac.holdWarnSet {
		ac.holdWarn = DefaultHoldWarningTTLs * ac.ttl
	}
	if ac.maxHold > 0 && ac.maxHold < ac.ttl {
		// The first lease, too, ends at the hold limit at the latest.
		ac.ttl = ac.maxHold
	}
	ac.ttl = ac.ttl.Truncate(time.Millisecond)
	if ac.durable > 0 && ac.renew {
		if err := durableWithinTTL(ac.durable, ac.ttl); err != nil {
			return ac, err
		}
	}
	return ac, nil
}

// attemptResult is what one run of the acquire script came to: the lock;
// or the lock busy, with what the reply told of its holder; or a grant whose
// reply came too late, given back; or another failure. err is the error
// Acquire returns for all but the first: a *NotObtainedError when busy or
// late.
type attemptResult struct {
	lock        *redisLock
	busy        bool          // another holder has the lock
	holderTTL   time.Duration // the holder's remaining lease, when busy
	holderFence int64         // the holder's fencing token, when busy
	holder      busyInfo      // who holds it, when busy
	late        bool          // granted past its lease's deadline, and given back
	// refused: the token was given up or forced in Redis (its record is
	// there), so no attempt of it can ever take the lock: a waiter starts
	// over with a fresh one.
	refused bool
	// transient: Redis could not be reached or could not serve (err says
	// how; ErrUnavailable matches it), and the token was kept, not given
	// back: the attempt asked to keep it (a waiter, which tries it again).
	transient bool
	// unreplicated: granted, but fewer replicas than WithReplicas asked
	// for acknowledged it in time, and it was released (err is the
	// ReplicaError): replicas missing, lagging or resyncing after a
	// failover. A waiter tries again, with a fresh token.
	unreplicated bool
	err          error
}

// attempt runs the acquire script once. With queue set, a busy lock puts (or
// keeps) this client's token in the waiter queue in Redis. With keep set,
// an outage (an error ErrUnavailable matches) leaves the token to the
// caller rather than giving it back: a waiter sends it again, and the
// attempt sent again finds a grant the lost reply was about ("ours
// already" in acquire.lua) or its place in line (its arrival is kept), and
// gives the token back itself when its wait ends.
//
// When the reply is lost (a network error or the context ended while the
// command was out) the script may have granted the lock all the same. That
// grant is given back in the background, so that it does not block everyone
// for a whole TTL.
func (c *Client) attempt(ctx context.Context, name string, k node.Keys, ac acquireConfig, token string, queue, keep bool) attemptResult {
	// The token's arguments are boxed once for the lock's calls: its
	// acquire here, and the refreshes and release of the lock it makes.
	k = k.WithToken(token)
	waiter := ""
	if queue {
		waiter = c.id
	}
	owner, ownerArg := c.cfg.owner, c.ownerArg
	if ac.owner != "" {
		owner, ownerArg = ac.owner, nil // WithOwner; a queue entry keeps it for a hand-off
	}
	sent := time.Now()
	res, ack, err := c.sendAcquire(ctx, k, ac, node.Acquire(k, token, node.AcquireArgs{TTL: ac.firstLease(), Owner: owner, OwnerArg: ownerArg,
		Waiter: waiter, Alive: waiterAlive(ac.ttl), QueueExpiry: queueExpiry, FenceLifetime: c.cfg.fenceLifetime,
		SkipWriters: ac.skipWriters, Permits: ac.permits, Sharded: c.notify.channels.sharded()}))
	if err != nil {
		// A lost reply may have granted the lock. An error reply does not
		// say otherwise: go-redis sends a command again after a lost reply,
		// and the copy that got the error (READONLY after a failover, say)
		// tells nothing of the first, which may have granted; a queued
		// attempt's earlier one is in line. Either way the token is given
		// up, unless the key is not a lock at all (WRONGTYPE: nothing of
		// ours can be there, and the release would fail the same way), or
		// the caller keeps it through an outage.
		err = c.clusterHint(redisError(err))
		var verdict error // why the scripts fail there, if the server is unfit
		if isServerReply(err) {
			verdict = c.serverVerdictNow()
		}
		if verdict == nil && keep && c.outage(err) {
			return attemptResult{transient: true, err: opError("acquire", name, err)}
		}
		if !errors.Is(err, ErrWrongType) {
			c.giveBack(ctx, k, token, ac.ttl)
		}
		if verdict != nil {
			return attemptResult{err: opError("acquire", name, verdict)}
		}
		return attemptResult{err: opError("acquire", name, err)}
	}
	g, err := node.ParseGrant(res)
	if err != nil {
		c.giveBack(ctx, k, token, ac.ttl)
		return attemptResult{err: opError("acquire", name, err)}
	}
	// Once per client, in the background and only once the server has
	// answered: refuse a server too old for dlock, and warn of an eviction
	// policy that can delete held locks. Here it is one atomic load.
	if cerr := c.serverVerdictNow(); cerr != nil {
		if g.OK || queue {
			c.giveBack(ctx, k, token, ac.ttl) // a grant, or a place in line
		}
		return attemptResult{err: opError("acquire", name, cerr)}
	}
	if err := mismatch(ac, g); err != nil {
		if queue {
			c.giveBack(ctx, k, token, ac.ttl) // an earlier attempt of token may be in line
		}
		return attemptResult{err: opError("acquire", name, err)}
	}
	if !g.OK && g.HolderTTL == node.TokenRefused {
		// A waiter's token whose hand-off an operator forced before the
		// waiter heard of it (its message lost), or that this client gave
		// up: refused for good, with nothing of it in Redis.
		return attemptResult{refused: true, err: opError("acquire", name, fmt.Errorf("%w: this attempt's token was given up or force-unlocked in Redis", ErrNotObtained))}
	}
	if !g.OK {
		ttl := time.Duration(g.HolderTTL) * time.Millisecond
		// The owner text says the holder may be this Client; confirmSelf
		// makes sure, by the fence, when the error reaches the caller.
		b := busyInfo{ttl: ttl, g: g, self: g.Kind == 'x' && g.Owner == owner}
		return attemptResult{busy: true, holderTTL: ttl, holderFence: g.HolderFence, holder: b,
			err: opError("acquire", name, b.notObtained(name))}
	}
	// Too few replicas, or no disk confirmation, is reported as such (the
	// WAIT or WAITAOF that came with the script may itself have made the
	// reply late).
	short := !ack.confirmed(ac)
	if took := time.Since(sent); !short && !time.Now().Before(leaseEnd(sent, ac.ttl)) {
		// The reply came after the lease's deadline (the process stalled
		// between send and read, or the network did): another client may
		// hold the lock by now. A lock already lost is no lock to return:
		// the grant is given back, by token in case it is still there, and
		// the caller is told it did not get the lock. A waiter goes on
		// waiting, with a fresh token.
		c.giveBack(ctx, k, token, ac.ttl)
		return attemptResult{late: true, err: opError("acquire", name, &NotObtainedError{Name: name, late: took, lease: ac.ttl})}
	}
	l := c.newLock(ctx, name, k, token, g.Fence, ac, sent)
	if err := c.checkReplicated(ctx, l, ac, ack); err != nil {
		// A refusal of WAITAOF is for good; a wait that timed out may be
		// over on a later attempt.
		return attemptResult{err: err, unreplicated: ack.refused == nil}
	}
	return attemptResult{lock: l}
}

// sendAcquire runs the acquire script; with WithReplicas, WAIT follows it in
// one pipeline on one connection (WAITAOF with WithDurableGrant), since
// Redis refuses WAIT inside a script and WAIT counts the writes of the
// connection it is sent on. ack is what the wait confirmed.
func (c *Client) sendAcquire(ctx context.Context, k node.Keys, ac acquireConfig, call node.Call) (res []any, ack waitAck, err error) {
	if !ac.waits() {
		res, err = c.batch.Run(ctx, call).Slice()
		return res, ack, err
	}
	reply, ack, err := c.withWait(ctx, k.Lock, ac, call)
	if err != nil {
		return nil, ack, err
	}
	res, ok := reply.([]any)
	if !ok {
		return nil, ack, fmt.Errorf("unexpected reply %v", reply)
	}
	return res, ack, nil
}

// isServerReply reports whether err is an error reply of Redis: the command
// reached the server and its outcome is known. Any other error (network,
// timeout, cancelled context) leaves the outcome unknown.
func isServerReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && !errors.Is(err, redis.Nil)
}

// giveBack withdraws token in the background: it releases a grant whose
// reply was lost (or a hand-off that came too late), drops the token's queue
// entry and marks the token given up. Close waits for it.
//
// The error that made the caller give up (a reset, BUSY, a failover's
// READONLY) often fails the first withdrawal too, so it is tried again with
// backoff for as long as the token could still hold something in Redis (see
// lease.GiveBackHorizon): a grant of ttl (or a hand-off) for ttl, a queue
// entry for waiterAlive(ttl), unless Close has begun.
func (c *Client) giveBack(ctx context.Context, k node.Keys, token string, ttl time.Duration) {
	if !c.own.Go(func() {
		until := time.Now().Add(lease.GiveBackHorizon(ttl, waiterAlive(ttl)))
		c.retryWithdraw(ctx, k, token, node.ReleaseArgs{Record: releaseRecordTTL, GiveUp: true}, until)
	}) {
		_ = c.withdraw(ctx, k, token) // Close has begun: one try, here
	}
}

// retryWithdraw runs the release script with a for token until it gets an
// answer, with the engine's backoff between tries, giving up when the next
// try would start after until or Close begins.
func (c *Client) retryWithdraw(ctx context.Context, k node.Keys, token string, a node.ReleaseArgs, until time.Time) {
	lease.Retry(until, c.closing.Done(), func() error { return c.withdrawWith(ctx, k, token, a) })
}

// withdraw leaves the Redis queue after giving up. If a release handed us
// the lock in the meantime, the same script releases it to the next waiter.
// It runs on a fresh context: the caller's has ended.
func (c *Client) withdraw(ctx context.Context, k node.Keys, token string) error {
	return c.withdrawWith(ctx, k, token, node.ReleaseArgs{Record: releaseRecordTTL, GiveUp: true})
}

// withdrawWith runs the release script with a on a fresh, bounded context.
func (c *Client) withdrawWith(ctx context.Context, k node.Keys, token string, a node.ReleaseArgs) error {
	rctx, cancel := c.cleanupContext(ctx)
	defer cancel()
	_, err := c.releaseWith(rctx, k, token, a)
	return err
}

// gaveUp is the error of a wait that ended without the lock: busy, and also
// the caller's context error when that context ended it.
func (c *Client) gaveUp(ctx context.Context, name string, holder busyInfo) error {
	if c.own.Closed() {
		return opError("acquire", name, ErrClosed)
	}
	e := holder.notObtained(name)
	e.cause, e.waited = ctx.Err(), ctx.Err() == nil
	return c.confirmSelf(opError("acquire", name, e))
}

// busyInfo is what the last busy reply said of the holder.
type busyInfo struct {
	ttl  time.Duration
	g    node.Grant
	self bool // the holder's owner text is this attempt's: maybe this Client (confirmSelf)
}

// notObtained is the busy error of name with what b says of the holder.
func (b busyInfo) notObtained(name string) *NotObtainedError {
	e := &NotObtainedError{Name: name, HolderTTL: b.ttl, Owner: b.g.Owner, Waiters: b.g.Waiters, Self: b.self, holderFence: b.g.HolderFence}
	switch b.g.Kind {
	case 'x':
		e.Kind = KindExclusive
	case 'm':
		e.Kind, e.MinHold = KindExclusive, true
	case 'r':
		e.Kind, e.Readers, e.Owner, e.Self = KindShared, int(b.g.NReaders), "", false
	case 's':
		e.Kind, e.Held, e.Permits, e.Owner, e.Self = KindSemaphore, int(b.g.Held), int(b.g.N), "", false
	}
	return e
}

// owns reports whether l is one of c's locks (for checkReentry).
func (c *Client) owns(l Lock) bool {
	r, ok := l.(*redisLock)
	return ok && r != nil && r.c == c
}
