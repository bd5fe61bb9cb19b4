package dlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// A grant whose reply was lost is given back in the background until it
// would have expired by itself, not only for as long as a waiter's queue
// entry lives (3 s at most): an outage a little longer than that used to
// strand the grant, held by nobody, for its whole TTL.
func TestLostGrantGivenBackAfterLongOutage(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	loadScripts(t, plain)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var down atomic.Bool
	rdb.AddHook(lostReplyHook(singleAcquire, 1))
	rdb.AddHook(&hook{before: func(cmd redis.Cmder) error {
		if down.Load() && isScript(cmd, scripts.Release) {
			return errors.New("injected: Redis unreachable")
		}
		return nil
	}})
	c := newLocker(t, rdb)
	down.Store(true)
	if _, err := c.TryAcquire(bg, "gb", dlock.WithTTL(2*time.Minute)); err == nil {
		t.Fatal("the lost reply was not lost")
	}
	time.Sleep(4 * time.Second) // the outage: longer than a queue entry lives
	down.Store(false)
	waitFor(t, "the lost grant given back", func() bool { return plain.Exists(bg, "dlock:{gb}").Val() == 0 })
}

// A Refresh that asked for a lease past the hold limit and failed does not
// make the next ordinary renewal the last one: the lock stays held (and
// renewed) up to its hold limit, not lost seconds early with a false
// ErrHoldLimit.
func TestFailedRefreshPastHoldLimitKeepsRenewal(t *testing.T) {
	c, _, _ := setup(t)
	const ttl = 600 * time.Millisecond
	l := mustAcquire(t, c, "hold", dlock.WithTTL(ttl), dlock.WithMaxHold(10*time.Second))
	start := time.Now()
	ended, cancel := context.WithCancel(bg)
	cancel() // the refresh fails before it reaches Redis (any error does)
	if err := l.Refresh(ended, 30*time.Second); err == nil {
		t.Fatal("a Refresh on a cancelled context succeeded")
	}
	select {
	case <-l.Context().Done():
		t.Fatalf("lock lost %v after acquisition, hold limit 10s, TTL %v; cause: %v",
			time.Since(start).Round(time.Millisecond), ttl, context.Cause(l.Context()))
	case <-time.After(5 * ttl):
	}
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
}

// blockingLoss holds the first OnLost until released: the loss is being
// reported, its context not yet cancelled.
type blockingLoss struct {
	dlock.BaseObserver
	entered, proceed chan struct{}
}

func (b *blockingLoss) OnLost(dlock.LostEvent) {
	close(b.entered)
	<-b.proceed
}

// A Release that runs while a loss is still being reported to the
// observers must not make the loss read as a release: the first cause wins
// on the lock's context, so Run and Do still report the loss.
func TestLossNotHiddenByRacingRelease(t *testing.T) {
	obs := &blockingLoss{entered: make(chan struct{}), proceed: make(chan struct{})}
	c, rdb, _ := setup(t, dlock.WithObserver(obs))
	l := mustAcquire(t, c, "race", dlock.WithTTL(300*time.Millisecond))
	lctx := l.Context()         // made now, as Do makes it: a context made later takes the first cause anyway
	rdb.Del(bg, "dlock:{race}") // the next renewal finds it gone
	select {
	case <-obs.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the loss was never reported")
	}
	released := make(chan error, 1)
	go func() { released <- l.Release(bg) }()
	time.Sleep(100 * time.Millisecond) // let the Release run while OnLost blocks
	close(obs.proceed)
	if err := <-released; !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release of a lost lock: %v, want ErrNotHeld", err)
	}
	if cause := context.Cause(lctx); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause %v, want the loss (ErrLockLost)", cause)
	}
}
