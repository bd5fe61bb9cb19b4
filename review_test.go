package dlock_test

// Tests from the second adversarial review of issue 11's changes: each
// failed on the code it reviewed.

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// WithMaxHold shorter than the TTL. The first lease is not cut
// at the hold limit (only renewals and Refresh are), so the lock's context,
// documented to end at the limit, lives on for the whole TTL.
func TestMaxHoldBelowTTL(t *testing.T) {
	c, rdb, _ := setup(t)
	l, err := c.Acquire(bg, "shorthold", dlock.WithTTL(2*time.Second), dlock.WithMaxHold(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	select {
	case <-l.Context().Done():
		t.Logf("ended after the limit: %v", context.Cause(l.Context()))
	case <-time.After(time.Second):
		t.Fatalf("WithMaxHold(200ms): context still alive after 1s, Redis lease %v", rdb.PTTL(bg, "dlock:{shorthold}").Val())
	}
}
