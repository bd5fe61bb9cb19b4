package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

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
