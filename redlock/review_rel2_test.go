package redlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
)

// TestInTimeNotOursBehindVerdictIsNoLateLoss (review of 8cad6c3): the
// not-ours answers within the validity are counted only from the replies
// releaseNodes reads before its verdict, and a node's reply is sent only
// after the give-up that follows its "not ours". Here the key is gone from
// nodes 1 and 2 well within the validity (a majority loss during the hold).
// Both answer the holder's release "not ours" within the validity; node 2
// then stops (between that answer and its give-up), and node 0, stopped
// from just before the Release until past the TTL, answers "not ours" late.
// Its reply makes the verdict (2 of 3 failed) while node 2's in-time answer
// is still unread: one in-time "not ours" of three, so Release says
// ErrReleasedLate, and the torture worker's finalOf records Final
// "expired", hiding a loss a majority of nodes reported within the
// validity — what README says cannot happen ("a majority that said 'not
// ours' within the validity is a loss, whenever the verdict comes").
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
