package redlock

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/lockerkit"
	"github.com/dlock-go/dlock/observe"
)

// An Option configures a Redlock. Options are applied in order by New; an
// invalid one makes New fail.
//
// Redlock has options of its own rather than taking dlock.Options: those
// configure a Client through fields only package dlock can read, and some
// (WithLogger's server warnings, anything about waiting queues) mean nothing
// here. The options that do apply have the same names and defaults as
// dlock's, so the keys a Redlock writes are the ones a Client with the same
// prefix reads.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	prefix         string
	owner          string
	bounds         lockerkit.TTLBounds
	releaseTimeout time.Duration
	fenceLifetime  time.Duration
	observers      []observe.Observer
	err            error // the first invalid option, returned by New
}

func defaultConfig() config {
	host, _ := os.Hostname()
	return config{
		prefix:         dlock.DefaultPrefix,
		owner:          host + "/" + strconv.Itoa(os.Getpid()),
		bounds:         lockerkit.DefaultTTLBounds,
		releaseTimeout: dlock.DefaultReleaseTimeout,
		fenceLifetime:  dlock.DefaultFenceLifetime,
	}
}

func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithPrefix sets the prefix of every key (default dlock.DefaultPrefix,
// "dlock:"), as dlock.WithPrefix does. It must not be empty, nor contain
// '{' or '}', which would change the keys' hash tag.
func WithPrefix(p string) Option {
	return optionFunc(func(c *config) {
		if err := node.CheckPrefix(p); err != nil {
			c.fail(fmt.Errorf("%w: %v", dlock.ErrInvalidOption, err))
			return
		}
		c.prefix = p
	})
}

// WithDefaultOwner sets the free text stored with every lock as its owner, shown by
// the CLI and the admin view (default "hostname/pid").
func WithDefaultOwner(owner string) Option {
	return optionFunc(func(c *config) { c.owner = owner })
}

// WithDefaultTTL sets the lease used when an acquisition has no
// dlock.WithTTL (default dlock.DefaultTTL, 10s). It must lie within the TTL
// bounds.
func WithDefaultTTL(d time.Duration) Option {
	return optionFunc(func(c *config) { c.bounds.Default = d })
}

// WithTTLBounds sets the smallest and largest TTL the Redlock accepts, in
// acquisitions and in Refresh (defaults dlock.DefaultMinTTL 10ms and
// dlock.DefaultMaxTTL 24h). A TTL outside them is refused with
// dlock.ErrInvalidTTL before anything is sent.
func WithTTLBounds(lo, hi time.Duration) Option {
	return optionFunc(func(c *config) {
		if lo < time.Millisecond || hi < lo {
			c.fail(fmt.Errorf("%w: bounds [%v, %v] need 1ms <= min <= max", dlock.ErrInvalidTTL, lo, hi))
			return
		}
		c.bounds.Min, c.bounds.Max = lo, hi
	})
}

// WithReleaseTimeout bounds each release, on all nodes at once (default
// dlock.DefaultReleaseTimeout, 5s), and each try of giving back a grant
// whose reply was lost.
func WithReleaseTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail(fmt.Errorf("%w: release timeout %v must be positive", dlock.ErrInvalidOption, d))
			return
		}
		c.releaseTimeout = d
	})
}

// WithFenceLifetime sets how long a name's fence counter is kept on each
// node after the last acquisition of that name (default
// dlock.DefaultFenceLifetime, 7 days; at least a second), as
// dlock.WithFenceLifetime does.
func WithFenceLifetime(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < time.Second {
			c.fail(fmt.Errorf("%w: fence lifetime %v is below 1s", dlock.ErrInvalidOption, d))
			return
		}
		c.fenceLifetime = d
	})
}

// WithObserver adds an observer of the Redlock's locks; several may be
// added, each gets every event. The events and results are a Client's:
// OnAcquire after every Acquire and TryAcquire, OnRenew after every
// background renewal, OnLost when a held lock is lost, OnRelease after
// every Release (and every release by Close). Each concerns the Redlock's
// lock, not the nodes one by one, so dlockprom and dlockotel count a Redlock
// acquisition once. A nil o is ignored.
func WithObserver(o observe.Observer) Option {
	return optionFunc(func(c *config) {
		if o != nil {
			c.observers = append(c.observers, o)
		}
	})
}
