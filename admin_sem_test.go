package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/inspect"
)

// TestSemaphoreListAndInspect: permits and waiters are visible, with their
// owners, beside exclusive locks; a permit can be force-unlocked by its
// token, and the freed permit goes to the waiter.
func TestSemaphoreListAndInspect(t *testing.T) {
	_, _, srv := setup(t)
	owners := []string{"api-1", "api-2", "api-3"}
	var cs []*dlock.Client
	for _, o := range owners {
		cs = append(cs, newLocker(t, srv.Client(t), dlock.WithDefaultOwner(o)))
	}
	a := mustAcquire(t, cs[0], "conns", dlock.WithPermits(2), dlock.WithTTL(5*time.Second))
	b := mustAcquire(t, cs[1], "conns", dlock.WithPermits(2), dlock.WithTTL(3*time.Second))
	x := mustAcquire(t, cs[0], "excl", dlock.WithTTL(5*time.Second))
	got := make(chan dlock.Lock, 1)
	go func() {
		l, err := cs[2].Acquire(bg, "conns", dlock.WithPermits(2), dlock.WithWait(5*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	var info inspect.LockInfo
	waitFor(t, "waiter visible", func() bool {
		var err error
		info, err = cs[0].Inspect(bg, "conns")
		return err == nil && len(info.Queue) == 1
	})
	if info.Kind != dlock.KindSemaphore || info.Permits != 2 || len(info.Holders) != 2 || info.Waiters != 1 || info.Key != "dlock:{conns}:sem" {
		t.Fatalf("Inspect = %+v", info)
	}
	// The first to come back first: b's shorter lease.
	h0, h1 := info.Holders[0], info.Holders[1]
	if h0.Owner != "api-2" || h0.Token != b.Token() || h0.Fence != b.Fence() || h0.Lease != 3*time.Second ||
		h0.TTL <= 2*time.Second || h0.TTL > 3*time.Second || h1.Owner != "api-1" || time.Since(h1.Since) > time.Minute {
		t.Fatalf("permits = %+v", info.Holders)
	}
	if w := info.Queue[0]; w.Owner != "api-3" || w.Alive <= 0 || w.Token == "" {
		t.Fatalf("waiter = %+v", w)
	}
	if info.TTL != h0.TTL || info.Fence != max(a.Fence(), b.Fence()) {
		t.Fatalf("summary TTL %v fence %d, want the first permit's TTL %v and the latest fence", info.TTL, info.Fence, h0.TTL)
	}

	// An exclusive lock's waiters show their owners too.
	xw := make(chan error, 1)
	go func() {
		_, err := cs[1].Acquire(bg, "excl", dlock.WithWait(400*time.Millisecond))
		xw <- err
	}()
	waitFor(t, "exclusive waiter visible", func() bool {
		i, err := cs[0].Inspect(bg, "excl")
		return err == nil && len(i.Queue) == 1 && i.Queue[0].Owner == "api-2" && i.Kind == dlock.KindExclusive
	})
	if err := <-xw; !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("exclusive waiter: %v", err)
	}

	all, err := cs[0].List(bg, "*", 0)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, i := range all {
		kinds[i.Name] = i.Kind
	}
	if len(all) != 2 || kinds["conns"] != dlock.KindSemaphore || kinds["excl"] != dlock.KindExclusive {
		t.Fatalf("List = %+v", all)
	}

	// Force-unlock b's permit: the waiter gets it; b learns at its renewal.
	if _, err := cs[0].ForceUnlock(bg, "conns", b.Token()); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if _, err := cs[0].ForceUnlock(bg, "conns", b.Token()); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second force unlock of one permit: %v, want ErrNotHeld", err)
	}
	if err := b.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("the force-unlocked holder's release: %v, want ErrNotHeld", err)
	}
	_ = l.Release(bg)
	_ = a.Release(bg)
	_ = x.Release(bg)
	if _, err := cs[0].Inspect(bg, "conns"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Inspect after every permit went back: %v", err)
	}
}
