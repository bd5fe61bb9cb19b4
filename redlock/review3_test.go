package redlock_test

// Adversarial review of extend-or-lock (branch review-rl2). Each test states
// the hole it forces.

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
)

// TestForcedUnlockNodeByNodeIsUndone: an operator force-unlocks the holder's
// token on a majority of the nodes (2 of 3), one node at a time with
// dlock.Client.ForceUnlock (a Redlock has no ForceUnlock; its nodes are
// independent primaries). lock.go's refresh doc says a re-taken node "never
// makes a quorum, which would ... undo a forced unlock". But the re-take
// joins Fences, so the NEXT renewal asks that node and counts it: after the
// second unlock, the renewal is confirmed by the re-taken node 0 and node 2,
// and node 1 is taken again too. The holder never learns; the lock is back
// on every node.
func TestForcedUnlockNodeByNodeIsUndone(t *testing.T) {
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
	// A contender is refused all the same.
	r2 := newRedlock(t, rdbs)
	if _, err := r2.TryAcquire(bg, "forced", dlock.WithTTL(ttl)); err == nil {
		t.Log("a contender got the lock")
	} else {
		t.Logf("contender: %v", err)
	}
}

// TestStalledAtAcquireNeverRetaken: node 2 is stopped (SIGSTOP) while the
// lock is acquired on nodes 0 and 1. Its attempt times out at the validity's
// end and giveBack gives the token up there (a 30s record). Once node 2 is
// back, every re-take sends the acquire script with the lock's own token,
// which the record refuses ({0,-3,0}): the lock runs on a bare quorum for
// 30s, and one clock jump (PEXPIRE on node 0) then loses it, though nodes 0
// and 2 were free to take again. Sometimes a re-take sent at the resume runs
// before the queued give-up and joins: Fences then names node 2, which the
// give-up emptied a moment later.
func TestStalledAtAcquireNeverRetaken(t *testing.T) {
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
