package dlock_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A failed TryAcquire gives its token up after an error reply too: the
// error reply of a re-sent command says nothing of the first send, which
// granted. It once gave up only after errors that were not server replies,
// and the lock was then held by nobody for its whole TTL.
func TestReviewServerErrorAfterResendStrandsGrant(t *testing.T) {
	_, rdb, srv := setup(t)
	hook := &redistest.ReadOnlyOnResend{Admin: srv.Client(t)}
	hooked := srv.Client(t)
	hooked.AddHook(hook)
	c := newLocker(t, hooked)
	if l, err := c.TryAcquire(bg, "warm"); err == nil { // loads the script: one call each from now on
		_ = l.Release(bg)
	}
	hook.Armed.Store(true)
	if _, err := c.TryAcquire(bg, "strand", dlock.WithTTL(10*time.Second)); err == nil {
		t.Fatal("acquired though the reply was an error")
	} else {
		t.Logf("acquire: %v; the re-send's answer: %v", err, hook.Err.Load())
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) && rdb.Exists(bg, "dlock:{strand}").Val() == 1 {
		time.Sleep(20 * time.Millisecond)
	}
	if n := rdb.Exists(bg, "dlock:{strand}").Val(); n == 1 {
		t.Fatalf("the grant of a TryAcquire that failed is still in Redis, held by nobody, for %v more",
			rdb.PTTL(bg, "dlock:{strand}").Val())
	}
}
