package dlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

func TestListAndInspect(t *testing.T) {
	c, rdb, _ := setup(t, dlock.WithOwner("api-1"))
	for _, name := range []string{"order:1", "order:2", "job:nightly", "odd}name"} {
		mustAcquire(t, c, name, dlock.WithTTL(5*time.Second))
	}
	rdb.Set(bg, "dlock:{not-a-lock}", "x", 0) // another type under the prefix
	rdb.Set(bg, "unrelated", "x", 0)

	all, err := c.List(bg, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range all {
		names = append(names, i.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"job:nightly", "odd}name", "order:1", "order:2"}) {
		t.Fatalf("List = %v", names)
	}
	orders, err := c.List(bg, "order:*", 0)
	if err != nil || len(orders) != 2 {
		t.Fatalf("List(order:*) = %v, %v", orders, err)
	}
	if some, err := c.List(bg, "*", 1); err != nil || len(some) != 1 {
		t.Fatalf("List with limit 1 = %d locks, %v", len(some), err)
	}

	info, err := c.Inspect(bg, "order:1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Owner != "api-1" || info.Lease != 5*time.Second || info.TTL <= 4*time.Second ||
		info.Fence <= 0 || len(info.TokenPrefix()) != 8 || info.Age(time.Now()) > time.Minute || info.Key != "dlock:{order:1}" {
		t.Fatalf("Inspect = %+v", info)
	}
	if _, err := c.Inspect(bg, "order:99"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Inspect of a free lock: %v, want ErrNotHeld", err)
	}
	if _, err := c.Inspect(bg, "not-a-lock"); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Inspect of a string key: %v, want ErrWrongType", err)
	}
}

func TestForceUnlock(t *testing.T) {
	c, rdb, srv := setup(t)
	holder := mustAcquire(t, c, "stuck", dlock.WithTTL(900*time.Millisecond))
	info, err := c.Inspect(bg, "stuck")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceUnlock(bg, "stuck", "not-the-token"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("ForceUnlock with a stale token: %v, want ErrNotHeld", err)
	}
	if rdb.Exists(bg, "dlock:{stuck}").Val() != 1 {
		t.Fatal("ForceUnlock with a stale token deleted the lock")
	}

	waiter := newClients(t, srv, 1)[0]
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(bg, "stuck", dlock.WithWait(10*time.Second))
		if err == nil && !strings.HasPrefix(l.Token(), "") {
			err = errors.New("no token")
		}
		got <- err
	}()
	waitFor(t, "waiter queued", func() bool { return rdb.ZCard(bg, "dlock:{stuck}:q").Val() == 1 })
	removed, err := c.ForceUnlock(bg, "stuck", info.Token)
	if err != nil || removed.Token != holder.Token() {
		t.Fatalf("ForceUnlock = %+v, %v", removed, err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter after force unlock: %v", err)
	}
	// The holder was alive: its next renewal finds the lock taken over.
	select {
	case <-holder.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("force-unlocked holder never told")
	}
	if cause := context.Cause(holder.Context()); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("holder's cause = %v", cause)
	}
	// And its own release must say so, not find its token released.
	if err := holder.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("force-unlocked holder's Release: %v, want ErrNotHeld", err)
	}
}

func TestForceUnlockThenHolderRelease(t *testing.T) {
	c, _, _ := setup(t)
	holder := mustAcquire(t, c, "broken", dlock.WithTTL(10*time.Second))
	if _, err := c.ForceUnlock(bg, "broken", holder.Token()); err != nil {
		t.Fatal(err)
	}
	// Before any renewal notices: the release itself must report the loss.
	if err := holder.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release after a force unlock: %v, want ErrNotHeld", err)
	}
}
