package dlocktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// minHold: a release before WithMinHold's minimum ends the holder's lock
// (context ended with ErrReleased, ErrNotHeld after) but keeps everyone else
// out until the minimum has passed since the grant, and then lets a waiter
// in; a release after it is plain.
func (s *suite) minHold(t *testing.T) {
	l, name, ctx := s.h.New(t), s.name(t), context.Background()
	hold := 2 * s.ttl
	start := time.Now()
	lk := s.try(t, l, name, dlock.WithMinHold(hold))
	s.release(t, lk)
	if cause := context.Cause(lk.Context()); !errors.Is(cause, dlock.ErrReleased) {
		t.Fatalf("cause after Release: %v, want ErrReleased", cause)
	}
	if err := lk.Refresh(ctx, s.ttl); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Refresh after Release: %v, want ErrNotHeld", err)
	}
	other, err := l.TryAcquire(ctx, name)
	var busy *dlock.NotObtainedError
	if other != nil || !errors.As(err, &busy) || busy.HolderTTL <= 0 || busy.HolderTTL > hold {
		t.Fatalf("TryAcquire during the min hold = %v, %v; want busy with at most %v left", other, err, hold)
	}
	next := s.await(t, l, name)
	// The grant was after start and the next one at least hold after it;
	// the 20ms allow for the clocks of Redis and of the test not ticking
	// together.
	if took := time.Since(start); took < hold-20*time.Millisecond {
		t.Fatalf("a min hold of %v let the next holder in after %v", hold, took)
	}
	// Released after its min hold: the name is free at once.
	time.Sleep(s.ttl / 5)
	s.release(t, next)
	s.release(t, s.try(t, l, name))
}
