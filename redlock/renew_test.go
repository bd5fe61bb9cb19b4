package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
		a := cmd.Args()
		if h.on.Load() && len(a) > 2 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[2]) == "1" {
			h.failed.Add(1)
			err := errors.New("injected: refresh failed")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *failRefresh) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
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
