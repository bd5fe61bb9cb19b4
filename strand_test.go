package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

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
