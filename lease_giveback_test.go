package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A lock lost at its lease deadline is given back: a renewal that reached
// Redis, with its reply held back past the deadline, has extended the key
// with our token, and nobody would release it. Once the holder is told
// (its context ends), the token is released in Redis, so the next holder
// need not wait out what that renewal leased. The evidence is the token's
// release record: an expiry would clear the key too, but writes none.
func TestLostAtDeadlineIsGivenBack(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	gate := newReplyGate("dlock:{late-renewal}", 1)
	gate.pipelines = true // the renewal loop's; the acquire goes alone
	rdb.AddHook(gate)
	t.Cleanup(gate.release)
	c := newLocker(t, rdb)

	const ttl = 900 * time.Millisecond
	l := mustAcquire(t, c, "late-renewal", dlock.WithTTL(ttl))
	<-gate.held // the first renewal ran in Redis, its reply held back
	select {
	case <-l.Context().Done():
	case <-time.After(3 * ttl):
		t.Fatal("the lock's context did not end at its lease deadline")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	plain := srv.Client(t)
	atLoss, leftAtLoss := plain.HGet(bg, "dlock:{late-renewal}", "token").Val(), plain.PTTL(bg, "dlock:{late-renewal}").Val()
	gate.release() // the network healed

	record := "dlock:{late-renewal}:r:" + l.Token()
	deadline := time.Now().Add(time.Second)
	for plain.Exists(bg, record).Val() == 0 {
		if time.Now().After(deadline) {
			ours := atLoss == l.Token()
			t.Fatalf("1 s after the loss, no release record of the token (at the loss the key was ours: %v, with %v left)", ours, leftAtLoss)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := plain.HGet(bg, "dlock:{late-renewal}", "token").Val(); got == l.Token() {
		t.Fatal("the lost token still holds the lock after its release record was written")
	}
	if err := l.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release after the loss: %v, want ErrNotHeld", err)
	}
}
