package dlockgrpc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lockerkit"
)

// An Option configures an interceptor.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// DefaultMaxHold is how long an interceptor lets one call hold its lock
// unless WithMaxHold or a dlock.WithMaxHold in WithAcquireOptions says
// otherwise: see "Security" in the package documentation. 30s is the order
// of a unary call's usual deadline; a stream that must hold its lock longer
// is rare enough to configure. It is a fixed time, not a multiple of the
// TTL: the TTL sizes how fast a crashed holder's lock frees, which has
// nothing to do with how long a call may take.
const DefaultMaxHold = 30 * time.Second

type config struct {
	acquire      []dlock.AcquireOption
	maxHold      time.Duration
	maxHoldSet   bool // WithMaxHold was given: a conflict with a min hold is an error, not a default to move
	busy         codes.Code
	releaseError func(ctx context.Context, fullMethod string, err error)
}

func defaultConfig() config {
	return config{
		// One attempt: see "Status codes" in the package documentation.
		acquire: []dlock.AcquireOption{dlock.WithWait(0)},
		busy:    codes.Aborted,
		maxHold: DefaultMaxHold,
	}
}

// WithAcquireOptions sets how each call acquires its lock, for example
// dlock.WithTTL(30*time.Second) or dlock.WithWait(2*time.Second). They apply
// after the interceptor's default, dlock.WithWait(0) (one attempt), so a
// WithWait here replaces it. The lease is renewed while the handler runs
// unless dlock.WithoutRenewal is given.
func WithAcquireOptions(opts ...dlock.AcquireOption) Option {
	return optionFunc(func(c *config) { c.acquire = append(c.acquire, opts...) })
}

// WithMaxHold bounds how long one call, unary or stream, may hold its lock
// (default DefaultMaxHold; 0 removes the bound). The interceptor passes it
// to the Locker as dlock.WithMaxHold before the options of
// WithAcquireOptions, so a dlock.WithMaxHold there wins. Past the bound no
// renewal keeps the lock: it frees in Redis, and the handler's context (a
// stream's Context()) ends with a cause matching dlock.ErrHoldLimit and
// dlock.ErrLockLost. A TTL above the bound is cut to it. A min hold
// (dlock.WithMinHold) longer than the default bound moves the bound to it;
// one longer than a bound given here is refused when the interceptor is
// made. A Locker that refuses dlock.WithMaxHold (Redlock) is asked without
// it after its first refusal: its calls are not bounded, so bound them with
// deadlines and the server's keepalive settings. A *dlock.Client is never
// asked without it.
func WithMaxHold(d time.Duration) Option {
	return optionFunc(func(c *config) { c.maxHold, c.maxHoldSet = d, true })
}

// WithBusyCode sets the code of a call whose lock another call holds
// (default codes.Aborted). It must not be codes.OK.
func WithBusyCode(code codes.Code) Option {
	return optionFunc(func(c *config) { c.busy = code })
}

// WithReleaseErrorHandler sets a function called, after the handler
// returned, when the call's lock did not end cleanly (dlock.Run's error): an
// error matching dlock.ErrLockLost when the lock was lost while the handler
// ran, another error when the release failed (Redis could not be reached:
// the lock then frees when its lease runs out). By default such errors are dropped: the handler has already
// seen a lost lock through its context. Use it to log or count lost locks.
func WithReleaseErrorHandler(fn func(ctx context.Context, fullMethod string, err error)) Option {
	return optionFunc(func(c *config) { c.releaseError = fn })
}

// check refuses a configuration that would fail every call, when the
// interceptor is built rather than on the first call.
func (c *config) check() error {
	// codes.OK would turn "busy" into a success with no response.
	if c.busy == codes.OK || c.busy > codes.Unauthenticated {
		return fmt.Errorf("dlockgrpc: busy code %v is not an error code", c.busy)
	}
	if c.maxHold < 0 {
		return fmt.Errorf("dlockgrpc: WithMaxHold(%v): %w: a hold bound must not be negative (0 removes it)", c.maxHold, dlock.ErrInvalidOption)
	}
	// The acquire options, as far as they can be judged without the
	// Locker's TTL bounds: a negative wait would fail every call.
	if _, err := lockerkit.ReadAcquireOptions("dlockgrpc", anyTTL, c.acquire...); err != nil {
		return fmt.Errorf("dlockgrpc: WithAcquireOptions: %w", errors.Unwrap(err)) // the *dlock.Error names a lock there is none of
	}
	return nil
}

// anyTTL accepts every positive TTL: the Locker applies its own bounds.
var anyTTL = lockerkit.TTLBounds{Default: time.Second, Min: time.Nanosecond, Max: math.MaxInt64}
