package dlock_test

import (
	"testing"

	"github.com/dlock-go/dlock"
)

// ForceUnlock by the readers' marker (LockInfo.Token of a read lock, which
// ForceUnlock's doc offers to "drop every reader at once") lands between a
// reader's acquire and go-redis' re-send of it. A reader forced by its own
// token is now refused the re-send ('f' record); forced by the marker, no
// reader gets a record, so the re-send takes the read lock again and the
// operator's unlock is silently undone.
func TestReview3MarkerForcedBetweenResends(t *testing.T) {
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
	l, err := holder.TryAcquire(bg, name, dlock.Shared())
	hook.between.Store(nil)
	if err == nil {
		defer l.Release(bg)
		t.Errorf("the re-sent acquire of reader %s took the read lock again after every reader was forced by the marker", l.Token())
	}
}

// ForceUnlock by the readers' marker whose reply is lost and that go-redis
// sends again: the first run dropped every reader, so the operator must be
// told it succeeded (as TestReviewResentForceUnlockReportsSuccess asks of a
// lock's and a reader's token). The marker's forced unlock writes no record,
// so the copy reads "not ours" and ForceUnlock reports ErrNotHeld.
func TestReview3ResentMarkerForceUnlockReportsSuccess(t *testing.T) {
	_, rdb, srv := setup(t)
	twice := srv.Client(t)
	twice.AddHook(&resender{})
	admin := newLocker(t, twice)
	holder := newLocker(t, rdb)

	const name = "forced-resend-marker"
	l, err := holder.TryAcquire(bg, name, dlock.Shared())
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
