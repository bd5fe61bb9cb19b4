package redlock_test

// Found by the adversarial review of extend-or-lock: each test states the
// hole it forced (the first failed before renewals asked the nodes that do
// not hold the lock too).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
)

// TestTakenOverOnBareQuorumNotSeenGone: the lock holds nodes 0 and 1 only
// (node 2 was stopped at acquisition, and its give-up record keeps it from being re-taken for 30 s). An
// operator force-unlocks node 1 and a second Redlock takes nodes 1 and 2: it
// holds a quorum. The holder's renewals then see node 0 confirm and node 1
// "not ours", and node 2 is not asked (fence 0): lacks=1 is not > n-quorum,
// so each renewal reports ErrNoQuorum (ResultError), retried, never "gone";
// the holder believes until its validity runs out (up to TTL-margin), not
// until its next renewal, as ForceUnlock's doc promises.
func TestTakenOverOnBareQuorumNotSeenGone(t *testing.T) {
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
