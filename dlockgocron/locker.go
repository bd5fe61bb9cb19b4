package dlockgocron

import (
	"context"
	"fmt"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dlock-go/dlock"
)

// Locker is a gocron.Locker on a dlock.Locker: one lock per job, named after
// the job, taken with one attempt before each run and released after it.
type Locker struct {
	locker dlock.Locker
	opts   []dlock.AcquireOption
}

var _ gocron.Locker = (*Locker)(nil)

// New returns a Locker that takes each job's lock from l (a *dlock.Client, or
// dlocktest's Locker in unit tests) with dlock.WithMinHold(minHold) and
// dlock.WithMaxHold(maxHold), then opts (for example dlock.WithTTL). A
// minHold of 0 sets no min hold: a quick job may then run twice in a tick,
// once more on an instance that fires late. A maxHold of 0 sets no limit.
//
// A negative hold, or a minHold above a maxHold that is set, is refused with
// an error matching dlock.ErrInvalidOption. Other bad input (a TTL outside
// l's bounds, an option l refuses) is reported by each Lock, and gocron
// skips the run.
func New(l dlock.Locker, minHold, maxHold time.Duration, opts ...dlock.AcquireOption) (*Locker, error) {
	var err error
	switch {
	case l == nil:
		err = fmt.Errorf("%w: nil dlock.Locker", dlock.ErrInvalidOption)
	case minHold < 0 || maxHold < 0:
		err = fmt.Errorf("%w: min hold %v and max hold %v must not be negative", dlock.ErrInvalidOption, minHold, maxHold)
	case maxHold > 0 && minHold > maxHold:
		err = fmt.Errorf("%w: min hold %v is above the max hold %v", dlock.ErrInvalidOption, minHold, maxHold)
	}
	if err != nil {
		return nil, &dlock.Error{Op: "dlockgocron.New", Err: err}
	}
	var all []dlock.AcquireOption
	if minHold > 0 {
		all = append(all, dlock.WithMinHold(minHold))
	}
	if maxHold > 0 {
		all = append(all, dlock.WithMaxHold(maxHold))
	}
	return &Locker{locker: l, opts: append(all, opts...)}, nil
}

// Lock makes one attempt to take the lock named key (gocron passes the job's
// name). When another instance holds it, or keeps it for its min hold, the
// error matches dlock.ErrNotObtained and gocron skips this run.
func (k *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	l, err := k.locker.TryAcquire(ctx, key, k.opts...)
	if err != nil {
		return nil, err
	}
	return lock{l}, nil
}

// lock is a held job lock; gocron unlocks it when the run returns.
type lock struct{ l dlock.Lock }

// Unlock releases the lock: before the min hold has passed it stays taken
// until then, by nobody. It reports dlock.ErrNotHeld when the lock was lost
// during the run (the max hold passed, or its lease ran out).
func (k lock) Unlock(ctx context.Context) error { return k.l.Release(ctx) }
