package redlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/election"
	"github.com/dlock-go/dlock/redlock"
)

// AcquireAll and election work on a Redlock through the dlock.Locker
// interface alone: overlapping sets in opposite orders never deadlock, a
// busy name rolls back what was taken on every node, and candidates lead
// one at a time.
func TestLockFamilyOnRedlock(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	a, b := newRedlock(t, rdbs), newRedlock(t, rdbs)

	t.Run("AcquireAll", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for i, r := range []*redlock.Redlock{a, b} {
			set := []string{"p", "q"}
			if i == 1 {
				set = []string{"q", "p"}
			}
			wg.Go(func() {
				for range 10 {
					m, err := dlock.AcquireAll(bg, r, set, dlock.WithTTL(time.Second), dlock.WithWait(5*time.Second))
					if err != nil {
						errs <- err
						return
					}
					_ = m.Release(bg)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		busy, err := a.TryAcquire(bg, "r3")
		if err != nil {
			t.Fatal(err)
		}
		defer busy.Release(bg)
		if _, err := dlock.AcquireAll(bg, b, []string{"r1", "r3"}, dlock.WithWait(200*time.Millisecond)); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("AcquireAll with r3 busy: %v", err)
		}
		// The rollback's Release returns at a quorum; the rest follows in
		// the background.
		waitFor(t, "r1 released on every node after the rollback", func() bool { return exists(rdbs, "dlock:{r1}") == 0 })
	})

	t.Run("election", func(t *testing.T) {
		var leaders, terms atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for i, r := range []*redlock.Redlock{a, b} {
			e, err := election.New(r, "leader", election.WithIdentity(string(rune('a'+i))), election.WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				for range 5 {
					ctx, cancel := context.WithTimeout(bg, 10*time.Second)
					lead, err := e.Campaign(ctx)
					cancel()
					if err != nil {
						errs <- err
						return
					}
					if leaders.Add(1) != 1 {
						errs <- errors.New("two leaders")
					}
					time.Sleep(2 * time.Millisecond)
					leaders.Add(-1)
					_ = lead.Resign(bg)
					terms.Add(1)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if terms.Load() != 10 {
			t.Fatalf("%d of 10 terms", terms.Load())
		}
	})
}
