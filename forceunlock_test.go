package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

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

// ForceUnlock takes one reader by its token, or every reader by the lock's
// marker token; each learns it at its next renewal.
func TestForceUnlockReaders(t *testing.T) {
	c, _, srv := setup(t)
	cs := newClients(t, srv, 3)
	ttl := dlock.WithTTL(600 * time.Millisecond)
	a := mustAcquire(t, cs[0], "fu", dlock.Shared(), ttl)
	b := mustAcquire(t, cs[1], "fu", dlock.Shared(), ttl)
	d := mustAcquire(t, cs[2], "fu", dlock.Shared(), ttl)
	if _, err := c.ForceUnlock(bg, "fu", a.Token()); err != nil {
		t.Fatalf("force unlock of one reader: %v", err)
	}
	select {
	case <-a.Context().Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the reader taken away did not learn it")
	}
	if err := b.Context().Err(); err != nil {
		t.Fatalf("another reader ended: %v", context.Cause(b.Context()))
	}
	info, err := c.Inspect(bg, "fu")
	if err != nil || len(info.Readers) != 2 {
		t.Fatalf("after one reader was taken: %+v, %v", info, err)
	}
	if _, err := c.ForceUnlock(bg, "fu", info.Token); err != nil {
		t.Fatalf("force unlock of every reader: %v", err)
	}
	for _, l := range []dlock.Lock{b, d} {
		select {
		case <-l.Context().Done():
		case <-time.After(2 * time.Second):
			t.Fatal("a reader did not learn the force unlock")
		}
	}
	w := mustAcquire(t, c, "fu")
	_ = w.Release(bg)
}
