package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
)

// TestStalledNodeKeepsLock (issue 17, item 6): one node of three stopped
// (SIGSTOP) for more than three TTLs, with go-redis' defaults (a renewal
// stuck there until the 3s ReadTimeout): the two live nodes confirm every
// renewal, and the lock stays held; Release then frees it on them.
func TestStalledNodeKeepsLock(t *testing.T) {
	srvs, probes := startNodes(t, 3)
	obs := &recorder{}
	r := newRedlock(t, plainClients(t, srvs, 0), redlock.WithObserver(obs))
	const ttl = 900 * time.Millisecond
	l, err := r.TryAcquire(bg, "stalled", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every node in the lock", func() bool { return !slices.Contains(asLock(t, l).Fences(), 0) })
	pauseNode(t, srvs[2])
	select {
	case <-l.Context().Done():
		t.Fatalf("lock lost with 2 of 3 nodes answering: %v", context.Cause(l.Context()))
	case <-time.After(3500 * time.Millisecond):
	}
	if _, _, losts, _ := obs.counts(); losts != 0 {
		t.Fatalf("%d OnLost events for a lock that is fine", losts)
	}
	if err := l.Release(bg); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if n := exists(probes[:2], "dlock:{stalled}"); n != 0 {
		t.Fatalf("the lock left on %d live nodes after Release", n)
	}
}

// failRefresh is a go-redis hook that, while on, fails the refresh script
// (a script call with one key) at once, unsent.
type failRefresh struct {
	on     atomic.Bool
	failed atomic.Int32
}

func (h *failRefresh) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failRefresh) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fails(cmd) {
			err := errors.New("injected: refresh failed")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook fails the refreshes of a pipeline too: background
// renewals go in one (a pipeline per node lane).
func (h *failRefresh) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return failInPipeline(ctx, next, cmds, h.fails, errors.New("injected: refresh failed"))
	}
}

func (h *failRefresh) fails(cmd redis.Cmder) bool {
	if h.on.Load() && isRefresh(cmd) {
		h.failed.Add(1)
		return true
	}
	return false
}

// isRefresh reports whether cmd runs the refresh script (a script call with
// one key).
func isRefresh(cmd redis.Cmder) bool {
	a := cmd.Args()
	return len(a) > 2 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[2]) == "1"
}

// failInPipeline answers the commands of a pipeline that match with err,
// unsent, and sends the rest: a hook's fault reaches calls sent in a
// pipeline as it reaches those sent alone.
func failInPipeline(ctx context.Context, next redis.ProcessPipelineHook, cmds []redis.Cmder, match func(redis.Cmder) bool, err error) error {
	var rest []redis.Cmder
	for _, cmd := range cmds {
		if match(cmd) {
			cmd.SetErr(err)
		} else {
			rest = append(rest, cmd)
		}
	}
	if len(rest) == 0 {
		return err
	}
	if e := next(ctx, rest); e != nil {
		return e
	}
	if len(rest) < len(cmds) {
		return err
	}
	return nil
}

// TestRenewalRetriesSoon (issue 17, item 6): renewals fail on two nodes of
// three for the first 650ms of a 900ms lock (validity to 810ms): the one at
// 300ms and its retries fail, and a retry soon after the failures stop
// keeps the lock, where the next try a third of the TTL after a failure
// (at 600ms, then at the validity's end) came too late.
func TestRenewalRetriesSoon(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	hook := &failRefresh{}
	for _, rdb := range rdbs[1:] {
		rdb.AddHook(hook)
	}
	r := newRedlock(t, rdbs)
	const ttl = 900 * time.Millisecond
	hook.on.Store(true)
	l, err := r.TryAcquire(bg, "retry", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(650*time.Millisecond, func() { hook.on.Store(false) })
	select {
	case <-l.Context().Done():
		t.Fatalf("lock lost though renewals got through again at 650ms: %v", context.Cause(l.Context()))
	case <-time.After(2 * time.Second):
	}
	if hook.failed.Load() < 2 {
		t.Fatalf("%d renewals failed: the test proves nothing", hook.failed.Load())
	}
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
}

// TestSlowAcquisitionKeepsHealthyLock: an acquisition that took more than
// about 57% of the TTL (two of three nodes stalled, then healthy again) is
// handed out with less validity left than ttl/3. Its first renewal is due no
// later than halfway to the validity's end, not at ttl/3 regardless: it is
// sent before the deadline, and the lock, healthy and held by every node, is
// kept.
func TestSlowAcquisitionKeepsHealthyLock(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	rec := &recorder{}
	r := newRedlock(t, rdbs, redlock.WithObserver(rec))
	const ttl = 2 * time.Second
	srvs[0].Pause()
	srvs[1].Pause()
	t.Cleanup(srvs[0].Resume)
	t.Cleanup(srvs[1].Resume)
	go func() {
		time.Sleep(1300 * time.Millisecond)
		srvs[0].Resume()
		srvs[1].Resume()
	}()
	start := time.Now()
	l, err := r.TryAcquire(bg, "slow", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	left, _ := l.TTL(bg)
	t.Logf("acquisition took %v, validity left %v, first renewal due in %v", took, left, ttl/3)
	if left >= ttl/3 {
		t.Skipf("precondition not met: validity left %v >= ttl/3", left)
	}
	select {
	case <-l.Context().Done():
		_, renews, _, _ := rec.counts()
		t.Fatalf("healthy lock lost %v after it was handed out, renewals sent: %d; cause: %v",
			time.Since(start)-took, renews, context.Cause(l.Context()))
	case <-time.After(ttl / 2):
	}
	_ = l.Release(bg)
}

// failRefreshUntil fails the refresh script (1 key) until a time, without
// sending it: a node briefly unreachable.
type failRefreshUntil struct {
	counter
	until time.Time
}

func (h *failRefreshUntil) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fails(cmd) {
			err := errors.New("injected: node briefly unreachable")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook refuses the refreshes of a pipeline too (background
// renewals go in one), and counts only those, not every pipeline as the
// embedded counter would.
func (h *failRefreshUntil) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return failInPipeline(ctx, next, cmds, h.fails, errors.New("injected: node briefly unreachable"))
	}
}

func (h *failRefreshUntil) fails(cmd redis.Cmder) bool {
	if len(cmd.Args()) == 6 && isRefresh(cmd) && time.Now().Before(h.until) {
		h.n.Add(1)
		return true
	}
	return false
}

// TestFailedRenewalRetriedBeforeValidityEnds: two of three nodes refuse
// renewals for the first 1.1s of a 1.5s lock (validity 1.35s), then answer
// again. A failed renewal is retried with a backoff from ttl/30, as the core
// retries, not at the validity's very end, where the deadline fires first: a
// retry reaches the healthy quorum in the 250ms before the end, and the lock
// is kept.
func TestFailedRenewalRetriedBeforeValidityEnds(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs)
	l, err := r.TryAcquire(bg, "retry", dlock.WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all three nodes", func() bool {
		return asLock(t, l).Fences()[2] != 0 && asLock(t, l).Fences()[1] != 0 && asLock(t, l).Fences()[0] != 0
	})
	hooks := []*failRefreshUntil{{until: time.Now().Add(1100 * time.Millisecond)}, {until: time.Now().Add(1100 * time.Millisecond)}}
	rdbs[0].AddHook(hooks[0])
	rdbs[1].AddHook(hooks[1])
	select {
	case <-l.Context().Done():
		t.Fatalf("lost after %d+%d refused renewals, the nodes answering again from 1.1s: %v",
			hooks[0].n.Load(), hooks[1].n.Load(), context.Cause(l.Context()))
	case <-time.After(2 * time.Second):
	}
	if hooks[0].n.Load()+hooks[1].n.Load() == 0 {
		t.Fatal("no renewal was refused: the test proves nothing")
	}
	_ = l.Release(bg)
}

// TestLossReleasesWhatIsHeld (issue 17, item 6): renewals fail on two nodes
// of three until the lock is lost; the node where they succeeded holds the
// key for a TTL more. Once the lock is lost its keys are released on every
// node that still has them, not left to expire.
func TestLossReleasesWhatIsHeld(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	_, probes := startNodesOn(t, rdbs)
	hook := &failRefresh{}
	for _, rdb := range rdbs[1:] {
		rdb.AddHook(hook)
	}
	r := newRedlock(t, rdbs)
	const ttl = 900 * time.Millisecond
	hook.on.Store(true)
	l, err := r.TryAcquire(bg, "loss", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Context().Done():
	case <-time.After(3 * time.Second):
		t.Fatal("lock alive 3s after renewals failed on 2 of 3 nodes")
	}
	lost := time.Now()
	if !errors.Is(context.Cause(l.Context()), dlock.ErrLockLost) {
		t.Fatalf("cause %v", context.Cause(l.Context()))
	}
	waitFor(t, "the lost lock's keys to be released", func() bool { return exists(probes, "dlock:{loss}") == 0 })
	if d := time.Since(lost); d > 300*time.Millisecond {
		t.Fatalf("keys left %v after the loss", d.Round(time.Millisecond))
	}
}

// TestRestartsOneByOne (issue 17, item 6): nodes restarted empty one after
// the other during a long hold. Each time, a renewal finds the key missing
// on the restarted node and takes it there again (extend-or-lock), with a
// new fence that Fences reports and a fence counter raised to Fence; so the
// holder keeps its lock, a second Redlock never gets in, and the next holder
// still gets a larger Fence.
func TestRestartsOneByOne(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs)
	second := newRedlock(t, rdbs)
	const ttl = 900 * time.Millisecond
	l, err := r.TryAcquire(bg, "restart", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	m := asLock(t, l)
	waitFor(t, "every node in the lock", func() bool { return !slices.Contains(m.Fences(), 0) })
	for round, i := range []int{0, 1, 2, 0, 1, 2} {
		before := m.Fences()
		if err := srvs[i].Restart(bg); err != nil {
			t.Fatal(err)
		}
		// A contender at once, before the renewal took the node again:
		// it may take the empty node, a minority, and must give it back.
		if _, err := second.TryAcquire(bg, "restart", dlock.WithTTL(ttl)); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("round %d: a second Redlock right after node %d restarted: %v", round, i, err)
		}
		waitFor(t, fmt.Sprintf("round %d: node %d taken again", round, i), func() bool {
			return m.Fences()[i] != before[i] && rdbs[i].Exists(bg, "dlock:{restart}").Val() == 1
		})
		if l.Context().Err() != nil {
			t.Fatalf("round %d: lock lost: %v", round, context.Cause(l.Context()))
		}
		after := m.Fences()
		if after[i] <= before[i] {
			t.Fatalf("round %d: node %d's fence went from %d to %d", round, i, before[i], after[i])
		}
		if f := fenceCounter(t, rdbs[i], "restart"); f < m.Fence() {
			t.Fatalf("round %d: node %d's fence counter %d is below the lock's Fence %d", round, i, f, m.Fence())
		}
		if _, err := second.TryAcquire(bg, "restart", dlock.WithTTL(ttl)); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("round %d: a second Redlock while the first holds: %v", round, err)
		}
	}
	fence := m.Fence()
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	next, err := second.TryAcquire(bg, "restart", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(bg)
	if next.Fence() <= fence {
		t.Fatalf("next holder's Fence %d, not above %d", next.Fence(), fence)
	}
}

// fenceCounter reads name's fence counter on rdb.
func fenceCounter(t *testing.T, rdb redis.UniversalClient, name string) int64 {
	t.Helper()
	v, err := rdb.Get(bg, "dlock:{"+name+"}:fence").Result()
	if err != nil {
		t.Fatalf("fence counter: %v", err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A renewal does not wait on a node the lock does not hold when that node
// can neither confirm the lock nor decide a loss: with node 2 stalled since
// the acquisition (fence 0) and one refusal on node 1, the renewal fails at
// once and its retry keeps the lock. Asking every node (for losses) first
// made the renewal wait for node 2 until the validity ran out.
func TestRenewalDoesNotWaitOnStalledUnheldNode(t *testing.T) {
	srvs, _ := startNodes(t, 3)
	rdbs := plainClients(t, srvs, 0)
	fail := &failRefresh{}
	rdbs[1].AddHook(fail)
	r := newRedlock(t, rdbs)
	const ttl = 900 * time.Millisecond
	pauseNode(t, srvs[2])
	l, err := r.TryAcquire(bg, "unheld", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if f := asLock(t, l).Fences(); f[2] != 0 {
		t.Fatalf("fences %v: node 2 stalled, yet in the lock", f)
	}
	fail.on.Store(true)
	waitFor(t, "a refused renewal on node 1", func() bool { return fail.failed.Load() > 0 })
	fail.on.Store(false)
	select {
	case <-l.Context().Done():
		t.Fatalf("lost after one refused renewal, nodes 0 and 1 answering: %v", context.Cause(l.Context()))
	case <-time.After(2 * ttl):
	}
	if err := l.Release(bg); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// TestTakenOverOnBareQuorumSeenGone: the lock holds nodes 0 and 1 only (node
// 2 was stopped at acquisition; the test skips when a renewal has taken node
// 2 again meanwhile). An operator force-unlocks node 1 and a second Redlock
// takes nodes 1 and 2: it holds a quorum. The holder's renewals ask node 2
// too, though the lock does not hold it there: node 0 confirms, nodes 1 and 2
// say "not ours", a majority, so the next renewal finds the lock gone. The
// holder believes no longer than until that renewal, as ForceUnlock's doc
// promises, not until its validity runs out (up to TTL-margin).
func TestTakenOverOnBareQuorumSeenGone(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	obs := &recorder{}
	r := newRedlock(t, rdbs, redlock.WithObserver(obs))
	const ttl = 900 * time.Millisecond
	srvs[2].Pause()
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			srvs[2].Resume()
		}
	})
	dl, err := r.TryAcquire(bg, "bare", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	l := asLock(t, dl)
	time.Sleep(1200 * time.Millisecond)
	srvs[2].Resume()
	resumed = true
	time.Sleep(500 * time.Millisecond)
	if f := l.Fences(); f[2] != 0 {
		t.Skipf("node 2 was re-taken: %v", f)
	}
	c, err := dlock.New(rdbs[1])
	if err != nil {
		t.Fatal(err)
	}
	// Right after a renewal, so that the next one (and its re-take of
	// node 1) comes after B's acquisition.
	_, n0, _, _ := obs.counts()
	waitFor(t, "a renewal", func() bool { _, n, _, _ := obs.counts(); return n > n0 })
	if _, err := c.ForceUnlock(bg, "bare", l.Token()); err != nil {
		t.Fatal(err)
	}
	r2 := newRedlock(t, rdbs)
	l2, err := r2.TryAcquire(bg, "bare", dlock.WithTTL(ttl), dlock.WithoutRenewal())
	if err != nil {
		t.Skipf("contender refused (a renewal re-took node 1 first): %v", err)
	}
	took := time.Now()
	t.Logf("B holds, fences %v", asLock(t, l2).Fences())
	select {
	case <-l.Context().Done():
	case <-time.After(2 * time.Second):
		t.Fatal("A never lost")
	}
	both := time.Since(took)
	obs.mu.Lock()
	var res []string
	for _, e := range obs.renews {
		res = append(res, fmt.Sprint(e.Result))
	}
	obs.mu.Unlock()
	t.Logf("A's context ended %v after B acquired: %v; renewals: %v", both.Round(time.Millisecond), context.Cause(l.Context()), res[max(0, len(res)-6):])
	if both > ttl/3+150*time.Millisecond {
		t.Errorf("two believers for %v (> next renewal at TTL/3 + 150ms): the renewals never called the lock gone", both.Round(time.Millisecond))
	}
}

// TestForcedUnlockNodeByNodeStaysForced: an operator force-unlocks the
// holder's token on a majority of the nodes (2 of 3), one node at a time with
// dlock.Client.ForceUnlock (a Redlock has no ForceUnlock; its nodes are
// independent primaries). As refresh's doc in lock.go says, a re-take
// cannot undo a forced unlock: the forced record on each node refuses the
// token's re-takes, so no renewal takes node 0 back after the first unlock,
// to count it after the second. The lock is lost, the holder learns it, and
// the lock is not back on every node.
func TestForcedUnlockNodeByNodeStaysForced(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	obs := &recorder{}
	r := newRedlock(t, rdbs, redlock.WithObserver(obs))
	const ttl = 900 * time.Millisecond
	dl, err := r.TryAcquire(bg, "forced", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	l := asLock(t, dl)
	waitFor(t, "every node in the lock", func() bool { return !slices.Contains(l.Fences(), 0) })
	before := l.Fences()
	admin := func(i int) *dlock.Client {
		c, err := dlock.New(rdbs[i])
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, i := range []int{0, 1} {
		if _, err := admin(i).ForceUnlock(bg, "forced", l.Token()); err != nil {
			t.Fatalf("ForceUnlock on node %d: %v", i, err)
		}
		t.Logf("forced unlock on node %d at fences %v", i, l.Fences())
		time.Sleep(700 * time.Millisecond) // an operator's pace: two renewals
	}
	time.Sleep(ttl) // past any validity the holder had before the second unlock
	select {
	case <-l.Context().Done():
		t.Logf("lock lost as it should: %v", context.Cause(l.Context()))
	default:
		_, _, losts, _ := obs.counts()
		t.Errorf("forced unlock on 2 of 3 nodes undone: lock still held %v after the second unlock, "+
			"on %d of 3 nodes, fences %v -> %v, %d OnLost", 700*time.Millisecond+ttl,
			exists(rdbs, "dlock:{forced}"), before, l.Fences(), losts)
	}
	// A contender may take the lock now: logged, not judged.
	r2 := newRedlock(t, rdbs)
	if _, err := r2.TryAcquire(bg, "forced", dlock.WithTTL(ttl)); err == nil {
		t.Log("a contender got the lock")
	} else {
		t.Logf("contender: %v", err)
	}
}

// TestStalledAtAcquireRetaken: node 2 is stopped (SIGSTOP) while the lock is
// acquired on nodes 0 and 1. Its attempt times out at the validity's end and
// is given up there as an attempt: a 30s record that refuses copies of that
// attempt, not the lock's re-takes. Once node 2 is back, a renewal takes it
// again with the lock's own token, so the lock does not run on a bare quorum
// for 30s, and one clock jump (PEXPIRE on node 0) then does not lose it. Nor
// does a re-take sent at the resume run before the queued give-up and join:
// Fences would then name node 2, which the give-up empties a moment later.
func TestStalledAtAcquireRetaken(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs)
	const ttl = 900 * time.Millisecond
	srvs[2].Pause()
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			srvs[2].Resume()
		}
	})
	dl, err := r.TryAcquire(bg, "stalled2", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	l := asLock(t, dl)
	time.Sleep(1200 * time.Millisecond) // the attempt on node 2 timed out and was given up
	srvs[2].Resume()
	resumed = true
	time.Sleep(2 * time.Second) // six renewals, each re-taking node 2
	f := l.Fences()
	t.Logf("fences 2s after node 2 came back: %v, key on node 2: %d, give-up record on node 2: %d (pttl %v)", f,
		exists(rdbs[2:], "dlock:{stalled2}"), exists(rdbs[2:], "dlock:{stalled2}:r:"+l.Token()),
		rdbs[2].PTTL(bg, "dlock:{stalled2}:r:"+l.Token()).Val())
	if exists(rdbs[2:], "dlock:{stalled2}") == 0 {
		// Either never re-taken (fence 0), or re-taken at the resume
		// before the queued give-up ran and joined (a fence in Fences for
		// a node that does not hold the lock).
		t.Errorf("node 2 free but not in the lock 2s after it came back (fences %v): the give-up record refuses the lock's own token", f)
	}
	// One clock jump on node 0 now.
	rdbs[0].PExpire(bg, "dlock:{stalled2}", time.Millisecond)
	select {
	case <-l.Context().Done():
		t.Errorf("lock lost after one clock jump, with node 2 free all along: %v", context.Cause(l.Context()))
	case <-time.After(1500 * time.Millisecond):
	}
}

// Held locks cost no goroutine each: the Redlock's renewer keeps them in one
// heap and sends their renewals a pipeline per node, so 50 held locks, each
// renewed several times, leave only a handful of the Redlock's goroutines
// running (the renewal loop, and a lane's sender while its pipeline is
// out), where a watch goroutine per lock made at least 50.
func TestHeldLocksRunNoGoroutineEach(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs)
	const n = 50
	var locks []dlock.Lock
	for i := range n {
		l, err := r.TryAcquire(bg, "each-"+strconv.Itoa(i), dlock.WithTTL(600*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	// Every node in every lock: no late grant to collect, no node to take
	// again, whose goroutines come and go.
	for _, l := range locks {
		waitFor(t, "every node in "+l.Name(), func() bool { return !slices.Contains(asLock(t, l).Fences(), 0) })
	}
	// Past three renewals of each (a third of the TTL apart): all still
	// held. A goroutine per lock would be there at every look; the
	// renewal loop's senders come and go with their pipelines, so the
	// fewest seen is what counts.
	fewest := -1
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if g := redlockGoroutines(); fewest < 0 || g < fewest {
			fewest = g
		}
	}
	if fewest >= n {
		t.Fatalf("at least %d goroutines of the Redlock's at every look for %d held locks", fewest, n)
	}
	for _, l := range locks {
		if err := l.Context().Err(); err != nil {
			t.Fatalf("%s ended while renewed: %v", l.Name(), context.Cause(l.Context()))
		}
	}
	t.Logf("fewest goroutines of the Redlock's seen for %d held locks: %d", n, fewest)
}

// redlockGoroutines counts the goroutines running code of redlock or of the
// lease engine.
func redlockGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "dlock/redlock.") || strings.Contains(g, "dlock/internal/lease.") {
			if !strings.Contains(g, "redlock_test.TestHeldLocksRunNoGoroutineEach") {
				count++
			}
		}
	}
	return count
}
