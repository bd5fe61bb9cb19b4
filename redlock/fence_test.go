package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
)

// someNodeLargest is the rule Fences documented before issue 17: a write is
// refused unless some node's fence is at least the largest the resource saw
// from that node. Kept here to show the interleaving below bites it.
func someNodeLargest(seen, fences []int64) bool {
	for i, f := range fences {
		if f > 0 && (i >= len(seen) || f >= seen[i]) {
			return true
		}
	}
	return false
}

// TestFenceSetRefusesStaleHolder (issue 17, item 2), with hand-made fences:
// holder 1 granted on {A, B}, holder 2 on {B, C}; once holder 2 wrote, the
// stale holder 1 is refused (it is below on B, though still the largest on
// A), and holder 2 may write again.
func TestFenceSetRefusesStaleHolder(t *testing.T) {
	h1 := []int64{1001, 11, 0}
	h2 := []int64{0, 12, 12}
	var seen redlock.FenceSet
	seen, err := seen.Admit(h1)
	if err != nil {
		t.Fatalf("holder 1's first write: %v", err)
	}
	seen, err = seen.Admit(h2)
	if err != nil {
		t.Fatalf("holder 2's write: %v", err)
	}
	if !someNodeLargest(seen, h1) {
		t.Fatal("the old rule refuses the stale holder here: the test proves nothing")
	}
	after, err := seen.Admit(h1)
	if !errors.Is(err, redlock.ErrStaleFence) {
		t.Fatalf("stale holder 1 after holder 2 wrote: %v, want ErrStaleFence", err)
	}
	if !slices.Equal(after, seen) {
		t.Fatalf("a refused write changed the set: %v, was %v", after, seen)
	}
	if _, err := seen.Admit(h2); err != nil {
		t.Fatalf("holder 2 writing again: %v", err)
	}
	// Holder 3 on {A, C}: above holder 1 on A and holder 2 on C.
	if _, err := seen.Admit([]int64{1002, 0, 13}); err != nil {
		t.Fatalf("holder 3: %v", err)
	}

	for _, c := range []struct {
		name   string
		seen   redlock.FenceSet
		fences []int64
	}{
		{"a minority of nodes", nil, []int64{1001, 0, 0}},
		{"none", nil, []int64{0, 0, 0}},
		{"part of a stale holder's fences", redlock.FenceSet{0, 12, 12}, []int64{1001, 0, 0}},
		{"another number of nodes", redlock.FenceSet{1, 2, 3}, []int64{1, 2, 3, 4, 5}},
		{"two of four nodes", nil, []int64{5, 5, 0, 0}},
	} {
		if _, err := c.seen.Admit(c.fences); !errors.Is(err, redlock.ErrStaleFence) {
			t.Errorf("%s: Admit(%v) on %v: %v, want ErrStaleFence", c.name, c.fences, c.seen, err)
		}
	}
}

// TestFenceSetAdmitRefusesEdgeCases: Admit refuses, with ErrStaleFence,
// fences that are not a lock's, on an empty set too: none, or granted by
// fewer than a quorum of the nodes (0 or -1 for the others); and once the set
// has accepted [10 20 0], fences of another number of nodes, and fences below
// the set's on a node that granted.
func TestFenceSetAdmitRefusesEdgeCases(t *testing.T) {
	var s redlock.FenceSet
	for _, f := range [][]int64{nil, {}, {0, 0, 0}, {-1, -1, 5}, {5, 0, 0}, {5, -1, 0}} {
		if _, err := s.Admit(f); !errors.Is(err, redlock.ErrStaleFence) {
			t.Errorf("Admit(%v) on empty set: %v, want ErrStaleFence", f, err)
		}
	}
	s, err := s.Admit([]int64{10, 20, 0})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range [][]int64{{10}, {10, 20}, {9, 20, 30}, {0, 19, 30}, {10, -1, 0}, {10, 20, 0, 0, 0}} {
		if _, err := s.Admit(f); !errors.Is(err, redlock.ErrStaleFence) {
			t.Errorf("Admit(%v) after [10 20 0]: %v, want ErrStaleFence", f, err)
		}
	}
	// Weakness, not a safety hole: the first write fixes the node count, so
	// a first writer with a 1-node slice locks every real holder out.
	var d redlock.FenceSet
	d, err = d.Admit([]int64{7})
	if err == nil {
		if _, err := d.Admit([]int64{10, 20, 30}); err != nil {
			t.Logf("note: first write [7] admitted; a real 3-node holder is then refused: %v", err)
		}
	}
}

// TestFenceSetRealRun: the same interleaving on three redis-servers, node
// A's fence counter set 10s ahead, as a node whose clock runs fast would
// hand out: a FenceSet refuses the stale holder 1.
func TestFenceSetRealRun(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs)
	const name = "fenced"
	ahead := time.Now().Add(10 * time.Second).UnixMicro()
	if err := rdbs[0].Set(bg, "dlock:{"+name+"}:fence", strconv.FormatInt(ahead, 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	// block holds name on node i alone, with a single-node Client.
	block := func(i int) dlock.Lock {
		t.Helper()
		c, err := dlock.New(rdbs[i])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(bg) })
		l, err := c.TryAcquire(bg, name, dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	onC := block(2)
	h1, err := r.TryAcquire(bg, name, dlock.WithTTL(500*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	f1 := asLock(t, h1).Fences()
	if f1[0] == 0 || f1[1] == 0 || f1[2] != 0 {
		t.Fatalf("holder 1's fences %v, want nodes A and B", f1)
	}
	var seen redlock.FenceSet
	if seen, err = seen.Admit(f1); err != nil {
		t.Fatalf("holder 1 writing while it holds the lock: %v", err)
	}
	// Holder 1 goes stale: its lease runs out unnoticed (its fences are
	// all the resource will see of it). Then holder 2 takes {B, C}.
	<-h1.Context().Done()
	waitFor(t, "holder 1's keys to expire", func() bool { return exists(rdbs[:2], "dlock:{"+name+"}") == 0 })
	if err := onC.Release(bg); err != nil {
		t.Fatal(err)
	}
	block(0)
	h2, err := r.TryAcquire(bg, name, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Release(bg)
	f2 := asLock(t, h2).Fences()
	if f2[0] != 0 || f2[1] <= f1[1] || f2[2] == 0 {
		t.Fatalf("holder 2's fences %v after holder 1's %v, want nodes B (above) and C", f2, f1)
	}
	if seen, err = seen.Admit(f2); err != nil {
		t.Fatalf("holder 2's write: %v", err)
	}
	if _, err := seen.Admit(f1); !errors.Is(err, redlock.ErrStaleFence) {
		t.Fatalf("stale holder 1 (%v) after holder 2 (%v) wrote: %v, want ErrStaleFence", f1, f2, err)
	}
	// What the FenceSet saves us from, on these real fences.
	if !someNodeLargest(seen, f1) {
		t.Error("the old per-node rule refuses holder 1 here: the run is not the issue's interleaving")
	}
}

// TestFenceGrowsAcrossQuorums: Fence, the one number dlock.Lock's contract
// says grows with every acquisition of the name, grows across holders whose
// quorums differ, even when the node that gave a holder's largest fence runs
// ahead (its counter set 10s ahead, as a fast clock would make it) and is
// not in the next quorum: holders on {A, B}, then {B, C}, then {A, C}.
func TestFenceGrowsAcrossQuorums(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs)
	const name = "grows"
	ahead := time.Now().Add(10 * time.Second).UnixMicro()
	if err := rdbs[0].Set(bg, "dlock:{"+name+"}:fence", strconv.FormatInt(ahead, 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	var last int64
	for round, out := range []int{2, 0, 1} { // the node kept out of each quorum
		c, err := dlock.New(rdbs[out])
		if err != nil {
			t.Fatal(err)
		}
		blocker, err := c.TryAcquire(bg, name, dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		l, err := r.TryAcquire(bg, name, dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if f := asLock(t, l).Fences(); f[out] != 0 {
			t.Fatalf("round %d: fences %v, want node %d out", round, f, out)
		}
		if f := l.Fence(); f <= last {
			t.Fatalf("round %d (fences %v): Fence %d after %d: it went back", round, asLock(t, l).Fences(), f, last)
		}
		last = l.Fence()
		if err := l.Release(bg); err != nil {
			t.Fatal(err)
		}
		if err := blocker.Release(bg); err != nil {
			t.Fatal(err)
		}
		_ = c.Close(bg)
	}
}

// A resource guarded by a Redlock keeps a FenceSet beside its data and admits
// a write only with the writer's Fences: the stale holder is refused.
func ExampleFenceSet() {
	var seen redlock.FenceSet // kept with the resource, updated with each write

	holder1 := []int64{1001, 11, 0} // granted on nodes A and B
	holder2 := []int64{0, 12, 12}   // later, on B and C, after holder 1's lease ran out

	seen, _ = seen.Admit(holder1)
	seen, _ = seen.Admit(holder2)
	_, err := seen.Admit(holder1) // holder 1 paused, wakes up and writes
	fmt.Println(errors.Is(err, redlock.ErrStaleFence))
	fmt.Println(err)
	fmt.Println(seen)
	// Output:
	// true
	// redlock: stale fence: node 1's fence 11 is below 12, accepted from a later holder
	// [1001 12 12]
}

// failRaise is a go-redis hook that fails the fence write-back (a script
// call with 2 keys and 3 arguments: raiseScript) without sending it, as a
// node lost between its grant and the second round would.
type failRaise struct{ counter }

func (h *failRaise) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if len(a) == 8 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[2]) == "2" {
			h.n.Add(1)
			err := errors.New("injected: node lost before the fence write-back")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// TestFenceWriteBackFailsAcquisition: when the second round cannot write the
// fence to a quorum, the acquisition fails with ErrNoQuorum and gives back
// every grant, instead of handing out a Fence the next holder may not
// exceed.
func TestFenceWriteBackFailsAcquisition(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	const name = "writeback"
	// Node A runs ahead (its fence is the largest), node C is busy: the
	// fence must be written to node B, whose client fails the write.
	ahead := time.Now().Add(10 * time.Second).UnixMicro()
	if err := rdbs[0].Set(bg, "dlock:{"+name+"}:fence", strconv.FormatInt(ahead, 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(rdbs[2])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(bg)
	if _, err := c.TryAcquire(bg, name, dlock.WithTTL(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	hook := &failRaise{}
	rdbs[1].AddHook(hook)
	r := newRedlock(t, rdbs)
	_, err = r.TryAcquire(bg, name, dlock.WithTTL(10*time.Second))
	if !errors.Is(err, redlock.ErrNoQuorum) {
		t.Fatalf("TryAcquire with the fence write-back failing: %v, want ErrNoQuorum", err)
	}
	if hook.n.Load() == 0 {
		t.Fatal("no fence write-back was tried on node B: the test proves nothing")
	}
	if n := exists(rdbs[:2], "dlock:{"+name+"}"); n != 0 {
		t.Fatalf("grants left on %d nodes after the failed acquisition", n)
	}
}

// slowRaise delays the fence write-back (2 keys) until ctx ends or d passes.
type slowRaise struct {
	counter
	d time.Duration
}

func (h *slowRaise) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// evalsha only: go-redis follows a NOSCRIPT with an eval, which
		// must not be delayed a second time.
		if a := cmd.Args(); len(a) == 8 && a[0] == "evalsha" && fmt.Sprint(a[2]) == "2" {
			h.n.Add(1)
			select {
			case <-time.After(h.d):
			case <-ctx.Done():
			}
		}
		return next(ctx, cmd)
	}
}

// TestSlowWriteBackKeepsHealthyLock: the fence write-back alone (the
// acquisition's second round, 900ms late on node B) eats most of the
// validity. The validity handed out is dated from the first round's send, so
// it ends before the keys do; less than ttl/3 of it is left, and the first
// renewal, due before the deadline, keeps the lock, every node healthy.
func TestSlowWriteBackKeepsHealthyLock(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	const name = "slowraise"
	const ttl = 1500 * time.Millisecond
	ahead := time.Now().Add(10 * time.Second).UnixMicro()
	if err := rdbs[0].Set(bg, "dlock:{"+name+"}:fence", strconv.FormatInt(ahead, 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(rdbs[2])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(bg)
	if _, err := c.TryAcquire(bg, name, dlock.WithTTL(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	rdbs[1].AddHook(&slowRaise{d: 900 * time.Millisecond})
	r := newRedlock(t, rdbs)
	l, err := r.TryAcquire(bg, name, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	left, _ := l.TTL(bg)
	for i := range 2 {
		if p := rdbs[i].PTTL(bg, "dlock:{"+name+"}").Val(); p < left {
			t.Errorf("validity %v outlives node %d's key (%v): the write-back is not accounted", left, i, p)
		}
	}
	t.Logf("validity left %v, first renewal due in %v", left, ttl/3)
	select {
	case <-l.Context().Done():
		t.Fatalf("healthy lock lost before its first renewal: %v", context.Cause(l.Context()))
	case <-time.After(ttl):
	}
	_ = l.Release(bg)
}
