package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/observe"
	"github.com/dlock-go/dlock/redlock"
)

// TestObserverEvents: the observers of a Redlock get one event per
// acquisition, renewal, loss and release of its locks, with the typed
// results a Client reports.
func TestObserverEvents(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	obs := &recorder{}
	r := newRedlock(t, rdbs, redlock.WithObserver(obs), redlock.WithObserver(nil))
	other := newRedlock(t, rdbs)

	l, err := r.Acquire(bg, "obs", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if e := obs.lastAcquire(t); e.Name != "obs" || e.Result != observe.ResultAcquired || e.Fence != l.Fence() || e.Err != nil || e.Wait <= 0 {
		t.Fatalf("acquire event %+v, lock fence %d", e, l.Fence())
	}
	if _, err := r.TryAcquire(bg, "obs"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("busy: %v", err)
	}
	if e := obs.lastAcquire(t); e.Result != observe.ResultBusy || !errors.Is(e.Err, dlock.ErrNotObtained) {
		t.Fatalf("busy event %+v", e)
	}
	if _, err := r.TryAcquire(bg, ""); !errors.Is(err, dlock.ErrInvalidName) {
		t.Fatalf("empty name: %v", err)
	}
	if e := obs.lastAcquire(t); e.Result != observe.ResultError {
		t.Fatalf("invalid name event %+v", e)
	}

	// Renewed at a third of the TTL.
	waitFor(t, "two renewals", func() bool { _, n, _, _ := obs.counts(); return n >= 2 })
	obs.mu.Lock()
	for _, e := range obs.renews {
		if e.Name != "obs" || e.Result != observe.ResultOK || e.Err != nil {
			t.Errorf("renew event %+v", e)
		}
	}
	obs.mu.Unlock()

	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatal(err)
	}
	obs.mu.Lock()
	if len(obs.releases) != 1 || obs.releases[0].Result != observe.ResultOK || obs.releases[0].Held <= 0 || obs.releases[0].AfterLoss {
		t.Errorf("release events %+v, want one ok", obs.releases)
	}
	obs.mu.Unlock()
	if _, _, losts, _ := obs.counts(); losts != 0 {
		t.Fatalf("%d lost events for a released lock", losts)
	}

	t.Run("taken over", func(t *testing.T) {
		l, err := r.Acquire(bg, "taken", dlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "all nodes in the lock", func() bool { return exists(rdbs, "dlock:{taken}") == 3 })
		// Another holder on a majority: the next renewal finds it gone.
		// The keys go one node at a time, and a renewal that runs between
		// the two deletes takes the first node back (extend-or-lock, as
		// after a restart): then it is tried again, a few times.
		var o dlock.Lock
		for try := 0; ; try++ {
			for _, rdb := range rdbs[:2] {
				rdb.Del(bg, "dlock:{taken}")
			}
			if o, err = other.TryAcquire(bg, "taken", dlock.WithTTL(5*time.Second)); err == nil {
				break
			}
			if try == 4 {
				t.Fatalf("the other holder, 5 tries: %v", err)
			}
		}
		defer o.Release(bg)
		select {
		case <-l.Context().Done():
		case <-time.After(2 * time.Second):
			t.Fatal("the lock's context lives on 2s after a majority lost it")
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLockLost) || !errors.Is(cause, dlock.ErrNotHeld) {
			t.Fatalf("cause %v", cause)
		}
		obs.mu.Lock()
		losts, lastRenew := obs.losts, obs.renews[len(obs.renews)-1]
		obs.mu.Unlock()
		if len(losts) != 1 || losts[0].Name != "taken" || losts[0].Reason != observe.ReasonTakenOver || losts[0].Held <= 0 ||
			!errors.Is(losts[0].Cause, dlock.ErrLockLost) {
			t.Fatalf("lost events %+v, want one taken over", losts)
		}
		if lastRenew.Name != "taken" || lastRenew.Result != observe.ResultLost {
			t.Fatalf("last renew event %+v, want lost", lastRenew)
		}
		// Release after the loss: the third node still had it.
		if err := l.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("release after the loss: %v", err)
		}
		obs.mu.Lock()
		e := obs.releases[len(obs.releases)-1]
		obs.mu.Unlock()
		if e.Name != "taken" || e.Result != observe.ResultNotHeld || !e.AfterLoss || !errors.Is(e.Err, dlock.ErrNotHeld) {
			t.Fatalf("release event %+v, want not held after loss", e)
		}
		// Our token, that is: once it is gone from node 2, the other
		// holder's renewal may take the node (extend-or-lock). Node 2 is
		// released in the background, by the loss's give-up or by this
		// Release's call there, which returns at its verdict (two "not
		// ours"), so the test waits for it. The token's record (":r:" +
		// token) tells a release that ran there from a key that merely
		// expired meanwhile (TTL 1 s): with both calls to node 2 made
		// no-ops, this wait times out.
		token := l.(*redlock.Lock).Token()
		waitFor(t, "the release after the loss on node 2", func() bool {
			return rdbs[2].Exists(bg, "dlock:{taken}:r:"+token).Val() == 1 &&
				rdbs[2].HGet(bg, "dlock:{taken}", "token").Val() != token
		})
	})

	t.Run("expired", func(t *testing.T) {
		start := time.Now()
		l, err := r.TryAcquire(bg, "fixed", dlock.WithTTL(200*time.Millisecond), dlock.WithoutRenewal())
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Context().Done():
		case <-time.After(2 * time.Second):
			t.Fatal("context of a lock without renewal lives on 2s after its 200ms TTL")
		}
		// Ended before the lease could run out on a node, never after.
		if d := time.Since(start); d > 200*time.Millisecond+50*time.Millisecond {
			t.Logf("ended %v after the acquisition began (TTL 200ms): late by scheduling?", d)
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLockLost) {
			t.Fatalf("cause %v", cause)
		}
		obs.mu.Lock()
		e := obs.losts[len(obs.losts)-1]
		obs.mu.Unlock()
		if e.Name != "fixed" || e.Reason != observe.ReasonExpired {
			t.Fatalf("lost event %+v, want expired", e)
		}
		_ = l.Release(bg)
	})
}
