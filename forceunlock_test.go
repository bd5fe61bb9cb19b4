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
	a := mustAcquire(t, cs[0], "fu", dlock.WithShared(), ttl)
	b := mustAcquire(t, cs[1], "fu", dlock.WithShared(), ttl)
	d := mustAcquire(t, cs[2], "fu", dlock.WithShared(), ttl)
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

// TestForceUnlockResentReportsSuccess: a ForceUnlock whose reply is lost and
// that go-redis sends again (resender: the script runs twice) reports what it
// did: its first run freed the lock, so the operator is told it succeeded, not
// ErrNotHeld. The copy finds the token's forced record, a lock's or a
// reader's, and answers as the copy of a release does.
func TestForceUnlockResentReportsSuccess(t *testing.T) {
	_, rdb, srv := setup(t)
	twice := srv.Client(t)
	twice.AddHook(&resender{})
	admin := newLocker(t, twice)
	holder := newLocker(t, rdb)

	t.Run("exclusive", func(t *testing.T) {
		l, err := holder.TryAcquire(bg, "forced-resend")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.ForceUnlock(bg, "forced-resend", l.Token()); err != nil {
			t.Errorf("ForceUnlock whose reply was lost and re-sent: %v (the first run did free the lock: exists=%d)",
				err, rdb.Exists(bg, "dlock:{forced-resend}").Val())
		}
	})
	t.Run("reader", func(t *testing.T) {
		l, err := holder.TryAcquire(bg, "forced-resend-r", dlock.WithShared())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.ForceUnlock(bg, "forced-resend-r", l.Token()); err != nil {
			t.Errorf("ForceUnlock of a reader, re-sent: %v (exists=%d)", err, rdb.Exists(bg, "dlock:{forced-resend-r}").Val())
		}
	})
}

// TestForceUnlockByMarkerResentReportsSuccess: the same for a ForceUnlock by
// the readers' marker (LockInfo.Token of a read lock), whose reply is lost and
// that go-redis sends again: the first run dropped every reader, so the
// operator is told it succeeded, as TestForceUnlockResentReportsSuccess asks
// of a lock's and a reader's token. The marker's own short record tells the
// copy that this forced unlock ran before.
func TestForceUnlockByMarkerResentReportsSuccess(t *testing.T) {
	_, rdb, srv := setup(t)
	twice := srv.Client(t)
	twice.AddHook(&resender{})
	admin := newLocker(t, twice)
	holder := newLocker(t, rdb)

	const name = "forced-resend-marker"
	l, err := holder.TryAcquire(bg, name, dlock.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	info, err := admin.Inspect(bg, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ForceUnlock(bg, name, info.Token); err != nil {
		t.Errorf("ForceUnlock by the marker %q, re-sent: %v (the first run did free it: exists=%d)",
			info.Token, err, rdb.Exists(bg, "dlock:{"+name+"}").Val())
	}
}

// TestForceUnlockBetweenResendsStaysForced: a ForceUnlock that lands between
// an acquire's first run and go-redis' re-send of it (the first reply lost)
// stays forced, for an exclusive lock, a reader and a permit alike.
// ForceUnlock's doc: the token is marked forced, "no later attempt of it
// takes the lock there again"; so the re-sent acquire is refused, and the
// operator's unlock is not undone.
func TestForceUnlockBetweenResendsStaysForced(t *testing.T) {
	_, rdb, srv := setup(t)
	hook := &resender{}
	twice := srv.Client(t)
	twice.AddHook(hook)
	holder := newLocker(t, twice)
	admin := newLocker(t, rdb)

	for _, tc := range []struct {
		name string
		opts []dlock.AcquireOption
	}{
		{"fb-exclusive", nil},
		{"fb-reader", []dlock.AcquireOption{dlock.WithShared()}},
		{"fb-permit", []dlock.AcquireOption{dlock.WithPermits(2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forced := ""
			force := func() {
				info, err := admin.Inspect(bg, tc.name)
				if err != nil {
					t.Errorf("inspect between the sends: %v", err)
					return
				}
				forced = info.Token
				if len(info.Readers) > 0 {
					forced = info.Readers[0].Token
				}
				if len(info.Holders) > 0 {
					forced = info.Holders[0].Token
				}
				if _, err := admin.ForceUnlock(bg, tc.name, forced); err != nil {
					t.Errorf("force unlock between the sends: %v", err)
				}
			}
			hook.between.Store(&force)
			l, err := holder.TryAcquire(bg, tc.name, tc.opts...)
			hook.between.Store(nil)
			if err == nil {
				defer l.Release(bg)
				t.Errorf("the re-sent acquire of token %s took the lock again after its forced unlock", forced)
			}
		})
	}
}

// TestForceUnlockByMarkerBetweenResendsStaysForced: a ForceUnlock by the
// readers' marker (LockInfo.Token of a read lock, which ForceUnlock's doc
// offers to "drop every reader at once") that lands between a reader's
// acquire and go-redis' re-send of it stays forced, as one by the reader's own
// token does: every reader it dropped gets a forced record, so the re-sent
// acquire is refused and the read lock is not taken again.
func TestForceUnlockByMarkerBetweenResendsStaysForced(t *testing.T) {
	_, rdb, srv := setup(t)
	hook := &resender{}
	twice := srv.Client(t)
	twice.AddHook(hook)
	holder := newLocker(t, twice)
	admin := newLocker(t, rdb)

	const name = "fb-marker"
	force := func() {
		info, err := admin.Inspect(bg, name)
		if err != nil {
			t.Errorf("inspect between the sends: %v", err)
			return
		}
		if _, err := admin.ForceUnlock(bg, name, info.Token); err != nil {
			t.Errorf("force unlock of %q between the sends: %v", info.Token, err)
		}
	}
	hook.between.Store(&force)
	l, err := holder.TryAcquire(bg, name, dlock.WithShared())
	hook.between.Store(nil)
	if err == nil {
		defer l.Release(bg)
		t.Errorf("the re-sent acquire of reader %s took the read lock again after every reader was forced by the marker", l.Token())
	}
}
