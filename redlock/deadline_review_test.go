package redlock_test

// Found by an adversarial review of the deadline timer, the fence write-back
// and FenceSet.Admit: each test states the hole it forced, and failed before
// its fix (renewals scheduled from the validity left, retried with backoff;
// Close waiting for acquisitions under way).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

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

// slowRelease delays the release script (5 keys) on one node, as a slow
// link would, without looking at the context.
type slowRelease struct {
	counter
	d time.Duration
}

func (h *slowRelease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// The release script: 5 keys, ARGV[3] (give up) '0' or '1'; the
		// acquire script also has 5 keys, with the owner there.
		if a := cmd.Args(); len(a) > 10 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[2]) == "5" &&
			(fmt.Sprint(a[10]) == "0" || fmt.Sprint(a[10]) == "1") {
			time.Sleep(h.d)
		}
		return next(ctx, cmd)
	}
}

// TestReviewCloseDuringWriteBack: Close while an acquisition waits for its
// fence write-back. The acquisition must fail with ErrClosed and leave no
// key; the question is whether a key is still on a node when Close returns
// (a process that exits right after Close leaves it for the whole TTL).
func TestReviewCloseDuringWriteBack(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	const name = "closeraise"
	ahead := time.Now().Add(10 * time.Second).UnixMicro()
	if err := rdbs[0].Set(bg, "dlock:{"+name+"}:fence", strconv.FormatInt(ahead, 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(rdbs[2])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(bg)
	if _, err := c.TryAcquire(bg, name, dlock.WithTTL(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	raise := &slowRaise{d: 2 * time.Second}
	rdbs[1].AddHook(raise)
	rdbs[0].AddHook(&slowRelease{d: 300 * time.Millisecond})
	r, err := redlock.New(rdbs)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := r.TryAcquire(bg, name, dlock.WithTTL(10*time.Second))
		if l != nil {
			err = fmt.Errorf("got a lock: %v", l.Context().Err())
		}
		done <- err
	}()
	waitFor(t, "the write-back to start", func() bool { return raise.n.Load() > 0 })
	t0 := time.Now()
	if err := r.Close(bg); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %v", time.Since(t0))
	atClose := exists(rdbs[:2], "dlock:{"+name+"}")
	err = <-done
	t.Logf("TryAcquire returned %v after Close began: %v", time.Since(t0), err)
	if !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryAcquire racing Close: %v, want ErrClosed", err)
	}
	if n := exists(rdbs[:2], "dlock:{"+name+"}"); n != 0 {
		t.Errorf("keys on %d nodes after TryAcquire returned", n)
	}
	if atClose != 0 {
		t.Errorf("Close returned while the acquisition's grant was still on %d node(s)", atClose)
	}
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

// TestReviewCloseRacingRenewal: Close at offsets around the first renewal
// (ttl/3) of a lock. Expected to pass: the context ends, the keys are gone
// on every node, no goroutine of the Redlock is left.
func TestReviewCloseRacingRenewal(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	for _, rdb := range rdbs {
		_ = rdb.Ping(bg).Err()
	}
	ignore := goleak.IgnoreCurrent()
	const ttl = 300 * time.Millisecond
	for i := range 20 {
		r, err := redlock.New(rdbs)
		if err != nil {
			t.Fatal(err)
		}
		name := "closerenew" + strconv.Itoa(i)
		l, err := r.TryAcquire(bg, name, dlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl/3 - 10*time.Millisecond + time.Duration(i)*time.Millisecond)
		if err := r.Close(bg); err != nil {
			t.Fatal(err)
		}
		if l.Context().Err() == nil {
			t.Fatalf("round %d: context alive after Close", i)
		}
		if n := exists(rdbs, "dlock:{"+name+"}"); n != 0 {
			t.Fatalf("round %d: key on %d nodes after Close", i, n)
		}
		time.Sleep(50 * time.Millisecond) // a renewal still out would land now
		if n := exists(rdbs, "dlock:{"+name+"}"); n != 0 {
			t.Fatalf("round %d: key revived on %d nodes after Close", i, n)
		}
	}
	goleak.VerifyNone(t, ignore, redisDialer)
}
