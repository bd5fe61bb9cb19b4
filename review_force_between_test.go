package dlock_test

import (
	"testing"

	"github.com/dlock-go/dlock"
)

// ForceUnlock lands between an acquire's first run and go-redis' re-send of
// it (the first reply lost). ForceUnlock's doc: the token is marked forced,
// "no later attempt of it takes the lock there again". The exclusive lock
// keeps that (the 'f' record refuses the re-send); a reader's or a
// permit's forced unlock writes no record, so the re-send grants it again
// and the operator's unlock is silently undone.
func TestReviewForcedBetweenResendsStaysForced(t *testing.T) {
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
		{"fb-reader", []dlock.AcquireOption{dlock.Shared()}},
		{"fb-permit", []dlock.AcquireOption{dlock.Permits(2)}},
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
