// Package holdbound is the hold bound dlockhttp's middleware and dlockgrpc's
// interceptors put on every lock they take (their WithMaxHold): one
// implementation for both, as the two must agree.
package holdbound

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lockerkit"
)

// Acquire returns the acquisition of a lock under the hold bound maxHold
// (0: none; set: the program asked for it). The bound goes first among
// opts, so that a dlock.WithMaxHold of the program's, later in the list,
// replaces it. A min hold in opts longer than the bound moves a default
// bound to it (the lock is kept as long as asked, and bounded there) and
// is refused against a bound the program set, which cannot both hold. A
// Locker that refuses hold limits (Redlock refuses dlock.WithMaxHold) is
// asked again without the bound, and from then on never with it: the
// default must not break such a Locker, whose locks then go unbounded. A
// *dlock.Client takes hold limits, so an ErrInvalidOption it gives is the
// program's, and the bound stays.
func Acquire(locker dlock.Locker, opts []dlock.AcquireOption, maxHold time.Duration, set bool) (func(context.Context, string) (dlock.Lock, error), error) {
	maxHold, err := bound(maxHold, set, opts)
	if err != nil {
		return nil, err
	}
	if maxHold <= 0 {
		return func(ctx context.Context, name string) (dlock.Lock, error) { return locker.Acquire(ctx, name, opts...) }, nil
	}
	bounded := append([]dlock.AcquireOption{dlock.WithMaxHold(maxHold)}, opts...)
	_, isClient := locker.(*dlock.Client)
	var refused atomic.Bool
	return func(ctx context.Context, name string) (dlock.Lock, error) {
		if refused.Load() {
			return locker.Acquire(ctx, name, opts...)
		}
		lock, err := locker.Acquire(ctx, name, bounded...)
		if !isClient && errors.Is(err, dlock.ErrInvalidOption) {
			if lock, err2 := locker.Acquire(ctx, name, opts...); !errors.Is(err2, dlock.ErrInvalidOption) {
				refused.Store(true) // the bound was what it refused
				return lock, err2
			}
		}
		return lock, err
	}, nil
}

// bound is the hold bound to apply with opts: maxHold, unless a min hold in
// opts is longer (see Acquire).
func bound(maxHold time.Duration, set bool, opts []dlock.AcquireOption) (time.Duration, error) {
	wide := lockerkit.TTLBounds{Default: dlock.DefaultTTL, Min: time.Nanosecond, Max: 1 << 62}
	s, err := lockerkit.ReadAcquireOptions("bound", wide, opts...)
	if err != nil || maxHold == 0 || s.MinHold <= maxHold {
		return maxHold, nil // the options' own errors come with the first acquisition
	}
	if set {
		return 0, fmt.Errorf("%w: WithMaxHold(%v) is below the min hold %v of WithAcquireOptions", dlock.ErrInvalidOption, maxHold, s.MinHold)
	}
	return s.MinHold, nil
}
