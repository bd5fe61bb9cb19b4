package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/lease"
	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/lockerkit"
	"github.com/dlock-go/dlock/observe"
)

// TryAcquire makes one attempt on every node at once and returns the lock if
// a quorum granted it within its validity; else it gives back what it got
// and fails with an *dlock.Error of Op "acquire": wrapping a
// *dlock.NotObtainedError (matching dlock.ErrNotObtained; its HolderTTL is
// the longest lease the busy nodes reported) when the lock is held
// elsewhere and the nodes that failed leave a quorum reachable, matching
// ErrNoQuorum when failed nodes make a quorum impossible. A node that holds
// the name as a semaphore (dlock Clients on it took dlock.WithPermits)
// fails the attempt with an error matching dlock.ErrMismatch and
// ErrNoQuorum, which Acquire does not wait out. It returns as soon as a
// quorum is reached or out of reach, without waiting for slow nodes, and
// when ctx ends.
//
// Options are read as a Client reads them (lockerkit.ReadAcquireOptions, with
// the Redlock's TTL bounds): dlock.WithTTL, dlock.WithWait and
// dlock.WithoutRenewal apply; dlock.WithMaxHold, dlock.WithMinHold,
// dlock.WithReplicas and dlock.WithShared are refused with dlock.ErrInvalidOption.
//
// A Lock is renewed on all its nodes at a third of its TTL unless acquired
// WithoutRenewal. Its Context ends when no renewal reached a quorum before
// the validity ran out, or a majority of nodes no longer hold it.
func (r *Redlock) TryAcquire(ctx context.Context, name string, opts ...dlock.AcquireOption) (dlock.Lock, error) {
	start := time.Now()
	s, nested, err := r.settings(ctx, name, opts)
	if nested != nil {
		return nested, nil
	}
	var l *Lock
	if err == nil {
		l, _, err = r.try(ctx, name, s, nil)
	}
	return r.acquired(ctx, name, start, l, err, false, s.Reentrant)
}

// Acquire takes the lock name, retrying TryAcquire while the lock is busy,
// with jittered backoff, until the wait limit (dlock.WithWait, default
// dlock.DefaultWait) passes or ctx ends. Giving up returns an error matching
// dlock.ErrNotObtained, and also ctx's error when ctx ended the wait, so
// callers can tell "busy" from "cancelled". Node failures that make a quorum
// impossible for now (unreachable nodes, READONLY, LOADING: errors that
// match dlock.ErrUnavailable) are waited out like a busy lock; a wait that
// ends during one also matches its last error (ErrNoQuorum and
// dlock.ErrUnavailable). Other failures end the wait at once: also errors
// no wait cures (WRONGTYPE on the lock's key) on too many nodes for a
// quorum, heard when the attempt's verdict was already in; Close ends it
// with dlock.ErrClosed.
//
// A Redlock does not queue: waiters poll. The pause between attempts is
// drawn uniformly ("full jitter") between 5ms and a ceiling that doubles
// after each busy attempt, capped at a tenth of the TTL, at 1s, and at the
// longest lease the busy nodes reported, so that contenders spread out and
// a lock whose holder crashed is taken soon after its lease runs out.
func (r *Redlock) Acquire(ctx context.Context, name string, opts ...dlock.AcquireOption) (dlock.Lock, error) {
	start := time.Now()
	s, nested, err := r.settings(ctx, name, opts)
	if nested != nil {
		return nested, nil
	}
	var l *Lock
	waited := false
	if err == nil {
		l, waited, err = r.acquire(ctx, name, s)
	}
	return r.acquired(ctx, name, start, l, err, waited, s.Reentrant)
}

// acquired reports an acquisition to the observers and returns its result,
// with a nil dlock.Lock (not a nil *Lock in one) on error. waited: the wait
// limit, not ctx, ended a wait for a busy lock. reentrant: taken with
// dlock.WithReentry, it becomes the first handle of its re-entry.
func (r *Redlock) acquired(ctx context.Context, name string, start time.Time, l *Lock, err error, waited, reentrant bool) (dlock.Lock, error) {
	if len(r.cfg.observers) > 0 {
		e := observe.AcquireEvent{Name: name, Wait: time.Since(start), Err: err}
		switch {
		case err == nil:
			e.Result, e.Fence = observe.ResultAcquired, l.Fence()
		case errors.Is(err, context.Canceled):
			e.Result = observe.ResultCancelled
		case errors.Is(err, context.DeadlineExceeded), waited:
			e.Result = observe.ResultTimeout
		case errors.Is(err, dlock.ErrNotObtained):
			e.Result = observe.ResultBusy
		default:
			e.Result = observe.ResultError
		}
		for _, o := range r.cfg.observers {
			o.OnAcquire(ctx, e)
		}
	}
	switch {
	case err != nil:
		return nil, err
	case reentrant:
		return lockerkit.Reentrant(l, lockerkit.AcquireSettings{}), nil // redlock takes only exclusive locks
	}
	return l, nil
}

// settings reads and checks the options and the name before anything is
// sent, by the core's rules, and refuses what a Redlock cannot keep. nested
// is a handle on a lock the context holds, for dlock.WithReentry.
func (r *Redlock) settings(ctx context.Context, name string, opts []dlock.AcquireOption) (lockerkit.AcquireSettings, dlock.Lock, error) {
	s, err := lockerkit.ReadAcquireOptions(name, r.cfg.bounds, opts...)
	if err != nil {
		return s, nil, err
	}
	switch {
	case s.MaxHold > 0:
		// No hold limit yet: refuse rather than accept a limit it would
		// not keep.
		err = fmt.Errorf("%w: WithMaxHold is not supported by Redlock", dlock.ErrInvalidOption)
	case s.MinHold > 0:
		// Keeping a released lock until grant + min hold needs each
		// node's grant time and a release that shortens instead of
		// deletes, on a quorum: not built, so refused.
		err = fmt.Errorf("%w: WithMinHold is not supported by Redlock", dlock.ErrInvalidOption)
	case s.Replicas > 0:
		err = fmt.Errorf("%w: WithReplicas is not supported by Redlock, whose nodes are independent primaries", dlock.ErrInvalidOption)
	case s.DurableGrant != 0:
		// WAITAOF on each node of a quorum, and renewals confirmed the
		// same way, are not built: refused rather than returning grants
		// the caller believes are on disk.
		err = fmt.Errorf("%w: WithDurableGrant is not supported by Redlock", dlock.ErrInvalidOption)
	case s.Shared:
		// A quorum of read locks over nodes that each hand off on their
		// own is not a read lock: refuse rather than take a write lock the
		// caller did not ask for.
		err = fmt.Errorf("%w: WithShared (read locks) is not supported by Redlock", dlock.ErrInvalidOption)
	case s.Permits > 0:
		// A quorum of permits on independent nodes is not a semaphore
		// of n: refuse rather than hand out more than n.
		err = fmt.Errorf("%w: WithPermits(%d) is not supported by Redlock", dlock.ErrInvalidOption, s.Permits)
	case r.isClosed():
		err = dlock.ErrClosed
	default:
		err = ctx.Err()
	}
	if err != nil {
		return s, nil, opError("acquire", name, err)
	}
	if s.Reentrant {
		nested, err := lockerkit.Reenter(ctx, name, s, r.owns)
		return s, nested, err
	}
	return s, nil, lockerkit.CheckReentry(ctx, name, r.owns)
}

// owns reports whether l is one of r's locks (for lockerkit.CheckReentry).
func (r *Redlock) owns(l dlock.Lock) bool {
	m, ok := l.(*Lock)
	return ok && m != nil && m.r == r
}

// acquire is Acquire after its options were read. It reports whether the
// wait limit ended the wait.
func (r *Redlock) acquire(ctx context.Context, name string, s lockerkit.AcquireSettings) (*Lock, bool, error) {
	// The first attempt runs on ctx: WithWait(0) makes Acquire a single
	// attempt, like TryAcquire, not a wait over before it began.
	// The slower nodes of every attempt of the wait tell late what no wait
	// cures (see try): one channel for them all, so that a reply slower
	// than the backoff before the next attempt is heard all the same.
	late := make(chan error, 1)
	l, holder, err := r.try(ctx, name, s, late)
	if err == nil || !(isBusy(err) || isOutage(err)) || s.Wait == 0 {
		return l, false, err
	}
	wctx, cancel := context.WithTimeout(ctx, s.Wait)
	defer cancel()
	defer context.AfterFunc(r.closing, cancel)() // Close ends the wait
	// An outage (nodes unreachable, READONLY, LOADING, ...) that leaves no
	// quorum for a moment does not end a wait that has time: it is waited
	// out like a busy lock, and named in the error if the wait ends first.
	var outage error
	var outageSince time.Time
	seen := func(err error) {
		if isOutage(err) {
			if outage == nil {
				outageSince = time.Now()
			}
			outage = err
		} else {
			outage = nil
		}
	}
	seen(err)
	for n := 0; ; n++ {
		t := time.NewTimer(backoff(n, s.TTL, holder))
		select {
		case <-wctx.Done():
			t.Stop()
			return r.gaveUp(ctx, name, holder, outage, outageSince)
		case err := <-late:
			// An attempt's slower nodes answered what no wait cures
			// (TestWaitEndsOnLateLastingErrors).
			t.Stop()
			return nil, false, err
		case <-t.C:
		}
		var h time.Duration
		var err error
		l, h, err = r.try(wctx, name, s, late)
		if isBusy(err) {
			holder = h
		}
		switch {
		case err == nil:
			return l, false, nil
		case wctx.Err() != nil:
			return r.gaveUp(ctx, name, holder, outage, outageSince)
		case !isBusy(err) && !isOutage(err):
			return nil, false, err
		}
		seen(err)
	}
}

// isOutage reports whether err is an attempt's failure that waiting can
// cure: nodes unreachable or unable to serve for now.
func isOutage(err error) bool {
	var lasting *lastingError
	return !isBusy(err) && !errors.As(err, &lasting) && !errors.Is(err, redis.ErrClosed) &&
		(errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, errFenceLate))
}

// gaveUp is the error of a wait that ended without the lock: busy, and also
// ctx's error when ctx ended it; ErrClosed when Close did. It reports
// whether the wait limit ended the wait.
func (r *Redlock) gaveUp(ctx context.Context, name string, holder time.Duration, outage error, since time.Time) (*Lock, bool, error) {
	if r.isClosed() {
		return nil, false, opError("acquire", name, dlock.ErrClosed)
	}
	e := lockerkit.NewNotObtainedError(name, holder, ctx.Err())
	if outage != nil {
		e.DuringOutage(outage, time.Since(since))
	}
	return nil, ctx.Err() == nil, opError("acquire", name, e)
}

// Bounds of the pause between busy attempts: see Acquire.
const (
	minBackoff  = 5 * time.Millisecond
	baseBackoff = 10 * time.Millisecond
	maxBackoff  = time.Second
)

// backoff is the pause before busy attempt n+1 (n from 0) of a lock of ttl
// whose holder reported holder left (0: unknown): uniform in [minBackoff,
// ceiling], the ceiling doubling from baseBackoff with n, capped at ttl/10,
// maxBackoff and holder, and never below minBackoff. Uniform over the whole
// range, not a fixed pause with a little noise: waiters in many processes
// that met one busy lock then spread over the range instead of coming back
// together.
func backoff(n int, ttl, holder time.Duration) time.Duration {
	ceil := min(baseBackoff<<min(n, 16), maxBackoff, ttl/10)
	if holder > 0 {
		ceil = min(ceil, holder)
	}
	ceil = max(ceil, minBackoff)
	return minBackoff + rand.N(ceil-minBackoff+1)
}

// margin is taken off every validity: the engine's one lease margin (see
// lease.Margin), which covers the Redlock algorithm's clock drift allowance.
// (TestContextEndsBeforeLiveKeysExpire: with TTL/100 + 2ms alone, 16ms were
// left.)
func margin(ttl time.Duration) time.Duration { return lease.Margin(ttl) }

// reply is one node's answer to an attempt.
type reply struct {
	i   int
	g   node.Grant
	err error
}

// tally counts the replies of one attempt until the verdict.
type tally struct {
	nodes, quorum     int
	fences            []int64 // per node, 0 where not granted
	heard             []bool  // per node: its reply is in
	got, busy, failed int     // busy replies count as failed too
	// lasting counts the nodes whose error no wait cures (WRONGTYPE, a
	// script error; not an outage): when they alone leave no quorum,
	// waiting is for nothing.
	lasting int
	// mismatch counts the nodes that hold the name as a semaphore: the
	// attempt fails as a mismatch, whatever the other replies, as the
	// Client's does (no wait turns a semaphore into a lock).
	mismatch int
	holder   time.Duration
	errs     []error
}

func (t *tally) add(rep reply) {
	t.heard[rep.i] = true
	if g := rep.g; rep.err == nil && !g.OK && g.SemHeld > 0 {
		// The node holds the name as a semaphore (Clients on it took
		// permits): another kind of lock, which the Client refuses at once
		// as a mismatch, not a busy holder to wait for.
		rep.err = fmt.Errorf("%w: the name is held as a semaphore: %d of its WithPermits(%d) held",
			dlock.ErrMismatch, g.SemHeld, g.SemPermits)
		t.mismatch++
	}
	switch {
	case rep.err != nil:
		t.failed++
		t.errs = append(t.errs, fmt.Errorf("node %d: %w", rep.i, rep.err))
		if !isOutage(opError("acquire", "", rep.err)) {
			t.lasting++
		}
	case rep.g.OK:
		t.got++
		t.fences[rep.i] = rep.g.Fence
	default:
		t.busy++
		t.failed++
		t.holder = longerHolder(t.holder, rep.g.HolderTTL)
	}
}

// decided: a quorum granted, or can no longer grant. Waiting for slow nodes
// once a quorum granted would only eat the validity; once a quorum is out
// of reach, it is for nothing.
func (t *tally) decided() bool { return t.got >= t.quorum || t.failed > t.nodes-t.quorum }

// failure is the error of an attempt without a quorum: busy when a node was
// busy and the nodes' errors still leave a quorum reachable (the nodes not
// heard from count as reachable), so that Acquire waits for the holder;
// else ErrNoQuorum with the nodes' errors. Counting only the replies in
// when the verdict fell reported a busy lock as ErrNoQuorum: with an even
// N the first busy reply decides, before the other busy ones are in; with a
// node down, its error often comes first.
func (t *tally) failure(name string, left time.Duration) error {
	if t.mismatch > 0 {
		// Reported whichever replies decided the attempt, a busy one
		// among them: waiting for the busy holder would end in "busy"
		// at the wait's limit, on a name a quorum may never grant.
		return opError("acquire", name, &lastingError{fmt.Errorf("%w: %d of %d nodes granted the lock, %d needed: %w",
			ErrNoQuorum, t.got, t.nodes, t.quorum, errors.Join(t.errs...))})
	}
	if errs := t.failed - t.busy; t.busy > 0 && t.nodes-errs >= t.quorum {
		return opError("acquire", name, lockerkit.NewNotObtainedError(name, t.holder, nil))
	}
	err := fmt.Errorf("%w: %d of %d nodes granted the lock, %d needed (validity left %v)",
		ErrNoQuorum, t.got, t.nodes, t.quorum, left.Round(time.Millisecond))
	if len(t.errs) > 0 {
		err = fmt.Errorf("%w: %w", err, errors.Join(t.errs...))
	}
	if t.nodes-t.lasting < t.quorum {
		err = &lastingError{err}
	}
	return opError("acquire", name, err)
}

// lastingError is a failure with too few nodes left that can grant at all,
// whatever the others' outage: a wait does not wait it out (isOutage).
type lastingError struct{ error }

func (e *lastingError) Unwrap() error { return e.error }

// try makes one attempt on every node at once, with one token. It returns
// the lock if a quorum granted it, and a quorum took its fence (raiseFence),
// within the validity (the TTL less the time the attempt took and the
// margin), else an error, and the longest lease the busy nodes reported.
//
// A failed attempt's replies still out are collected in the background; if
// they leave too few nodes that can grant at all, the lastingError is sent
// on late (when not nil, without blocking: one is enough).
func (r *Redlock) try(ctx context.Context, name string, s lockerkit.AcquireSettings, late chan<- error) (*Lock, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, opError("acquire", name, err) // nothing sent
	}
	if !r.own.Begin() {
		return nil, 0, opError("acquire", name, dlock.ErrClosed) // nothing sent
	}
	defer r.own.End()
	k := node.KeysOf(r.cfg.prefix, name)
	token := newToken()
	start := time.Now()
	valid := start.Add(s.TTL - margin(s.TTL))
	// The attempts are bounded by the validity, a grant after it being no
	// lock, and by Close; not by ctx: an attempt still out when a quorum
	// granted goes on, and its grant joins the lock.
	actx, cancel := context.WithDeadline(context.WithoutCancel(ctx), valid)
	stopOnClose := context.AfterFunc(r.closing, cancel)
	replies := make(chan reply, len(r.nodes))
	for i := range r.nodes {
		if !r.start(func() {
			g, err := r.attempt(actx, i, k, token, s.TTL, cmp.Or(s.Owner, r.cfg.owner))
			replies <- reply{i, g, err}
		}) {
			replies <- reply{i: i, err: dlock.ErrClosed}
		}
	}

	t := tally{nodes: len(r.nodes), quorum: r.quorum, fences: make([]int64, len(r.nodes)), heard: make([]bool, len(r.nodes))}
	pending := len(r.nodes)
	var ctxErr error
	for pending > 0 && !t.decided() && ctxErr == nil {
		select {
		case rep := <-replies:
			pending--
			t.add(rep)
		case <-ctx.Done():
			ctxErr = ctx.Err()
		}
	}
	left := time.Until(valid)
	var (
		l       *Lock
		failErr error // of the second round, which raises the fence
	)
	if ctxErr == nil && t.got >= r.quorum && left > 0 {
		fence, err := r.raiseFence(ctx, actx, k, token, t.fences)
		left = time.Until(valid)
		switch {
		case err == nil && left > 0:
			l = r.newLock(ctx, name, k, token, s, start, valid, t.fences, fence)
		case ctx.Err() != nil:
			ctxErr = ctx.Err()
		case err == nil:
			failErr = opError("acquire", name, errFenceLate)
		default:
			failErr = opError("acquire", name, err)
		}
	}
	if l == nil {
		cancel() // the attempts still out are of no use now
	}
	// The replies still out are collected in the background: a grant joins
	// the lock while it is held and valid, else it is given back. An error
	// among them that no wait cures, which with those heard before leaves
	// too few nodes that can grant at all, is told on late: the wait that
	// counted this attempt as an outage ends at once.
	if l != nil {
		late = nil
	}
	// The late replies' own tally, on from the verdict's.
	lt := t
	lt.fences, lt.heard, lt.errs = slices.Clone(t.fences), slices.Clone(t.heard), slices.Clone(t.errs)
	collect := func() {
		defer stopOnClose()
		defer cancel()
		for range pending {
			rep := <-replies
			if rep.err == nil && rep.g.OK && (l == nil || !l.join(rep.i, rep.g.Fence)) {
				r.giveBack(ctx, rep.i, k, token, s.TTL, giveUpLock)
			}
			if rep.err == nil || late == nil || lt.nodes-lt.lasting < lt.quorum ||
				errors.Is(rep.err, context.Canceled) || errors.Is(rep.err, context.DeadlineExceeded) {
				continue // cancelled above: says nothing of the node
			}
			if lt.add(rep); lt.nodes-lt.lasting < lt.quorum {
				select {
				case late <- lt.failure(name, time.Until(valid)): // a lastingError
				default: // an earlier one is there, unread
				}
			}
		}
	}
	if pending == 0 || !r.start(collect) {
		collect() // nothing out, or Close has begun and cancelled what is
	}

	if l != nil {
		if !r.own.Track(l) {
			// Close has begun: it cannot know of this lock.
			rctx, cancel := r.cleanupContext(ctx)
			defer cancel()
			_ = l.release(rctx, errClosedRelease)
			return nil, 0, opError("acquire", name, dlock.ErrClosed)
		}
		l.begin()
		return l, 0, nil
	}
	r.withdrawAll(ctx, k, token, t.fences, s.TTL)
	// A node not heard from may have granted with its reply still out
	// (or lost): the token is given up there now, not when the reply
	// comes, which may be seconds later (a node that stalls after the
	// script ran, a client that waits for its ReadTimeout); an attempt
	// still on the way then grants nothing. In the background: the
	// verdict does not wait for slow nodes.
	// (TestFailedAcquireFreesUnheardGrant.)
	for i, heard := range t.heard {
		if !heard {
			r.giveBack(ctx, i, k, token, s.TTL, giveUpLock)
		}
	}
	switch {
	case r.closing.Err() != nil:
		return nil, t.holder, opError("acquire", name, dlock.ErrClosed) // Close cancelled the attempts
	case ctxErr != nil:
		return nil, t.holder, opError("acquire", name, ctxErr)
	case failErr != nil:
		return nil, 0, failErr
	}
	return nil, t.holder, t.failure(name, left)
}

// longerHolder keeps the longest lease busy nodes reported, in ms: -1, a
// key without expiry (not written by dlock), only while no node reported a
// lease.
func longerHolder(cur time.Duration, ms int64) time.Duration {
	switch d := time.Duration(ms) * time.Millisecond; {
	case d > cur:
		return d
	case ms == -1 && cur == 0:
		return -1
	}
	return cur
}

// attempt runs the acquire script on node i, without queueing: a Redlock
// polls. A reply that was lost (a network error, or ctx ended while the
// command was out) may hide a grant all the same: it is given back in the
// background, so that it blocks nobody for a whole TTL.
func (r *Redlock) attempt(ctx context.Context, i int, k node.Keys, token string, ttl time.Duration, owner string) (node.Grant, error) {
	res, err := node.Acquire(k, token, node.AcquireArgs{TTL: ttl, Owner: owner, FenceLifetime: r.cfg.fenceLifetime}).
		Run(ctx, r.nodes[i].rdb).Slice()
	// Withdrawn as an attempt, not as the lock: the lock may be held on a
	// quorum without this node, and its renewals must be able to take the
	// node again (a give-up of the lock refused them for the record's 30s:
	// TestStalledAtAcquireRetaken). A copy of this attempt re-sent by
	// go-redis is refused all the same. If the acquisition fails, its
	// failure path gives the lock up on every node it may have reached.
	if err != nil {
		// An error reply may answer go-redis' second copy of a command
		// whose first granted (READONLY after a lost reply and a
		// failover): given back too, unless the key is not a lock.
		err = redisError(err)
		if !errors.Is(err, dlock.ErrWrongType) {
			r.giveBack(ctx, i, k, token, ttl, giveUpAttempt)
		}
		return node.Grant{}, err
	}
	g, err := node.ParseGrant(res)
	if err != nil {
		r.giveBack(ctx, i, k, token, ttl, giveUpAttempt)
		return node.Grant{}, err
	}
	return g, nil
}

// withdrawAll gives back, on every node in fences, the grants of an attempt
// that failed: at once, so that the next attempt (ours or another's) finds
// them gone; a node that does not answer is left to giveBack.
func (r *Redlock) withdrawAll(ctx context.Context, k node.Keys, token string, fences []int64, ttl time.Duration) {
	var wg sync.WaitGroup
	for i, f := range fences {
		if f == 0 {
			continue
		}
		wg.Go(func() {
			if r.withdraw(ctx, i, k, token, giveUpLock) != nil {
				r.giveBack(ctx, i, k, token, ttl, giveUpLock)
			}
		})
	}
	wg.Wait()
}

// giveBack withdraws token from node i in the background: it releases a
// grant whose reply was lost or came too late, and marks the token given
// up (how: g), so that an attempt of it still on the way (go-redis re-sends
// after a lost reply) grants nothing. The error that lost the reply often
// fails the first try too, so it is tried again with the engine's backoff
// for as long as the grant may live (lease.GiveBackHorizon: its TTL),
// until Close. (Stopping after 3 s, as it once did, left a grant held by
// nobody on the node after a longer outage: TestGiveBackOutlivesLongOutage.)
func (r *Redlock) giveBack(ctx context.Context, i int, k node.Keys, token string, ttl time.Duration, g giveUp) {
	r.giveBackAt(ctx, i, k, token, ttl, g, time.Time{})
}

// giveBackAt is giveBack from at on (the zero time: now). A give-back
// still waiting for at when Close begins is dropped: what it would free
// expires with its lease.
func (r *Redlock) giveBackAt(ctx context.Context, i int, k node.Keys, token string, ttl time.Duration, g giveUp, at time.Time) {
	ctx = context.WithoutCancel(ctx)
	retry := func() {
		if !at.IsZero() && !lease.Pause(time.Until(at), r.closing.Done()) {
			return
		}
		until := time.Now().Add(lease.GiveBackHorizon(ttl, 0))
		lease.Retry(until, r.closing.Done(), func() error { return r.withdraw(ctx, i, k, token, g) })
	}
	if !r.start(retry) && at.IsZero() {
		_ = r.withdraw(ctx, i, k, token, g) // Close has begun: one try, here
	}
}

// releaseRecordTTL is how long a node keeps the record of a token's release,
// as the core keeps it (see lease.ReleaseRecordTTL).
const releaseRecordTTL = lease.ReleaseRecordTTL

// withdraw runs the release script for token on node i, giving the token
// up (how: g), on a fresh context bounded by the release timeout.
func (r *Redlock) withdraw(ctx context.Context, i int, k node.Keys, token string, g giveUp) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.releaseTimeout)
	defer cancel()
	_, err := r.release(rctx, i, k, token, g)
	return err
}

// giveUp is how a release marks a token on a node (the record the acquire
// script reads).
type giveUp int

const (
	// holderRelease: the holder's release; a record only where it frees
	// the lock, so that a re-sent release reports success.
	holderRelease giveUp = iota
	// giveUpLock: the token's lock is over, or never was (released, lost,
	// an acquisition that failed): nothing takes the node for it again.
	giveUpLock
	// giveUpAttempt: one attempt is withdrawn (its reply was lost) while
	// the lock may be held on a quorum without this node: copies of the
	// attempt still on the way grant nothing, but the lock's renewals may
	// take the node again. Never replaces a giveUpLock record.
	giveUpAttempt
)

// release runs the release script for token on node i, on ctx, marking
// the token as g says (see node.ReleaseArgs). The reply is the script's: 1
// released now, 2 released before (or, with giveUpLock, nothing there), 0
// not ours.
func (r *Redlock) release(ctx context.Context, i int, k node.Keys, token string, g giveUp) (int64, error) {
	return node.Release(k, token, node.ReleaseArgs{Record: releaseRecordTTL, GiveUp: g == giveUpLock, Withdraw: g == giveUpAttempt,
		Sharded: r.nodes[i].sharded, FenceLifetime: r.cfg.fenceLifetime}).Run(ctx, r.nodes[i].rdb).Int64()
}

// all lists every node's index.
func (r *Redlock) all() []int {
	nodes := make([]int, len(r.nodes))
	for i := range nodes {
		nodes[i] = i
	}
	return nodes
}

// bounded returns a context with ctx's values and deadline, but not its
// cancellation, ending at until and at Close: for calls that go on after
// their caller stopped listening (the nodes not heard from at a verdict).
func (r *Redlock) bounded(ctx context.Context, until time.Time) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && d.Before(until) {
		until = d
	}
	bctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), until)
	stop := context.AfterFunc(r.closing, cancel)
	return bctx, func() {
		stop()
		cancel()
	}
}

// nodeReply is one node's integer reply to a call of fanOut.
type nodeReply struct {
	i   int
	res int64
	err error
}

// fanOut runs call on every node in nodes at once, on ctx, and returns the
// replies as they come, in a channel with room for all of them, so that the
// caller may stop reading at its verdict and leave the rest to finish. The
// calls run on goroutines of the Redlock, which Close waits for; cancel
// (ctx's) is called once they have all returned, so ctx must bound them.
// Once Close has begun they run on goroutines of the caller's, which must
// then call wait before it returns: nothing outlives Close.
func (r *Redlock) fanOut(ctx context.Context, cancel context.CancelFunc, nodes []int,
	call func(ctx context.Context, i int) (int64, error)) (replies <-chan nodeReply, wait func()) {
	out := make(chan nodeReply, len(nodes))
	if len(nodes) == 0 {
		cancel()
		return out, func() {}
	}
	var (
		left  atomic.Int64
		local sync.WaitGroup
	)
	left.Store(int64(len(nodes)))
	for _, i := range nodes {
		run := func() {
			res, err := call(ctx, i)
			out <- nodeReply{i, res, err}
			if left.Add(-1) == 0 {
				cancel()
			}
		}
		if !r.start(run) {
			local.Go(run)
		}
	}
	return out, local.Wait
}

func isBusy(err error) bool {
	var b *dlock.NotObtainedError
	return errors.As(err, &b)
}

// redisError maps Redis' WRONGTYPE reply to dlock.ErrWrongType, as the core
// does: the key holds a value dlock did not write.
func redisError(err error) error {
	if err != nil && strings.Contains(err.Error(), "WRONGTYPE") {
		return fmt.Errorf("%w (%w)", dlock.ErrWrongType, err)
	}
	return err
}

// opError names the operation and the lock that failed.
func opError(op, name string, err error) error {
	return &dlock.Error{Op: op, Name: name, Err: err}
}
