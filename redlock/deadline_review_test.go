package redlock_test

// Found by an adversarial review of the deadline timer, the fence write-back
// and FenceSet.Admit: each test states the hole it forced, and failed before
// its fix (renewals scheduled from the validity left, retried with backoff;
// Close waiting for acquisitions under way).

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
)

// TestReviewSlowAcquisitionLosesHealthyLock: an acquisition that took more
// than about 57% of the TTL (two of three nodes stalled, then healthy again)
// is handed out with less validity left than ttl/3; watch schedules its first
// renewal at ttl/3 regardless, so the deadline fires first and the lock is
// declared lost ("no renewal reached a quorum") although no renewal was ever
// sent and every node is healthy and holds it.
func TestReviewSlowAcquisitionLosesHealthyLock(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	rec := &recorder{}
	r := newRedlock(t, rdbs, redlock.WithObserver(rec))
	const ttl = 2 * time.Second
	srvs[0].Pause()
	srvs[1].Pause()
	t.Cleanup(srvs[0].Resume)
	t.Cleanup(srvs[1].Resume)
	go func() {
		time.Sleep(1300 * time.Millisecond)
		srvs[0].Resume()
		srvs[1].Resume()
	}()
	start := time.Now()
	l, err := r.TryAcquire(bg, "slow", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	left, _ := l.TTL(bg)
	t.Logf("acquisition took %v, validity left %v, first renewal due in %v", took, left, ttl/3)
	if left >= ttl/3 {
		t.Skipf("precondition not met: validity left %v >= ttl/3", left)
	}
	select {
	case <-l.Context().Done():
		_, renews, _, _ := rec.counts()
		t.Fatalf("healthy lock lost %v after it was handed out, renewals sent: %d; cause: %v",
			time.Since(start)-took, renews, context.Cause(l.Context()))
	case <-time.After(ttl / 2):
	}
	_ = l.Release(bg)
}

// failRefreshUntil fails the refresh script (1 key) until a time, without
// sending it: a node briefly unreachable.
type failRefreshUntil struct {
	counter
	until time.Time
}

func (h *failRefreshUntil) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) == 6 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[2]) == "1" && time.Now().Before(h.until) {
			h.n.Add(1)
			err := errors.New("injected: node briefly unreachable")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// TestReviewRetryAfterFailedRenewal: two of three nodes refuse renewals for
// the first 1.1s of a 1.5s lock (validity 1.35s), then answer again. After
// a failed renewal the next one is scheduled at min(ttl/3, validity left):
// the second failure (at 1.0s) schedules the retry at the validity's very
// end, where the deadline fires first. The core retries with a backoff from
// ttl/30; here a healthy quorum 250ms before the end is never tried.
func TestReviewRetryAfterFailedRenewal(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs)
	l, err := r.TryAcquire(bg, "retry", dlock.WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all three nodes", func() bool {
		return asLock(t, l).Fences()[2] != 0 && asLock(t, l).Fences()[1] != 0 && asLock(t, l).Fences()[0] != 0
	})
	hooks := []*failRefreshUntil{{until: time.Now().Add(1100 * time.Millisecond)}, {until: time.Now().Add(1100 * time.Millisecond)}}
	rdbs[0].AddHook(hooks[0])
	rdbs[1].AddHook(hooks[1])
	select {
	case <-l.Context().Done():
		t.Fatalf("lost after %d+%d refused renewals, the nodes answering again from 1.1s: %v",
			hooks[0].n.Load(), hooks[1].n.Load(), context.Cause(l.Context()))
	case <-time.After(2 * time.Second):
	}
	if hooks[0].n.Load()+hooks[1].n.Load() == 0 {
		t.Fatal("no renewal was refused: the test proves nothing")
	}
	_ = l.Release(bg)
}
