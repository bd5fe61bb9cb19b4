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
	"github.com/dlock-go/dlock/redlock"
)

// lateReply is a go-redis hook that, once armed, lets the next acquire
// script (a script call with 5 keys and 8 arguments; the release script
// has 7) run on the node and holds its reply back for d: a grant the
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
		if err == nil && len(a) == 16 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[2]) == "5" &&
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
