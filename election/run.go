package election

import (
	"context"
	"fmt"
	"sync"

	"github.com/dlock-go/dlock"
)

// Callbacks are what Run calls as leadership comes and goes, as client-go's
// leaderelection.LeaderCallbacks.
type Callbacks struct {
	// OnStartedLeading runs, in a goroutine of Run's, when this candidate
	// becomes leader, with a context that ends when the leadership does
	// (lost, or Run's ctx ended). It must return once its context ends: Run
	// waits for it before it resigns, so that the next leader never starts
	// while this one's work still runs (unless the leadership was lost).
	// Leadership lasts until then even if it returns earlier. Required.
	OnStartedLeading func(ctx context.Context)
	// OnStoppedLeading is called when a term ends, after OnStartedLeading
	// has returned and the lock was resigned (or was lost). Optional.
	OnStoppedLeading func()
	// OnNewLeader is called with every change of leader Observe reports,
	// this candidate's own terms included; an empty Identity says nobody
	// leads. It runs in a goroutine of Run's, one call at a time, and lags
	// by up to the observe interval. Optional; it needs an Inspector
	// Locker.
	OnNewLeader func(LeaderInfo)
}

// Run campaigns, leads and campaigns again until ctx ends, calling cb's
// functions as it goes, and returns nil once ctx has ended, the last term
// resigned and every goroutine it started returned. It returns an error
// early only for what campaigning again cannot cure (see Campaign): bad
// callbacks (an *dlock.Error matching dlock.ErrInvalidOption), a closed
// Locker, OnNewLeader on a Locker that is no Inspector.
//
// A term ends when its lock is lost or ctx ends. A lost term is followed by
// a new campaign at the end of the line.
func (e *Election) Run(ctx context.Context, cb Callbacks) error {
	if cb.OnStartedLeading == nil {
		return &dlock.Error{Op: "run election", Name: e.name, Err: fmt.Errorf("%w: Callbacks.OnStartedLeading is nil", dlock.ErrInvalidOption)}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	octx, stopObserving := context.WithCancel(ctx)
	defer stopObserving() // before wg.Wait: deferred calls run last first
	if cb.OnNewLeader != nil {
		ch, err := e.Observe(octx)
		if err != nil {
			return err
		}
		wg.Go(func() {
			for li := range ch {
				cb.OnNewLeader(li)
			}
		})
	}
	for {
		l, err := e.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		e.lead(ctx, l, cb)
		if ctx.Err() != nil {
			return nil
		}
	}
}

// lead runs one term: OnStartedLeading until the leadership is lost or ctx
// ends, then the resignation, then OnStoppedLeading.
func (e *Election) lead(ctx context.Context, l *Leadership, cb Callbacks) {
	tctx, cancel := context.WithCancelCause(l.Context())
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		cb.OnStartedLeading(tctx)
	}()
	<-tctx.Done()
	<-done
	// Resigned only now that the work has stopped; the resignation must run
	// though ctx has ended, which is when it usually runs.
	// A resignation that fails (Redis unreachable) has stopped the renewal
	// all the same: the lock ends with its lease. A lost term has nothing
	// to resign (dlock.ErrNotHeld).
	_ = l.Resign(context.WithoutCancel(ctx))
	if cb.OnStoppedLeading != nil {
		cb.OnStoppedLeading()
	}
}
