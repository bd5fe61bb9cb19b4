package dlock_test

import (
	"testing"

	"github.com/dlock-go/dlock"
)

// ForceUnlock whose reply is lost and that go-redis sends again (resender:
// the script runs twice) must report what it did: the first run freed the
// lock, so the operator is told it succeeded, not ErrNotHeld. The release
// script answers a re-sent holder's release with 2 from its '1' record, but
// a forced unlock writes 'f' (or, for a reader, no record at all), so its
// re-send reads as "not ours" and admin.go reports ErrNotHeld.
func TestReviewResentForceUnlockReportsSuccess(t *testing.T) {
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
		l, err := holder.TryAcquire(bg, "forced-resend-r", dlock.Shared())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.ForceUnlock(bg, "forced-resend-r", l.Token()); err != nil {
			t.Errorf("ForceUnlock of a reader, re-sent: %v (exists=%d)", err, rdb.Exists(bg, "dlock:{forced-resend-r}").Val())
		}
	})
}
