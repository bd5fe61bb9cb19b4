package dlockhttp

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lockerkit"
)

// An Option configures a Middleware.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// An ErrorWriter answers a request the middleware did not hand to the
// handler. status is the status the middleware chose (see the package
// documentation); err says why: the NameFunc's error, or Acquire's (a
// *dlock.NotObtainedError when busy). It may hold details (Redis addresses,
// lock names) not meant for clients. On a busy lock, Retry-After is already
// set in w's header when the writer runs.
type ErrorWriter func(w http.ResponseWriter, r *http.Request, status int, err error)

// DefaultMaxHold is how long the middleware lets one request hold its lock
// unless WithMaxHold or a dlock.WithMaxHold in WithAcquireOptions says
// otherwise: see "Security" in the package documentation. 30s is the order
// of the WriteTimeout servers set and of a load balancer's request timeout:
// a request still running after it has usually been given up by its client,
// and a legitimate one is rare enough to configure. It is a fixed time, not
// a multiple of the TTL: the TTL sizes how fast a crashed holder's lock
// frees, which has nothing to do with how long a request may take.
const DefaultMaxHold = 30 * time.Second

type config struct {
	acquire      []dlock.AcquireOption
	maxHold      time.Duration
	maxHoldSet   bool // WithMaxHold was given: a conflict with a min hold is an error, not a default to move
	busy         int
	invalid      int
	unavailable  int
	cancelled    int
	bufferBody   int64 // WithBufferedBody; 0: the body is the handler's
	writeError   ErrorWriter
	releaseError func(*http.Request, error)
}

func defaultConfig() config {
	return config{
		// One attempt: see "Responses" in the package documentation.
		acquire:     []dlock.AcquireOption{dlock.WithWait(0)},
		maxHold:     DefaultMaxHold,
		busy:        http.StatusConflict,
		invalid:     http.StatusBadRequest,
		unavailable: http.StatusServiceUnavailable,
		cancelled:   StatusClientClosedRequest,
		writeError:  writeError,
	}
}

// WithAcquireOptions sets how each request acquires its lock, for example
// dlock.WithTTL(30*time.Second) or dlock.WithWait(2*time.Second). They apply
// after the middleware's default, dlock.WithWait(0) (one attempt), so a
// WithWait here replaces it. The lease is renewed while the handler runs
// unless dlock.WithoutRenewal is given.
func WithAcquireOptions(opts ...dlock.AcquireOption) Option {
	return optionFunc(func(c *config) { c.acquire = append(c.acquire, opts...) })
}

// WithMaxHold bounds how long one request may hold its lock (default
// DefaultMaxHold; 0 removes the bound). The middleware passes it to the
// Locker as dlock.WithMaxHold before the options of WithAcquireOptions, so a
// dlock.WithMaxHold there wins. Past the bound no renewal keeps the lock: it
// frees in Redis, and the handler's context ends with a cause matching
// dlock.ErrHoldLimit and dlock.ErrLockLost. A TTL above the bound is cut to
// it. A min hold (dlock.WithMinHold) longer than the default bound moves the
// bound to it; one longer than a bound given here is refused when the
// middleware is made. A Locker that refuses dlock.WithMaxHold (Redlock) is
// asked without it after its first refusal: its requests are not bounded,
// so bound them with the server's timeouts. A *dlock.Client is never asked
// without it.
func WithMaxHold(d time.Duration) Option {
	return optionFunc(func(c *config) { c.maxHold, c.maxHoldSet = d, true })
}

// WithBufferedBody makes the middleware read a request body whose declared
// length (Content-Length) is at most max bytes before it takes the lock; the
// handler reads the same bytes from memory. Two things follow, see
// "Security" in the package documentation: a client that sends its body
// slowly holds no lock while it does (only its own connection, which the
// server's ReadTimeout bounds), and net/http, which watches a connection for
// the client leaving only once the body has been read, can end a wait for a
// busy lock (dlock.WithWait) as soon as the client leaves. A body without a
// declared length (chunked) or longer than max is left to the handler, as
// without the option. A body that cannot be read is answered 400 Bad
// Request (WithInvalidNameStatus), or as cancelled when the client left.
// max bytes of memory per request in flight is the cost: keep it to what a
// handler of the route reads whole anyway (a JSON command, a form).
func WithBufferedBody(max int64) Option {
	return optionFunc(func(c *config) { c.bufferBody = max })
}

// WithBusyStatus sets the status of a request whose lock another request
// holds (default 409 Conflict, with Retry-After).
func WithBusyStatus(code int) Option {
	return optionFunc(func(c *config) { c.busy = code })
}

// WithInvalidNameStatus sets the status of a request that names no valid
// lock: its NameFunc failed or dlock refused the name (default 400 Bad
// Request).
func WithInvalidNameStatus(code int) Option {
	return optionFunc(func(c *config) { c.invalid = code })
}

// WithUnavailableStatus sets the status of a request whose lock could not be
// acquired because Redis could not be reached or the dlock Client is closed
// (default 503 Service Unavailable).
func WithUnavailableStatus(code int) Option {
	return optionFunc(func(c *config) { c.unavailable = code })
}

// StatusClientClosedRequest (499, nginx's "client closed request") is the
// default status of a request whose client went away while its lock was
// being acquired: no client reads it, but access logs and metrics do, and a
// client's own cancellation is neither a conflict (409) nor an outage (503).
const StatusClientClosedRequest = 499

// WithCancelledStatus sets the status written for a request whose context
// was cancelled (its client went away) while its lock was being acquired
// (default StatusClientClosedRequest, 499).
func WithCancelledStatus(code int) Option {
	return optionFunc(func(c *config) { c.cancelled = code })
}

// WithErrorWriter replaces how the middleware answers requests it does not
// hand to the handler (default: the status and a one-line plain text body
// that names a missing field but no internals).
func WithErrorWriter(w ErrorWriter) Option {
	return optionFunc(func(c *config) { c.writeError = w })
}

// WithReleaseErrorHandler sets a function called, after the handler
// returned, when the request's lock did not end cleanly (dlock.Run's error):
// an error matching dlock.ErrLockLost when the lock was lost while the
// handler ran, another error when the release failed (Redis could not be
// reached: the lock then frees when its lease runs out). By default such
// errors are dropped: the handler has already seen a lost lock through its
// context, and the response is written. Use it to log or count lost locks.
func WithReleaseErrorHandler(fn func(r *http.Request, err error)) Option {
	return optionFunc(func(c *config) { c.releaseError = fn })
}

// check refuses a configuration that would fail on every request, at the
// time the middleware is built rather than on the first request.
func (c *config) check() error {
	for _, s := range []struct {
		what string
		code int
	}{{"busy", c.busy}, {"invalid name", c.invalid}, {"unavailable", c.unavailable}, {"cancelled", c.cancelled}} {
		// The range http.ResponseWriter.WriteHeader accepts without panicking.
		if s.code < 100 || s.code > 999 {
			return fmt.Errorf("dlockhttp: %s status %d is not a valid HTTP status", s.what, s.code)
		}
	}
	if c.writeError == nil {
		return fmt.Errorf("dlockhttp: nil ErrorWriter")
	}
	if c.bufferBody < 0 {
		return fmt.Errorf("dlockhttp: WithBufferedBody(%d): %w: the bound must not be negative (0 turns it off)", c.bufferBody, dlock.ErrInvalidOption)
	}
	if c.maxHold < 0 {
		return fmt.Errorf("dlockhttp: WithMaxHold(%v): %w: a hold bound must not be negative (0 removes it)", c.maxHold, dlock.ErrInvalidOption)
	}
	// The acquire options, as far as they can be judged without the
	// Locker's TTL bounds: a negative wait would fail every request.
	if _, err := lockerkit.ReadAcquireOptions("dlockhttp", anyTTL, c.acquire...); err != nil {
		return fmt.Errorf("dlockhttp: WithAcquireOptions: %w", errors.Unwrap(err)) // the *dlock.Error names a lock there is none of
	}
	return nil
}

// anyTTL accepts every positive TTL: the Locker applies its own bounds.
var anyTTL = lockerkit.TTLBounds{Default: time.Second, Min: time.Nanosecond, Max: math.MaxInt64}
