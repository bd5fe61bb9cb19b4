package dlocktest

import (
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lockerkit"
)

// An Option configures a Locker. Options are applied in order by New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	clock  Clock
	bounds lockerkit.TTLBounds
	err    error // the first invalid option, returned by New
}

func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithClock measures every lease, hold limit (WithMaxHold) and wait limit
// (WithWait) on clk instead of the real clock; a ManualClock from NewClock
// makes them move only when the test advances it: then a waiter whose
// context has no deadline waits until the test advances the clock past its
// wait limit, hands it the lock, or cancels it. The caller's context
// deadlines stay on the real clock: they are the context package's.
func WithClock(clk Clock) Option {
	return optionFunc(func(c *config) {
		if clk == nil {
			c.fail(fmt.Errorf("%w: WithClock(nil)", dlock.ErrInvalidOption))
			return
		}
		c.clock = clk
	})
}

// WithTTLBounds sets the smallest and largest TTL the Locker accepts, as
// dlock.WithTTLBounds does for a Client (defaults dlock.DefaultMinTTL and
// dlock.DefaultMaxTTL). Give the double the bounds the production Client
// has, so that it refuses the same TTLs.
func WithTTLBounds(lo, hi time.Duration) Option {
	return optionFunc(func(c *config) {
		if lo < time.Millisecond || hi < lo {
			c.fail(fmt.Errorf("%w: bounds [%v, %v] need 1ms <= min <= max", dlock.ErrInvalidTTL, lo, hi))
			return
		}
		c.bounds.Min, c.bounds.Max = lo, hi
	})
}

// WithDefaultTTL sets the lease of an acquisition without dlock.WithTTL, as
// dlock.WithDefaultTTL does for a Client (default dlock.DefaultTTL, 10s).
func WithDefaultTTL(d time.Duration) Option {
	return optionFunc(func(c *config) { c.bounds.Default = d })
}
