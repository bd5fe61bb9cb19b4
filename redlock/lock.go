package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/lease"
	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/lockerkit"
	"github.com/dlock-go/dlock/observe"
)

// Lock is a lock held on a quorum of a Redlock's nodes: one acquisition,
// with one token on every node. It implements dlock.Lock; Fences tells the
// fence each node handed out. Its lease is the validity of the quorum: the
// TTL less the time the acquisition (or the last renewal) took and a margin
// (a tenth of the TTL), on the local monotonic clock.
//
// A Lock is safe for concurrent use. Once Release returned, its methods
// report dlock.ErrNotHeld.
type Lock struct {
	r     *Redlock
	name  string
	keys  node.Keys
	token string
	start time.Time // send time of the acquisition, for held times
	renew bool      // renewed in the background: no WithoutRenewal
	owner string    // stored with the lock on every node
	fence int64     // Fence: the largest node fence, raised on a quorum

	ctx    context.Context // ended when the lock ends; carries the acquirer's values
	cancel context.CancelCauseFunc

	// releaseMu makes releases (Release, Close) run one at a time, over
	// their round trips; mu guards the fields below and is never held over
	// one. Order: releaseMu, then mu, then the renewer's (lease.Renewer.mu);
	// the Redlock's owner (lease.Owner) is never asked with mu held.
	releaseMu sync.Mutex

	mu sync.Mutex
	// life is the lock's state (held, then released or lost), why it
	// ended (set before the context is cancelled: the observers of a loss
	// are told first), and its deadline timer, which fires at the end of
	// the validity unless a renewal moved it: the validity is enforced by
	// its own timer, never by waiting for a renewal, so a node that does
	// not answer cannot keep the lock's context alive past it. The
	// engine's one copy of those rules.
	life   lease.Life
	fences []int64   // per node; 0 where the node has not granted
	valid  time.Time // end of the quorum's validity
	// served is the end on the nodes of the last lease a quorum confirmed
	// (its send time + its ttl, no margin): a lapsed lock's keys are given
	// back then, not at valid (see lost).
	served   time.Time
	ttl      time.Duration // the lease renewals ask for: WithTTL, or the last Refresh
	failures int           // renewals in a row that did not reach a quorum
	entry    lease.Entry   // the lock's place in the Redlock's renewer
}

func (r *Redlock) newLock(ctx context.Context, name string, k node.Keys, token string, s lockerkit.AcquireSettings,
	start, valid time.Time, fences []int64, fence int64) *Lock {
	l := &Lock{r: r, name: name, keys: k, token: token, start: start, renew: s.Renew, fence: fence, owner: cmp.Or(s.Owner, r.cfg.owner),
		fences: fences, valid: valid, served: start.Add(s.TTL), ttl: s.TTL}
	// The caller's values (trace ids), not its cancellation: the lock lives
	// until it is released or lost. It carries the lock itself, so that
	// dlock.FromContext on it finds this lock, not one the acquirer's
	// context held.
	l.ctx, l.cancel = context.WithCancelCause(dlock.NewContext(context.WithoutCancel(ctx), l))
	return l
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.name }

// Token returns the acquisition's token, the same on every node. It is a
// secret of the holder: never log it in full.
func (l *Lock) Token() string { return l.token }

// Fences returns the fencing token each node handed out, in the order of the
// clients given to New, 0 where the node did not grant the lock. A node
// whose grant arrived after the quorum's joins the lock later, so Fences may
// fill in after Acquire returned: take them when making the write they
// guard.
//
// Fences can fence a Redlock's holders node by node: each node's fences
// grow with every grant there, and any two quorums share a node, where the
// later holder's fence is the larger. So a resource refuses a write if, for
// any node the writer was granted on, its fence is below the largest fence
// the resource has accepted from that node (and refuses fences of fewer
// than a quorum of nodes). FenceSet does exactly that. Refusing a write only
// when no node's fence is the largest seen is not enough: a stale holder can
// still be the largest on a node the later holder did not take. Fence is
// the one-number alternative.
//
// A renewal that takes the lock again on a node that lost it (restarted
// empty) replaces that node's fence with the new one it handed out, from a
// counter that restarted from the node's clock: larger, unless that clock
// went back. So the holder's later writes carry a larger fence there; a
// write carrying Fences taken before the re-take is refused once one taken
// after it was admitted (safe, and why Fences are taken with each write).
func (l *Lock) Fences() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.fences)
}

// Fence returns the lock's fencing token, which grows with every
// acquisition of the name, as dlock.Lock's contract has it, also across
// holders whose quorums differ: it is the largest of the fences the granting
// nodes handed out, and before the lock is handed out it is written into the
// fence counter of a quorum of them, so the next holder, whose quorum shares
// a node with that one, gets a larger fence there. (The nodes' own fences
// are not comparable: each node's counter is seeded by its clock, and the
// largest alone goes back when the node that gave it runs ahead and is not
// in the next quorum.) A resource that refuses a Fence smaller than the
// largest it has seen is safe from stale holders, as with a Client. Fence
// does not change while the lock is held. Like a lock, a fence written to a
// node is forgotten when the node restarts empty (its counter then starts
// again from its clock); a renewal that takes the lock again on such a node
// writes Fence back into its counter, so restarts one at a time, each
// repaired before the next, do not erode it, but a quorum restarted at once
// does: run the nodes with persistence. It is also forgotten when the name
// stays untaken for the fence counters' lifetime (dlock.WithFenceLifetime,
// 7 days by default): the counters expire, and the next fences come from
// the nodes' clocks again, below the last Fence by as much as the node that
// gave it ran ahead of the others (a resource then refuses the new holder
// until the clocks catch up). Keeping written-back counters for ever would
// cost a key per name ever locked. Fences with a FenceSet is the per-node
// alternative.
func (l *Lock) Fence() int64 { return l.fence }

// Context returns the lock's context, cancelled when the lock ends; pass it
// to the work the lock protects. context.Cause tells why:
//   - dlock.ErrReleased: Release was called; also dlock.ErrClosed when Close
//     released it;
//   - an error matching dlock.ErrLockLost: no renewal reached a quorum before
//     the validity ran out (also ErrNoQuorum), the validity of a lock
//     acquired WithoutRenewal ran out, or a renewal or Refresh found the
//     lock gone on a majority of the nodes. The token is then given up on
//     every node, in the background, so that keys a renewal kept alive on
//     some nodes do not block the next holder. A Release (or Close) that
//     begins after the validity ran out, before the lock's timer marked it,
//     ends the context this way too, as the timer would have.
func (l *Lock) Context() context.Context {
	// A validity that ran out while this process did not run (stopped,
	// frozen, starved of CPU) ends the lock here, at once: the deadline
	// timer may fire only after the holder has asked and begun its work.
	// (TestContextOfValidityOverIsEndedAtOnce.)
	l.endIfOver()
	return l.ctx
}

// TTL returns what is left of the quorum's validity, on the local clock.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.life.Held() {
		return 0, opError("ttl", l.name, dlock.ErrNotHeld)
	}
	return max(time.Until(l.valid), 0), nil
}

// Refresh extends the lease on every node of the lock to at least ttl, and
// succeeds as soon as a quorum confirmed within the new validity, without
// waiting for slower nodes; later renewals use ttl. Nodes that no longer
// hold the lock (restarted empty, or that never granted it) are then taken
// again where the lock is free there, with a new fence (see Fences). ttl
// must lie within the Redlock's TTL bounds (else dlock.ErrInvalidTTL, and
// nothing is sent). It fails with ErrNoQuorum when too few nodes confirmed,
// and with dlock.ErrNotHeld when the lock has ended or a majority of nodes
// no longer hold it (then its context ends).
func (l *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := l.r.cfg.bounds.Check(ttl); err != nil {
		return opError("refresh", l.name, err)
	}
	out, err := l.refresh(ctx, ttl.Truncate(time.Millisecond), true)
	if out == gone {
		l.lose(observe.ReasonTakenOver, fmt.Errorf("%w: %w", dlock.ErrLockLost, err))
	}
	return err
}

// outcome is what a refresh found.
type outcome int

const (
	extended outcome = iota // a quorum confirmed in time
	gone                    // a majority of nodes no longer hold the lock
	failed                  // neither: too few answers, or too late
	ended                   // the lock had ended already
)

// refresh runs the refresh script on every node of the lock at once, and
// returns as soon as a quorum confirmed, or can no longer confirm: one
// stalled node kept every renewal waiting until the validity's end, and the
// lock was lost with two nodes of three answering. (TestStalledNodeKeepsLock.)
// The nodes not heard from go on in the background, bounded by the
// validity they would confirm and by Close. setTTL makes ttl the one later
// renewals ask for (a Refresh, not a renewal).
//
// Once a quorum confirmed, the nodes that no longer hold the lock (restarted
// empty, or never granted) are taken again where the lock is free
// (retake): extend-or-lock, as redsync does, so that a quorum does not
// erode one restart at a time. A node taken again does not count towards
// the quorum of the renewal that took it (that quorum came first), and
// counts from the next renewal on, as it then holds the lock like the
// others. It can neither revive a lock whose lease ended (a re-take follows
// a quorum confirmed within the validity) nor undo a forced unlock (the
// forced record refuses the token's re-takes: TestForcedUnlockNodeByNodeStaysForced).
func (l *Lock) refresh(ctx context.Context, ttl time.Duration, setTTL bool) (outcome, error) {
	l.mu.Lock()
	st, fences := l.life.Held(), slices.Clone(l.fences)
	l.mu.Unlock()
	if !st {
		return ended, opError("refresh", l.name, dlock.ErrNotHeld)
	}
	start := time.Now()
	// Every node is asked, those the lock does not hold too: their "not
	// ours" counts towards a loss (a lock held on a bare quorum, taken
	// over on one node while another holder took the node it never had,
	// is gone: TestTakenOverOnBareQuorumSeenGone), while only the
	// nodes it holds count towards the quorum that keeps it.
	// Straight to each node: the quorum's validity decides, not any
	// node's own lease.
	bctx, cancel := l.r.bounded(ctx, start.Add(ttl-margin(ttl)))
	replies, wait := l.r.fanOut(bctx, cancel, l.r.all(), func(ctx context.Context, i int) (int64, error) {
		res, err := node.Refresh(l.keys, l.token, ttl).Run(ctx, l.r.nodes[i].rdb).Int64()
		return res, redisError(err)
	})
	defer wait()
	t := newRefreshTally(fences, l.r.quorum)
	var ctxErr error
	for !t.decided() && ctxErr == nil {
		select {
		case rep := <-replies:
			t.add(rep.i, rep.res, rep.err)
		case <-ctx.Done():
			ctxErr = ctx.Err()
		}
	}
	return l.conclude(ctx, t, start, ttl, setTTL, ctxErr)
}

// refreshTally counts the nodes' answers to one refresh (a Refresh or a
// background renewal) until they decide it.
type refreshTally struct {
	fences   []int64 // the lock's fences when the refresh was sent
	quorum   int
	ok       int // nodes of the lock that confirmed
	lacks    int // nodes that said it is not ours there
	pending  int // nodes not heard from
	heldOut  int // of those, nodes the lock holds: the only ones that can confirm it
	errs     []error
	answered []bool
	retake   []int // nodes to take again once a quorum confirmed
}

func newRefreshTally(fences []int64, quorum int) *refreshTally {
	t := &refreshTally{fences: fences, quorum: quorum, pending: len(fences), answered: make([]bool, len(fences))}
	for _, f := range fences {
		if f != 0 {
			t.heldOut++
		}
	}
	return t
}

// add takes node i's answer: res the refresh script's reply, or err.
func (t *refreshTally) add(i int, res int64, err error) {
	t.pending--
	if t.fences[i] != 0 {
		t.heldOut--
	}
	t.answered[i] = true
	switch {
	case err != nil:
		t.errs = append(t.errs, fmt.Errorf("node %d: %w", i, err))
	case res == 1 && t.fences[i] != 0:
		t.ok++
	case res == 1:
		// Ours on a node not in the lock (a grant whose reply was lost):
		// joined by a re-take, not counted.
		t.retake = append(t.retake, i)
	default:
		t.lacks++
		t.retake = append(t.retake, i)
	}
}

// decided reports whether the answers so far decide the refresh: a quorum
// confirmed, or everyone answered, or the answers out can no longer make a
// quorum nor decide a loss still undecided. It does not wait for a stalled
// node that can do neither (a renewal stuck on it would wait out the
// validity instead of failing fast and being retried).
func (t *refreshTally) decided() bool {
	n := len(t.fences)
	waitMore := t.ok+t.heldOut >= t.quorum || (t.lacks <= n-t.quorum && t.lacks+t.pending > n-t.quorum)
	return t.pending == 0 || t.ok >= t.quorum || !waitMore
}

// conclude turns a decided tally of a refresh sent at start into its
// outcome: the validity moved (and the nodes that no longer hold the lock
// taken again), the lock gone, or a failure. ctxErr is the caller's
// context's error when it ended the wait.
func (l *Lock) conclude(ctx context.Context, t *refreshTally, start time.Time, ttl time.Duration, setTTL bool, ctxErr error) (outcome, error) {
	n := len(l.r.nodes)
	if t.ok >= l.r.quorum && time.Since(start) < ttl-margin(ttl) {
		if err := l.extend(start, ttl, setTTL); err != nil {
			return ended, err
		}
		retake := t.retake
		for i, f := range t.fences {
			if f == 0 && !t.answered[i] {
				retake = append(retake, i) // not heard yet: the quorum came first
			}
		}
		for _, i := range retake {
			l.r.start(func() { l.retake(ctx, i, ttl, start.Add(ttl-margin(ttl))) })
		}
		return extended, nil
	}
	if t.lacks > n-l.r.quorum {
		err := opError("refresh", l.name, fmt.Errorf("%w: gone on %d of %d nodes", dlock.ErrNotHeld, t.lacks, n))
		if l.ended() {
			// Our own Release, run meanwhile on another connection, is
			// what the nodes saw: not a loss.
			return ended, err
		}
		return gone, err
	}
	err := fmt.Errorf("%w: %d of %d nodes confirmed", ErrNoQuorum, t.ok, n)
	if ctxErr != nil {
		err = fmt.Errorf("%w: %w", err, ctxErr)
	}
	if len(t.errs) > 0 {
		err = fmt.Errorf("%w: %w", err, errors.Join(t.errs...))
	}
	return failed, opError("refresh", l.name, err)
}

// extend moves the validity after a quorum confirmed a refresh sent at
// start, unless the lock ended meanwhile: a late confirmation does not
// revive it.
func (l *Lock) extend(start time.Time, ttl time.Duration, setTTL bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.life.Held() {
		// The life's cause, not the context's: a loss is told to the
		// observers before the context ends, and the context's cause read
		// then was nil ("not held: %!w(<nil>)":
		// TestRefreshAcrossLossNamesItsCause).
		return opError("refresh", l.name, fmt.Errorf("%w: %w", dlock.ErrNotHeld, l.life.Cause()))
	}
	if setTTL {
		l.ttl = ttl
	}
	// Node leases are never shortened (a renewal and a Refresh that cross
	// keep the longer), so the validity only moves forward.
	if v := start.Add(ttl - margin(ttl)); v.After(l.valid) {
		l.valid = v
	}
	if end := start.Add(ttl); end.After(l.served) {
		l.served = end
	}
	return nil
}

// retake takes the lock again on node i, which no longer holds it for us,
// if it is free there: the acquire script with the lock's token extends a
// lock that is ours and grants a free one, with a new fence from the
// node's counter. The new fence joins Fences (a node restarted empty hands
// out fences from its clock, above those it handed out before, as long as
// its clock did not go back), and the node's fence counter is raised to the
// lock's Fence, which a restart had taken from it, so that the next holder
// gets a larger Fence there too. A grant that comes after the lock ended
// is given back.
func (l *Lock) retake(ctx context.Context, i int, ttl time.Duration, until time.Time) {
	rctx, cancel := l.r.bounded(ctx, until)
	defer cancel()
	// Not Redlock.attempt, which gives the token up on a node whose reply
	// was lost: that would refuse every later re-take there (a dead node
	// fails every one). A grant whose reply was lost is ours and harms
	// nobody: Release and a loss give the token up on every node.
	res, err := node.Acquire(l.keys, l.token, node.AcquireArgs{TTL: ttl, Owner: l.owner,
		FenceLifetime: l.r.cfg.fenceLifetime, Retake: true}).Run(rctx, l.r.nodes[i].rdb).Slice()
	if err != nil {
		return // unreachable: the next renewal tries again
	}
	g, err := node.ParseGrant(res)
	if err != nil || !g.OK {
		return // held by another there, or our token was given up there
	}
	// The node's counter is raised before the node joins: a node that
	// counts as repaired with its counter still below Fence would let
	// Fence go back after the next restart.
	if g.Fence < l.fence {
		if err := raiseScript.Run(rctx, l.r.nodes[i].rdb, []string{l.keys.Lock, l.keys.Fence}, l.token,
			l.fence, l.r.cfg.fenceLifetime.Milliseconds()).Err(); err != nil {
			l.r.giveBack(ctx, i, l.keys, l.token, ttl, giveUpAttempt) // the next renewal tries again
			return
		}
	}
	if !l.join(i, g.Fence) {
		l.r.giveBack(ctx, i, l.keys, l.token, ttl, giveUpLock)
	}
}

// Renewal is the lock's background renewal due at now, for the Redlock's
// lease.Renewer: a refresh on every node, each in the lane of its node, so
// that the renewals of all the Redlock's locks on one node leave together
// in one pipeline and a node that hangs holds up only its own replies. It
// sends nothing for a lock that has ended or whose validity has run out.
func (l *Lock) Renewal(now time.Time) ([]lease.Part, lease.Round, bool) {
	l.mu.Lock()
	if !l.life.Held() || !now.Before(l.valid) {
		l.mu.Unlock()
		return nil, nil, false
	}
	ttl, fences, valid := l.ttl, slices.Clone(l.fences), l.valid
	l.mu.Unlock()
	// A reply after the current validity is of no use: the lock is lost
	// then. (Bounded by the validity it would confirm, a renewal stuck on
	// a stopped node held Close that much longer.)
	parts := make([]lease.Part, len(l.r.nodes))
	for i, nd := range l.r.nodes {
		parts[i] = lease.Part{Lane: nd.lane, Conn: nd.conn}
	}
	return parts, &renewal{l: l, ttl: ttl, start: now, bound: valid, t: newRefreshTally(fences, l.r.quorum)}, true
}

// Call makes node i's refresh. The validity it may confirm is dated from
// when the renewal was due (start), before any send: a part that waited in
// its lane only makes the node's lease end later than the validity, never
// earlier. Redlock has no hold limit to keep.
func (rn *renewal) Call(int, time.Time) (node.Call, time.Time, bool) {
	return node.Refresh(rn.l.keys, rn.l.token, rn.ttl), rn.bound, true
}

// renewal is one background renewal: its answers come from the lanes of
// several nodes, each on its own goroutine.
type renewal struct {
	l     *Lock
	ttl   time.Duration
	start time.Time
	bound time.Time // the validity when it was due: a reply after it is of no use

	mu   sync.Mutex // guards t and done
	t    *refreshTally
	done bool // decided: later answers are of no use
}

// Answer takes node i's reply; the answer that decides the renewal tells
// the observers, ends the lock if a majority of nodes lost it, and
// schedules the next renewal.
func (rn *renewal) Answer(i int, reply node.Reply) {
	res, err := reply.Int64()
	rn.mu.Lock()
	if rn.done {
		rn.mu.Unlock()
		return
	}
	rn.t.add(i, res, redisError(err))
	if !rn.t.decided() {
		rn.mu.Unlock()
		return
	}
	rn.done = true
	rn.mu.Unlock()
	l := rn.l
	out, err := l.conclude(l.ctx, rn.t, rn.start, rn.ttl, false, nil)
	e := observe.RenewEvent{Name: l.name, Fence: l.Fence()}
	switch out {
	case extended:
		e.Result = observe.ResultOK
	case gone:
		e.Result = observe.ResultLost
	case failed:
		e.Result, e.Err = observe.ResultError, err
	case ended:
		return // lost or released meanwhile
	}
	for _, o := range l.r.cfg.observers {
		o.OnRenew(e)
	}
	if out == gone {
		l.lose(observe.ReasonTakenOver, fmt.Errorf("%w: renewal found the lock gone or taken over: %w", dlock.ErrLockLost, err))
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	next := nextRenewal(l.ttl, l.valid)
	if out == failed {
		// Retried with the engine's backoff (TTL/30 doubling), well
		// before the deadline: a retry due at the deadline itself comes
		// too late to save the lock.
		l.failures++
		next = min(next, lease.RetryBackoff(l.ttl, l.failures))
	} else {
		l.failures = 0
	}
	l.scheduleLocked(time.Now().Add(next))
}

// begin starts the lock's deadline timer and schedules its first renewal,
// once the Redlock tracks it. The first renewal is due a third of the TTL
// after the acquisition, but no later than half of what is left of the
// validity: an acquisition that took most of the TTL (slow nodes, the fence
// write-back) must renew before its deadline, not after it.
func (l *Lock) begin() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.life.Arm(time.Until(l.valid), l.atDeadline)
	l.scheduleLocked(time.Now().Add(nextRenewal(l.ttl, l.valid)))
}

// atDeadline runs on the deadline timer: the lock ends unless a renewal or
// Refresh moved the validity, and then the timer is set again.
func (l *Lock) atDeadline() {
	if left := l.expire(l.validityCause()); left > 0 {
		l.mu.Lock()
		l.life.Rearm(left)
		l.mu.Unlock()
	}
}

// scheduleLocked has the renewer renew l at next, if l is held and renewed
// in the background. l.mu must be held (see lease.Renewer.mu).
func (l *Lock) scheduleLocked(next time.Time) {
	if l.renew && l.life.Held() {
		l.r.renewer.Schedule(&l.entry, l, next)
	}
}

// stopped takes an ended lock out of the renewer and stops its timer.
func (l *Lock) stopped() {
	l.r.renewer.Forget(&l.entry)
	l.mu.Lock()
	l.life.Disarm()
	l.mu.Unlock()
}

// Release ends the lock's context (cause dlock.ErrReleased; a loss, and
// dlock.ErrNotHeld "lost before the release", if the validity had already
// run out), before any node is asked, then releases the lock by its token
// on every node: those that granted it, and the others, whose grant may not
// have been heard of (there the token is given up, so that an attempt still
// on the way grants nothing). It returns once a quorum released it (or can
// no longer), and leaves the slower nodes to the background, within the
// release timeout; Close waits for them. It reports dlock.ErrNotHeld when
// it was released before, when its context had already ended with a loss
// (the nodes that still had it are freed all the same), or when a majority
// of the nodes answered that it was no longer held there (matching
// ErrReleasedLate too when too few said so within the validity to make a
// majority: the others' leases may have ended while the release waited for
// them, after a hold the validity covered); and an error matching
// ErrNoQuorum, with the nodes' errors, when failing nodes (unreachable,
// timed out) kept a quorum from releasing it: a node that did not answer in
// time lets the lock expire with its lease. The lock is over either way: a
// second Release reports dlock.ErrNotHeld.
//
// Release runs on a context of its own, as a Client's Release does: ctx's
// values but not its cancellation or deadline, bounded by the release
// timeout. A deferred Release works after the request's context was
// cancelled, and a caller's deadline cannot cut it short.
func (l *Lock) Release(ctx context.Context) error {
	rctx, cancel := l.r.cleanupContext(ctx)
	defer cancel()
	return l.release(rctx, dlock.ErrReleased)
}

// release is Release on ctx as it is; cause ends the lock's context.
func (l *Lock) release(ctx context.Context, cause error) error {
	l.releaseMu.Lock()
	defer l.releaseMu.Unlock()
	// Renewal first: nothing may extend the lease once the lock is let go.
	l.r.renewer.Forget(&l.entry)
	// The validity may have run out before its timer fired: that is the
	// loss the deadline would have made, not a release of a valid lock.
	l.endIfOver()
	l.mu.Lock()
	if l.life.Phase() == lease.Released {
		l.mu.Unlock()
		return opError("release", l.name, dlock.ErrNotHeld)
	}
	afterLoss := l.life.Phase() == lease.Lost
	if afterLoss {
		// The loss is the context's cause even if lose is still telling
		// the observers and has not cancelled it yet: Run must not read
		// the loss as a release.
		cause = l.life.Cause()
	}
	// Released before the nodes are asked: a late grant that arrives now
	// is given back, not joined.
	l.life.End(lease.Released, cause)
	fences := slices.Clone(l.fences)
	valid := l.valid
	l.mu.Unlock()
	l.stopped()

	// The context ends before any node is asked: the nodes that answer
	// free the keys at once, and a second holder can take the lock on them
	// while a node that stopped answering keeps the release waiting, for
	// seconds, with renewal (and the deadline timer) already stopped.
	// (TestReleaseEndsContextBeforeKeysAreFreed.)
	l.cancel(cause)
	t := l.releaseNodes(ctx, fences, valid)
	n, notOurs, errs := t.released, t.notOurs, t.errs
	l.r.own.Untrack(l)
	e := observe.ReleaseEvent{Name: l.name, Fence: l.Fence(), Result: observe.ResultOK, Held: time.Since(l.start), AfterLoss: afterLoss}
	var err error
	switch {
	case n < l.r.quorum && len(l.r.nodes)-notOurs >= l.r.quorum && !afterLoss:
		// The nodes' errors, not their answers, kept the quorum away: the
		// lock was held, as far as anyone knows, so not ErrNotHeld but a
		// failure, as a Client's Release reports a network error. A retry
		// finds nothing to do (the lock has ended here): keys left on the
		// nodes that failed expire with their leases. (Retrying them in
		// the background would hold Close past the release timeout.)
		// (TestReleaseNetworkFailureIsNotNotHeld.)
		msg := fmt.Errorf("%w: released on %d of %d nodes, %d needed", ErrNoQuorum, n, len(l.r.nodes), l.r.quorum)
		if len(errs) > 0 { // always here; errors.Join of none is nil, which %w prints as %!w(<nil>)
			msg = fmt.Errorf("%w: %w", msg, errors.Join(errs...))
		}
		err = opError("release", l.name, msg)
		e.Result = observe.ResultError
	case afterLoss:
		// The lock's context already told the holder it was lost (the
		// validity ran out, a margin before the nodes' leases): the
		// keys, still ours, are freed early for the next holder, but the
		// holder learns what its context said, as from a Client.
		err = opError("release", l.name, fmt.Errorf("%w: lost before the release (%w)", dlock.ErrNotHeld, cause))
		e.Result = observe.ResultNotHeld
	case n < l.r.quorum:
		// Not ResultError ("may still be held, retry"): a majority of
		// the nodes said the lock was no longer ours there.
		msg := fmt.Errorf("%w: released on %d of %d nodes", dlock.ErrNotHeld, n, len(l.r.nodes))
		if t.notOursInTime <= len(l.r.nodes)-l.r.quorum {
			// Too few nodes said "not ours" within the validity to make a
			// majority: the rest said so after it ran out, and nodes that
			// did not answer in time (stopped, slow) may have let the keys
			// expire with the lease before the release reached them.
			// Their answer says nothing of the hold, which the validity
			// covered. (TestReleaseAnsweredAfterValidity; a majority that
			// said it in time is a loss: TestNotOursWithinValidityIsNoLateLoss.)
			msg = fmt.Errorf("%w (%w)", msg, ErrReleasedLate)
		}
		e.Result = observe.ResultNotHeld
		if len(errs) > 0 {
			msg = fmt.Errorf("%w: %w", msg, errors.Join(errs...))
		}
		err = opError("release", l.name, msg)
	}
	e.Err = err
	for _, o := range l.r.cfg.observers {
		o.OnRelease(ctx, e)
	}
	return err
}

// releaseNodes releases the lock by token on every node at once, and
// returns once a quorum released it, or can no longer release it, with on
// how many nodes it was released (now, or by an earlier send of the same
// release), on how many the answer was that it was not ours there (and how
// many nodes, heard at the verdict or not yet, said so before valid), and
// the nodes' errors so far. The other nodes are left to the background, on
// a context that keeps ctx's deadline (the release timeout) but not its
// cancellation: waiting for the slowest node made Release take as long as
// the release timeout with one node stopped, while the lock was free on the
// others. (TestReleaseReturnsOnQuorum.)
//
// A node that has not granted as far as we know (fence 0) is released too,
// by giving the token up there: its grant may have been made with the reply
// still out or lost, and an attempt still on the way then grants nothing.
// (TestReleaseFreesUnheardGrant.) Only its reply 1, a grant released now,
// counts: a give-up answers 2 where it found nothing.
func (l *Lock) releaseNodes(ctx context.Context, fences []int64, valid time.Time) releaseTally {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(l.r.cfg.releaseTimeout)
	}
	bctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	// Nodes that said "not ours" before valid, counted by each node's call
	// at its first answer: its reply reaches the verdict only after the
	// give-up that follows, and a node that stops between the two answered
	// in time all the same, even when another node's reply makes the
	// verdict first. (TestInTimeNotOursBehindVerdictIsNoLateLoss.)
	var inTime atomic.Int32
	notOurs := func(i int, res int64) bool { return !(res == 1 || res == 2 && fences[i] != 0) } // 2: released by an earlier send of this release
	answered := func(i int, res int64, err error) {
		if err == nil && notOurs(i, res) && time.Now().Before(valid) {
			inTime.Add(1)
		}
	}
	replies, wait := l.r.fanOut(bctx, cancel, l.r.all(), func(ctx context.Context, i int) (int64, error) {
		if fences[i] == 0 {
			res, err := l.r.release(ctx, i, l.keys, l.token, giveUpLock)
			answered(i, res, err)
			return res, err
		}
		res, err := l.r.release(ctx, i, l.keys, l.token, holderRelease)
		answered(i, res, err)
		if err == nil && res == 0 {
			// Not ours there (expired, or the node restarted empty):
			// give the token up, so that a renewal's re-take of the
			// node still on the way takes nothing, or is released.
			_, _ = l.r.release(ctx, i, l.keys, l.token, giveUpLock)
		}
		return res, err
	})
	defer wait()
	var t releaseTally
	failed := 0
	nodes := len(l.r.nodes)
	for range nodes {
		rep := <-replies
		switch {
		case rep.err != nil:
			failed++
			t.errs = append(t.errs, fmt.Errorf("node %d: %w", rep.i, redisError(rep.err)))
		case !notOurs(rep.i, rep.res):
			t.released++
		default:
			failed++
			t.notOurs++
		}
		if t.released >= l.r.quorum || failed > nodes-l.r.quorum {
			break
		}
	}
	t.notOursInTime = int(inTime.Load())
	return t
}

// releaseTally is what releaseNodes heard by its verdict.
type releaseTally struct {
	released      int     // nodes where it was released
	notOurs       int     // nodes that said it was not ours there
	notOursInTime int     // nodes that said so before the validity ran out, also those whose reply is still out
	errs          []error // the failing nodes' errors
}

// join takes in node i's grant that arrived after the verdict. It reports
// false, and the caller gives the grant back, when the lock has ended or
// its validity has run out.
func (l *Lock) join(i int, fence int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.life.Held() || !time.Now().Before(l.valid) {
		return false
	}
	l.fences[i] = fence
	return true
}

// lose marks a held lock lost, tells the observers and ends its context.
func (l *Lock) lose(reason observe.Reason, cause error) {
	l.mu.Lock()
	moved := l.life.End(lease.Lost, cause)
	l.mu.Unlock()
	if moved {
		l.lost(reason, cause)
	}
}

// expire ends the lock if its validity has run out, and else returns what
// is left of it. It looks and marks the lock lost under one hold of mu: a
// refresh confirmed meanwhile either moved the validity before the look, or
// finds the lock lost and reports so, never success for a lock whose
// context then ends.
func (l *Lock) expire(cause error) time.Duration {
	l.mu.Lock()
	if !l.life.Held() {
		l.mu.Unlock()
		return 0
	}
	if left := time.Until(l.valid); left > 0 {
		l.mu.Unlock()
		return left
	}
	l.life.End(lease.Lost, cause)
	l.mu.Unlock()
	l.lost(observe.ReasonExpired, cause)
	return 0
}

// endIfOver ends the lock as lost if its validity has run out, for a
// caller that must not wait for the deadline timer to fire.
func (l *Lock) endIfOver() {
	l.mu.Lock()
	over := l.life.Held() && !time.Now().Before(l.valid)
	l.mu.Unlock()
	if over {
		l.expire(l.validityCause())
	}
}

// validityCause is the cause of a loss by the end of the validity.
func (l *Lock) validityCause() error {
	if l.renew {
		return fmt.Errorf("%w: %w: no renewal reached a quorum before the validity ran out", dlock.ErrLockLost, ErrNoQuorum)
	}
	return fmt.Errorf("%w: validity ran out (renewal off)", dlock.ErrLockLost)
}

// lost tells the observers of a loss just marked, and ends the context.
func (l *Lock) lost(reason observe.Reason, cause error) {
	// Observers first: whoever wakes on the context finds the metrics and
	// logs already telling of the loss.
	for _, o := range l.r.cfg.observers {
		o.OnLost(observe.LostEvent{Name: l.name, Fence: l.Fence(), Reason: reason, Held: time.Since(l.start), Cause: cause})
	}
	l.cancel(cause)
	l.stopped()
	// A lost lock is no longer the Redlock's to release at Close. What it
	// still holds is given up on every node, after the context ended, in
	// the background: left to expire, the keys on the nodes that answered
	// the last renewal blocked the next holder for up to a TTL.
	// (TestLossReleasesWhatIsHeld.) A lock whose validity ran out gives
	// them up at the end of the last lease a quorum confirmed, not before:
	// the margin before it is the holder's, for its work to see the
	// context end and stop (TestLapsedLockKeepsMarginBeforeNextHolder). A
	// lock gone on a majority is given up at once: it is no longer held.
	l.r.own.Untrack(l)
	l.mu.Lock()
	ttl, at := l.ttl, l.served
	l.mu.Unlock()
	if reason != observe.ReasonExpired {
		at = time.Time{}
	} else {
		at = lease.LapsedGiveBack(at, ttl)
	}
	for i := range l.r.nodes {
		l.r.giveBackAt(l.ctx, i, l.keys, l.token, ttl, giveUpLock, at)
	}
}

// ended reports whether the lock was released or lost.
func (l *Lock) ended() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.life.Held()
}

// nextRenewal is how long after now a lock of ttl valid until valid is
// renewed: at a third of its TTL, and no later than halfway to the end of
// its validity, so that a renewal (and a retry) has time to land.
func nextRenewal(ttl time.Duration, valid time.Time) time.Duration {
	return max(min(ttl/3, time.Until(valid)/2), time.Millisecond)
}
