package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A lock whose lease ran out (no renewal, no release) stays taken for its
// min hold: WithMinHold's first lease in Redis lasts max(TTL, min hold), so
// that a crash still blocks the tick, while the lock's own context
// describes the TTL-long lease. Nothing done at the lease deadline (a
// give-back of the lapsed lock, say) may free it earlier: the same tick
// would run twice.
func TestLapsedLockKeepsMinHold(t *testing.T) {
	srv := redistest.Start(t)
	c := newLocker(t, srv.Client(t))
	other := newLocker(t, srv.Client(t))

	const (
		ttl     = 400 * time.Millisecond
		minHold = 3 * time.Second
	)
	start := time.Now()
	l := mustAcquire(t, c, "tick", dlock.WithTTL(ttl), dlock.WithMinHold(minHold), dlock.WithoutRenewal())
	lostAtDeadline(t, l, 5*ttl)
	// Until start+minHold (less a generous second for jitter) the tick must
	// stay taken: the holder did not release, it merely stopped renewing.
	staysTaken(t, other, "tick", ttl, start.Add(minHold-time.Second), func() string {
		return fmt.Sprintf("another instance took the tick %v after the grant, inside the min hold of %v",
			time.Since(start).Round(time.Millisecond), minHold)
	})
}

// renewalHeldBack starts a server and two Clients on it: c, whose first
// renewal pipeline of name's lock runs in Redis with its reply held back
// until gate is released (at the latest at the end of the test, before c's
// Close, which waits for it), and other, a second instance.
func renewalHeldBack(t *testing.T, name string) (*redistest.Server, *dlock.Client, *dlock.Client, *replyGate) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	gate := newReplyGate("dlock:{"+name+"}", 1)
	gate.pipelines = true // the renewal's; the acquisition goes alone
	rdb.AddHook(gate)
	c := newLocker(t, rdb)
	t.Cleanup(gate.release)
	return srv, c, newLocker(t, srv.Client(t)), gate
}

// lostAtDeadline waits, at most within, for l's context to end with a loss.
func lostAtDeadline(t *testing.T, l dlock.Lock, within time.Duration) {
	t.Helper()
	select {
	case <-l.Context().Done():
	case <-time.After(within):
		t.Fatal("the lock's context did not end at its lease deadline")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
}

// staysTaken tries to take name through other until until, and fails the
// test with why() if it gets it.
func staysTaken(t *testing.T, other *dlock.Client, name string, ttl time.Duration, until time.Time, why func() string) {
	t.Helper()
	for time.Now().Before(until) {
		o, err := other.TryAcquire(bg, name, dlock.WithTTL(ttl))
		if err == nil {
			msg := why()
			_ = o.Release(bg)
			t.Fatal(msg)
		}
		if !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("TryAcquire: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The lease margin separates two holders: a lock's context ends a margin
// (lease.Margin, a tenth of the TTL) before its lease ends in Redis, so
// that its work sees the end and stops before anyone else gets in. Nothing
// done at the lease deadline (a give-back of the lapsed lock, say) may let
// the next holder in before the first holder's lease ends in Redis.
//
// The check is on the client's side of both leases: the first lease ends in
// Redis no earlier than start+ttl (start is before its send); the second
// holder's grant is before its reply. A grant whose reply came before
// start+ttl was made inside the first lease.
func TestLapsedLockKeepsMarginBeforeNextHolder(t *testing.T) {
	srv := redistest.Start(t)
	c := newLocker(t, srv.Client(t))
	other := newLocker(t, srv.Client(t))

	const ttl = time.Second // margin 100ms
	start := time.Now()
	l := mustAcquire(t, c, "margin", dlock.WithTTL(ttl), dlock.WithoutRenewal())
	serverEnd := start.Add(ttl) // the first lease ends in Redis no earlier

	lostAtDeadline(t, l, 3*ttl)
	for time.Now().Before(serverEnd) {
		o, err := other.TryAcquire(bg, "margin", dlock.WithTTL(ttl))
		replied := time.Now()
		if err == nil {
			_ = o.Release(bg)
			if replied.Before(serverEnd) {
				t.Fatalf("a second holder was granted the lock %v before the first holder's lease could end in Redis (the first holder's context ended %v before it)",
					serverEnd.Sub(replied).Round(time.Millisecond), ttl/10)
			}
			return
		}
		if !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("TryAcquire: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A renewal that ran in Redis, its reply held back past the lease deadline,
// extended the key with the token of a lock its holder was told is lost:
// nobody would renew or release it, and the next holder waited out that
// renewal's lease (a third of a TTL longer). The lapsed lock is given back
// by token, but only at the end of the last lease Redis confirmed: the
// margin before it is the holder's, for its work to see the context end
// and stop.
//
// The evidence of the give-back is the token's release record (an expiry
// clears the key too, but writes none). The margin is checked as in
// TestLapsedLockKeepsMarginBeforeNextHolder: a grant whose reply came before
// start+ttl was made inside the first lease.
func TestLapsedRenewalGivenBackAtLeaseEnd(t *testing.T) {
	srv, c, other, gate := renewalHeldBack(t, "lapsed")
	plain := srv.Client(t)

	const ttl = time.Second // margin 100 ms; the first renewal leases to ~1.33 s
	start := time.Now()
	l := mustAcquire(t, c, "lapsed", dlock.WithTTL(ttl))
	serverEnd := start.Add(ttl)
	<-gate.held // the first renewal ran in Redis; its reply is held back
	lostAtDeadline(t, l, 3*ttl)
	record := "dlock:{lapsed}:r:" + l.Token()
	for give := time.Now().Add(2 * ttl); ; time.Sleep(5 * time.Millisecond) {
		o, err := other.TryAcquire(bg, "lapsed", dlock.WithTTL(ttl))
		replied := time.Now()
		if err == nil {
			_ = o.Release(bg)
			if replied.Before(serverEnd) {
				t.Fatalf("a second holder was granted the lock %v before the first holder's confirmed lease could end in Redis",
					serverEnd.Sub(replied).Round(time.Millisecond))
			}
			break
		}
		if !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("TryAcquire: %v", err)
		}
		if time.Now().After(give) {
			t.Fatalf("nobody got the lapsed lock within %v of its loss", 2*ttl)
		}
	}
	if plain.Exists(bg, record).Val() == 0 {
		t.Fatal("the next holder got the lock, but the lapsed token has no release record: it was left to expire, not given back")
	}
	gate.release()
	if err := l.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release after the loss: %v, want ErrNotHeld", err)
	}
}

// The give-back of a lapsed lock keeps WithMinHold: a renewal held back past
// the deadline, as in TestLapsedRenewalGivenBackAtLeaseEnd, and the lock
// must still stay taken until its min hold is over, as a lock that merely
// expired does (TestLapsedLockKeepsMinHold).
func TestLapsedRenewalKeepsMinHold(t *testing.T) {
	_, c, other, gate := renewalHeldBack(t, "lapsed-tick")

	const (
		ttl     = 400 * time.Millisecond
		minHold = 3 * time.Second
	)
	start := time.Now()
	l := mustAcquire(t, c, "lapsed-tick", dlock.WithTTL(ttl), dlock.WithMinHold(minHold))
	<-gate.held
	lostAtDeadline(t, l, 5*ttl)
	staysTaken(t, other, "lapsed-tick", ttl, start.Add(minHold-time.Second), func() string {
		return fmt.Sprintf("another instance took the tick %v after the grant, inside the min hold of %v",
			time.Since(start).Round(time.Millisecond), minHold)
	})
}

// TestLateLapseGiveBackKeepsMarginAfterContextEnd: the give-back of a
// lapsed lock exists to free a key an unconfirmed renewal kept alive, and
// must never let the next holder in before the first holder's context has
// ended by the lease margin: the margin is what its work has to see the end
// and stop. When the deadline is found late (the timer's goroutine held
// back past the end of the last confirmed lease, as under GC or CPU
// starvation, or a holder that asks Context after a stop), giveBackLapsed
// waits until served, which has already passed: the key that the renewal
// (ran in Redis, reply held back) keeps ours until ~start+ttl/3+ttl is
// freed the instant the context ends, and the next holder is in at once.
// Without the give-back, that renewal's lease would still keep it out.
func TestLateLapseGiveBackKeepsMarginAfterContextEnd(t *testing.T) {
	_, c, other, gate := renewalHeldBack(t, "late-lapse")

	const ttl = time.Second // margin 100 ms; the held renewal leases to ~1.33 s
	start := time.Now()
	l := mustAcquire(t, c, "late-lapse", dlock.WithTTL(ttl))
	<-gate.held // the first renewal ran in Redis; its reply is held back
	dlock.HoldBackDeadline(l)
	// Past the end of the confirmed lease (start+ttl), well before the end
	// of the renewal's (~start+1.33s).
	time.Sleep(time.Until(start.Add(ttl + 50*time.Millisecond)))
	ctx := l.Context() // finds the deadline passed: the loss, now
	ended := time.Now()
	if !errors.Is(context.Cause(ctx), dlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", context.Cause(ctx))
	}
	margin := ttl / 10
	staysTaken(t, other, "late-lapse", ttl, ended.Add(margin), func() string {
		return fmt.Sprintf("a second holder got the lock %v after the first holder's context ended (margin %v); the renewal's lease would have kept it out until ~%v after",
			time.Since(ended).Round(time.Millisecond), margin, start.Add(ttl+ttl/3).Sub(ended).Round(time.Millisecond))
	})
}
