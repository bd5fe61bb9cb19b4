package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/observe"
	"github.com/dlock-go/dlock/redlock"
)

// lateReply is a go-redis hook that, once armed, lets the next acquire
// script (a script call with 7 keys and 8 arguments; the release script
// has 5 and 7) run on the node and holds its reply back for d: a grant the
// Redlock hears of only after d.
type lateReply struct {
	armed atomic.Bool
	held  atomic.Int32 // replies held back
	d     time.Duration
}

func (h *lateReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lateReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a := cmd.Args()
		if err == nil && len(a) == 18 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[2]) == "7" &&
			h.armed.CompareAndSwap(true, false) {
			h.held.Add(1)
			time.Sleep(h.d)
		}
		return err
	}
}

func (h *lateReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// warmUp loads the scripts on every node (a first call answers NOSCRIPT
// and is sent again with its source), so that a hook sees one call each.
func warmUp(t *testing.T, r *redlock.Redlock) {
	t.Helper()
	l, err := r.TryAcquire(bg, "warm")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every node in the warm-up lock", func() bool { return !slices.Contains(asLock(t, l).Fences(), 0) })
	if err := l.Refresh(bg, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseFreesUnheardGrant (issue 17, item 11): a node whose grant
// has not been heard of when the lock is released (its reply is 1.5s late)
// is released by token all the same, at once, not when its reply comes.
func TestReleaseFreesUnheardGrant(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	_, probes := startNodesOn(t, rdbs)
	hook := &lateReply{d: 1500 * time.Millisecond}
	rdbs[2].AddHook(hook)
	r := newRedlock(t, rdbs)
	warmUp(t, r)
	hook.armed.Store(true)
	l, err := r.TryAcquire(bg, "unheard", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if f := asLock(t, l).Fences(); f[2] != 0 {
		t.Fatalf("fences %v: node 2's grant was heard of, the test proves nothing", f)
	}
	waitFor(t, "node 2 to grant, its reply held back", func() bool {
		return probes[2].Exists(bg, "dlock:{unheard}").Val() == 1 && hook.held.Load() == 1
	})
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	waitFor(t, "node 2's unheard grant to be released", func() bool {
		return probes[2].Exists(bg, "dlock:{unheard}").Val() == 0
	})
	if d := time.Since(released); d > 500*time.Millisecond {
		t.Fatalf("node 2 held the token %v after Release returned", d.Round(time.Millisecond))
	}
}

// TestFailedAcquireFreesUnheardGrant (issue 17, item 11): an attempt that
// fails (node 0 busy, the caller's deadline before node 2's late reply)
// releases by token every node it may hold, also node 2, whose grant it
// has not heard of, before it returns.
func TestFailedAcquireFreesUnheardGrant(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	_, probes := startNodesOn(t, rdbs)
	hook := &lateReply{d: 1500 * time.Millisecond}
	rdbs[2].AddHook(hook)
	r := newRedlock(t, rdbs)
	warmUp(t, r)
	other, err := dlock.New(probes[0])
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(bg)
	held, err := other.TryAcquire(bg, "unheard", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(bg)
	hook.armed.Store(true)
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	_, err = r.TryAcquire(ctx, "unheard", dlock.WithTTL(10*time.Second))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire: %v, want the caller's deadline", err)
	}
	failed := time.Now()
	if hook.held.Load() != 1 {
		t.Fatal("node 2's reply was not held back: the test proves nothing")
	}
	waitFor(t, "node 2's unheard grant to be released", func() bool {
		return probes[2].Exists(bg, "dlock:{unheard}").Val() == 0 && probes[1].Exists(bg, "dlock:{unheard}").Val() == 0
	})
	if d := time.Since(failed); d > 500*time.Millisecond {
		t.Fatalf("node 2 held the token %v after TryAcquire failed", d.Round(time.Millisecond))
	}
}

// TestErrorReplyAfterResendGivesGrantBack: a failed Redlock acquisition gives
// back a grant whose reply was lost, also when go-redis sent the command again
// and the copy got an error reply (READONLY here): that reply says nothing of
// the first send, which granted. Here nodes 0 and 1 are held by another lock,
// and node 2 (restarted empty) grants the failed attempt's token: that grant
// is given back, not left for its whole TTL.
func TestErrorReplyAfterResendGivesGrantBack(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	holder := newRedlock(t, rdbs)
	h, err := holder.TryAcquire(bg, "strand", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(bg)

	hook := &redistest.ReadOnlyOnResend{Admin: srvs[2].Client(t)}
	c2 := redis.NewClient(&redis.Options{Addr: srvs[2].Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c2.Close() })
	c2.AddHook(hook)
	// Nodes 0 and 1 answer late, so that node 2's reply is in before the
	// verdict (a node not heard from by then is given up anyway).
	var late []*lateReply
	clients := []redis.UniversalClient{nil, nil, c2}
	for i := range 2 {
		l := &lateReply{d: 300 * time.Millisecond}
		c := redis.NewClient(&redis.Options{Addr: srvs[i].Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		c.AddHook(l)
		late, clients[i] = append(late, l), c
	}
	contender := newRedlock(t, clients)
	warmUp(t, contender)

	key := "dlock:{strand}"
	rdbs[2].Del(bg, key) // node 2 restarted empty: free there
	hook.Armed.Store(true)
	for _, l := range late {
		l.armed.Store(true)
	}
	if _, err := contender.TryAcquire(bg, "strand", dlock.WithTTL(10*time.Second)); err == nil {
		t.Fatal("acquired a lock held on two of three nodes")
	} else {
		t.Logf("acquire: %v", err)
	}
	if hook.Armed.Load() {
		t.Fatal("the hook did not fire")
	}
	t.Logf("node 2's answer to the re-send: %v", hook.Err.Load())
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) && rdbs[2].Exists(bg, key).Val() == 1 {
		time.Sleep(20 * time.Millisecond)
	}
	if tok := rdbs[2].HGet(bg, key, "token").Val(); tok != "" {
		t.Fatalf("node 2 still holds the failed attempt's grant (token %q, holder %q) for %v more",
			tok, h.Token(), rdbs[2].PTTL(bg, key).Val())
	}
}

// TestReleaseReturnsOnQuorum (issue 17, item 7): with one node of three
// stopped, Release returns once the two others released, not when the
// stopped node's release times out; the rest goes on in the background,
// and Close waits for it, bounded by the release timeout.
func TestReleaseReturnsOnQuorum(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	_, probes := startNodesOn(t, rdbs)
	const timeout = 1500 * time.Millisecond
	r, err := redlock.New(rdbs, redlock.WithReleaseTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(bg)
	l, err := r.TryAcquire(bg, "slow", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every node in the lock", func() bool { return !slices.Contains(asLock(t, l).Fences(), 0) })
	pauseNode(t, srvs[2])
	start := time.Now()
	if err := l.Release(bg); err != nil {
		t.Fatalf("Release with 2 of 3 nodes answering: %v", err)
	}
	d := time.Since(start)
	t.Logf("Release with one node of three stopped: %v (release timeout %v)", d.Round(time.Microsecond), timeout)
	if d > 500*time.Millisecond {
		t.Fatalf("Release took %v with one node stopped (release timeout %v)", d.Round(time.Millisecond), timeout)
	}
	if n := exists(probes[:2], "dlock:{slow}"); n != 0 {
		t.Fatalf("Release returned with the lock on %d live nodes", n)
	}
	start = time.Now()
	if err := r.Close(bg); err != nil {
		t.Fatal(err)
	}
	d = time.Since(start)
	t.Logf("Close waiting for the release left on the stopped node: %v", d.Round(time.Millisecond))
	if d > timeout+500*time.Millisecond {
		t.Fatalf("Close took %v, past the release timeout of %v", d.Round(time.Millisecond), timeout)
	}
}

// TestBackgroundReleaseFinishes (issue 17, item 7): the release left to
// the background once a quorum released reaches the node that was stopped
// when it runs again within the release timeout.
func TestBackgroundReleaseFinishes(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	_, probes := startNodesOn(t, rdbs)
	r := newRedlock(t, rdbs, redlock.WithReleaseTimeout(3*time.Second))
	l, err := r.TryAcquire(bg, "slow", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every node in the lock", func() bool { return !slices.Contains(asLock(t, l).Fences(), 0) })
	pauseNode(t, srvs[2])
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	srvs[2].Resume()
	waitFor(t, "the stopped node's key to be released", func() bool {
		return probes[2].Exists(bg, "dlock:{slow}").Val() == 0
	})
}

// startNodesOn returns probe clients of the servers rdbs reach, without
// their hooks, closed at the end of the test.
func startNodesOn(t *testing.T, rdbs []redis.UniversalClient) ([]string, []redis.UniversalClient) {
	t.Helper()
	addrs := make([]string, len(rdbs))
	probes := make([]redis.UniversalClient, len(rdbs))
	for i, rdb := range rdbs {
		addrs[i] = rdb.(*redis.Client).Options().Addr
		p := redis.NewClient(&redis.Options{Addr: addrs[i], ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = p.Close() })
		probes[i] = p
	}
	return addrs, probes
}

// TestReleaseAnsweredAfterValidity: a Release sent while the lock was
// valid, whose answers come only after the nodes' leases ran out, is no
// "lost before the release". Torture (redlock-5) found the holder told
// ErrNotHeld as if its lock had been lost while it worked: two of the
// three nodes that granted were stopped from just before the Release until
// past the TTL, and answered "not ours" when they ran again. The error
// must say that the nodes answered after the validity ran out
// (ErrReleasedLate, beside ErrNotHeld), and a release answered "not ours"
// within the validity must not say so.
func TestReleaseAnsweredAfterValidity(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	_, probes := startNodesOn(t, rdbs)
	r := newRedlock(t, rdbs, redlock.WithReleaseTimeout(3*time.Second))
	const ttl = 300 * time.Millisecond
	l, err := r.TryAcquire(bg, "late", dlock.WithTTL(ttl), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every node in the lock", func() bool { return !slices.Contains(asLock(t, l).Fences(), 0) })
	pauseNode(t, srvs[1])
	pauseNode(t, srvs[2])
	go func() {
		time.Sleep(2 * ttl)
		srvs[1].Resume()
		srvs[2].Resume()
	}()
	start := time.Now()
	err = l.Release(bg)
	t.Logf("Release answered after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, redlock.ErrReleasedLate) {
		t.Fatalf("Release answered after the validity: %v, want ErrNotHeld and ErrReleasedLate", err)
	}
	if !errors.Is(context.Cause(l.Context()), dlock.ErrReleased) {
		t.Fatalf("cause %v, want ErrReleased: the context ended when Release began", context.Cause(l.Context()))
	}

	// Within the validity: keys gone from two nodes (as after a restart
	// empty) is a loss before the release, and says nothing of a validity.
	l, err = r.TryAcquire(bg, "early", dlock.WithTTL(10*time.Second), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every node in the lock", func() bool { return !slices.Contains(asLock(t, l).Fences(), 0) })
	for _, p := range probes[1:] {
		if err := p.Del(bg, "dlock:{early}").Err(); err != nil {
			t.Fatal(err)
		}
	}
	err = l.Release(bg)
	if !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, redlock.ErrReleasedLate) {
		t.Fatalf("Release of keys gone within the validity: %v, want ErrNotHeld without ErrReleasedLate", err)
	}
}

// TestReleaseNetworkFailureIsNotNotHeld: two nodes of three stopped when a
// lock held on all three is released. The nodes did not say "not ours":
// they did not answer. Release must not report dlock.ErrNotHeld (the
// lock was held until the call) but a failure matching ErrNoQuorum with the
// nodes' errors, and tell the observers ResultError, as a Client's Release
// does for a network failure.
func TestReleaseNetworkFailureIsNotNotHeld(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	obs := &recorder{}
	r := newRedlock(t, rdbs, redlock.WithObserver(obs), redlock.WithReleaseTimeout(300*time.Millisecond))
	dl, err := r.TryAcquire(bg, "netfail", dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l := asLock(t, dl)
	waitFor(t, "every node in the lock", func() bool { return !slices.Contains(l.Fences(), 0) })
	pauseNode(t, srvs[1])
	pauseNode(t, srvs[2])
	err = l.Release(bg)
	t.Logf("Release: %v", err)
	switch {
	case err == nil:
		t.Fatal("Release reported success with 2 of 3 nodes stopped")
	case errors.Is(err, dlock.ErrNotHeld):
		t.Errorf("Release with 2 of 3 nodes not answering reported ErrNotHeld: %v", err)
	case !errors.Is(err, redlock.ErrNoQuorum):
		t.Errorf("Release error %v does not match ErrNoQuorum", err)
	}
	_, _, _, n := obs.counts()
	if n != 1 {
		t.Fatalf("%d release events, want 1", n)
	}
	obs.mu.Lock()
	e := obs.releases[0]
	obs.mu.Unlock()
	if e.Result != observe.ResultError {
		t.Errorf("release event result %v, want %v", e.Result, observe.ResultError)
	}
	if err := l.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Release: %v, want ErrNotHeld", err)
	}
}

// stallAfterNotOurs is a go-redis hook on one node: the first holder's
// release (release script, kind '0') of key that the node answers 0 ("not
// ours") stops the node (SIGSTOP) right after that answer, for d. The
// release's give-up, its second call to the node, then waits for the node:
// a node stopped between its two answers, as the node-pause nemesis does.
type stallAfterNotOurs struct {
	srv   *redistest.Server
	key   string
	d     time.Duration
	fired atomic.Int32
}

func (h *stallAfterNotOurs) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *stallAfterNotOurs) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a := cmd.Args()
		if err == nil && len(a) == 15 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[3]) == h.key &&
			fmt.Sprint(a[10]) == "0" {
			if c, ok := cmd.(*redis.Cmd); ok {
				if n, _ := c.Int64(); n == 0 && h.fired.Add(1) == 1 {
					h.srv.Pause()
					time.AfterFunc(h.d, h.srv.Resume)
				}
			}
		}
		return err
	}
}

func (h *stallAfterNotOurs) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestNotOursWithinValidityIsNoLateLoss: whether a release was answered too
// late (ErrReleasedLate) is decided by when the nodes said "not ours", not by
// when the verdict arrives. Here the key is gone from two nodes of three well
// within the validity (a majority loss during the hold: restarts, or a bug),
// and both answer the holder's release "not ours" within the validity, but
// one of them stops between that answer and the give-up that releaseNodes
// sends before reporting it, so the verdict lands after the validity. Release
// does not say that the validity ran out while it waited: the torture
// worker's finalOf would then record Final "expired", and the checker's
// "Release said not held, yet the lease was believed valid" would miss a loss
// that the nodes reported inside the validity.
func TestNotOursWithinValidityIsNoLateLoss(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	_, probes := startNodesOn(t, rdbs)
	const ttl = 500 * time.Millisecond
	h := &stallAfterNotOurs{srv: srvs[2], key: "dlock:{gone}", d: 2 * ttl}
	rdbs[2].AddHook(h)
	t.Cleanup(srvs[2].Resume)
	r := newRedlock(t, rdbs, redlock.WithReleaseTimeout(3*time.Second))
	warmUp(t, r)

	l, acquired, left := lostOnTwo(t, r, probes, "gone", ttl)
	called := time.Since(acquired)
	err := l.Release(bg)
	t.Logf("Release called %v after the acquisition with %v of validity left, answered %v after the acquisition: %v",
		called.Round(time.Millisecond), left.Round(time.Millisecond), time.Since(acquired).Round(time.Millisecond), err)
	if h.fired.Load() != 1 {
		t.Fatalf("the stall fired %d times, want 1", h.fired.Load())
	}
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release: %v, want ErrNotHeld (gone on two nodes of three)", err)
	}
	if errors.Is(err, redlock.ErrReleasedLate) {
		t.Fatalf("Release: %v: both 'not ours' answers came %v or more before the validity ended, yet the error says the lease ran out while the release waited (finalOf then records the hold as expired)", err, left.Round(time.Millisecond))
	}
}

// TestInTimeNotOursBehindVerdictIsNoLateLoss: a node's "not ours" within the
// validity counts as in time even when releaseNodes' verdict comes before the
// node's reply does (the reply follows the give-up sent after its "not
// ours"). Here the key is gone from nodes 1 and 2 well within the validity (a
// majority loss during the hold). Both answer the holder's release "not ours"
// within the validity; node 2 then stops (between that answer and its
// give-up), and node 0, stopped from just before the Release until past the
// TTL, answers "not ours" late. Its reply makes the verdict (2 of 3 failed)
// while node 2's in-time answer is still unread: two in-time "not ours" of
// three, a majority, so Release does not say ErrReleasedLate, and the torture
// worker's finalOf does not record Final "expired". README: a majority that
// said "not ours" within the validity is a loss, also when a node stops
// before the verdict.
func TestInTimeNotOursBehindVerdictIsNoLateLoss(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	_, probes := startNodesOn(t, rdbs)
	const ttl = 500 * time.Millisecond
	h := &stallAfterNotOurs{srv: srvs[2], key: "dlock:{hidden}", d: 3 * ttl}
	rdbs[2].AddHook(h)
	r := newRedlock(t, rdbs, redlock.WithReleaseTimeout(4*time.Second))
	t.Cleanup(srvs[2].Resume)
	t.Cleanup(srvs[0].Resume)
	warmUp(t, r)

	l, acquired, left := lostOnTwo(t, r, probes, "hidden", ttl)
	// Node 0 stopped from just before the Release until past the TTL: its
	// key expires meanwhile, and it answers "not ours" late.
	srvs[0].Pause()
	time.AfterFunc(time.Until(acquired.Add(ttl+200*time.Millisecond)), srvs[0].Resume)
	called := time.Since(acquired)
	err := l.Release(bg)
	t.Logf("Release called %v after the acquisition with %v of validity left, answered %v after it: %v",
		called.Round(time.Millisecond), left.Round(time.Millisecond), time.Since(acquired).Round(time.Millisecond), err)
	if h.fired.Load() != 1 {
		t.Fatalf("the stall fired %d times, want 1", h.fired.Load())
	}
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release: %v, want ErrNotHeld (gone on all three nodes)", err)
	}
	if errors.Is(err, redlock.ErrReleasedLate) {
		t.Fatalf("Release: %v: nodes 1 and 2, a majority, said 'not ours' with %v of validity left, yet the error says they answered after it (finalOf then records the hold as expired)", err, left.Round(time.Millisecond))
	}
}

// slowFirstGiveUp is a go-redis hook that holds the first give-up (release
// script, kind '1') of key back for d before sending it: the loss's
// background give-up, slowed on the network, reaches the node after the
// holder's Release.
type slowFirstGiveUp struct {
	key   string
	d     time.Duration
	fired atomic.Int32
}

func (h *slowFirstGiveUp) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowFirstGiveUp) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if len(a) == 15 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[3]) == h.key &&
			fmt.Sprint(a[10]) == "1" && h.fired.Add(1) == 1 {
			time.Sleep(h.d)
		}
		return next(ctx, cmd)
	}
}

func (h *slowFirstGiveUp) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestReleaseAfterTakeoverSaysLost: a lock that a Refresh found gone on a
// majority (context cause ErrLockLost, "gone or taken over") is released at
// once, within its validity. Release says "lost before the release" and wraps
// the cause (ErrLockLost) whatever the nodes answer: also when the loss's own
// background give-ups (records '1') are slower than the Release, so that the
// nodes answer "not ours", not 1 or 2, and the validity has not run out.
func TestReleaseAfterTakeoverSaysLost(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	_, probes := startNodesOn(t, rdbs)
	for _, rdb := range rdbs[1:] {
		rdb.AddHook(&slowFirstGiveUp{key: "dlock:{taken}", d: 300 * time.Millisecond})
	}
	r := newRedlock(t, rdbs)
	warmUp(t, r)
	l, err := r.TryAcquire(bg, "taken", dlock.WithTTL(5*time.Second), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every node in the lock", func() bool { return !slices.Contains(asLock(t, l).Fences(), 0) })
	for _, p := range probes[1:] {
		if err := p.Del(bg, "dlock:{taken}").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Refresh(bg, 5*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Refresh: %v, want ErrNotHeld", err)
	}
	cause := context.Cause(l.Context())
	if !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	err = l.Release(bg)
	t.Logf("cause %v; Release: %v", cause, err)
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release: %v, want ErrNotHeld", err)
	}
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Release after a loss: %v, want it to match ErrLockLost (lost before the release), as it does when the give-ups land first", err)
	}
}

// lostOnTwo acquires name on three nodes WithoutRenewal and deletes its key
// on nodes 1 and 2 (a majority loss, as after restarts), well within the
// validity; it returns the lock, when it was acquired and the validity left.
func lostOnTwo(t *testing.T, r *redlock.Redlock, probes []redis.UniversalClient, name string, ttl time.Duration) (dlock.Lock, time.Time, time.Duration) {
	t.Helper()
	l, err := r.TryAcquire(bg, name, dlock.WithTTL(ttl), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	waitFor(t, "every node in the lock", func() bool { return !slices.Contains(asLock(t, l).Fences(), 0) })
	for _, p := range probes[1:] {
		if err := p.Del(bg, "dlock:{"+name+"}").Err(); err != nil {
			t.Fatal(err)
		}
	}
	left, err := l.TTL(bg)
	if err != nil || left < ttl/2 {
		t.Fatalf("validity left before Release: %v, %v; want well within it", left, err)
	}
	return l, acquired, left
}
