package dlockhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/holdbound"
)

// Middleware returns a middleware that runs each request's handler while
// holding the lock name(r) from locker (a *dlock.Client, a Redlock, or
// dlocktest's Locker in unit tests): see the package documentation for the
// answers it gives when it does not run the handler, and the options.
//
// The handler runs through dlock.Run: its request context is cancelled when
// the request ends or the lock is lost, whichever comes first, and
// context.Cause tells which (a lost lock's cause matches dlock.ErrLockLost);
// dlock.FromContext(r.Context()) returns the lock, for its fence. The lock
// is released when the handler returns, and also when it panics: the
// release runs in a deferred call and the panic then goes on unchanged, with
// its stack, to net/http's recovery or the caller's.
//
// Middleware returns an error when locker (also a nil *dlock.Client) or name
// is nil or an option is invalid (a status outside 100-999, a negative
// wait): mistakes in the program's wiring, found at start-up rather than on
// the first request.
func Middleware(locker dlock.Locker, name NameFunc, opts ...Option) (func(http.Handler) http.Handler, error) {
	if isNil(locker) || name == nil {
		return nil, errors.New("dlockhttp: Middleware needs a dlock.Locker and a NameFunc")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	acquire, err := holdbound.Acquire(locker, cfg.acquire, cfg.maxHold, cfg.maxHoldSet)
	if err != nil {
		return nil, fmt.Errorf("dlockhttp: %w", err)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, err := name(r)
			if err != nil {
				cfg.writeError(w, r, cfg.invalid, nameError{err})
				return
			}
			if cfg.bufferBody > 0 {
				if r, err = bufferBody(r, cfg.bufferBody); err != nil {
					if r.Context().Err() == context.Canceled {
						cfg.writeError(w, r, cfg.cancelled, &cancelledError{errors.Join(context.Canceled, err)})
						return
					}
					cfg.writeError(w, r, cfg.invalid, bodyError{err})
					return
				}
			}
			lock, err := acquire(r.Context(), n)
			if err != nil {
				cfg.refuse(w, r, err)
				return
			}
			returned := false
			if cfg.releaseError != nil {
				defer func() {
					if !returned {
						// The handler panicked: Run released on the way
						// out, and its error is lost with the panic; the
						// lock's cause still tells a loss or a failed
						// release from a clean end.
						if err := panicEnd(lock); err != nil {
							cfg.releaseError(r, err)
						}
					}
				}()
			}
			err = dlock.Run(r.Context(), lock, func(ctx context.Context) error {
				next.ServeHTTP(w, r.WithContext(ctx))
				return nil
			})
			returned = true
			if err != nil && cfg.releaseError != nil {
				cfg.releaseError(r, err)
			}
		})
	}, nil
}

// bufferBody reads r's body into memory when its declared length is within
// max, and returns r with that copy as its body. Reading it to its end is
// what makes net/http watch the connection (and cancel r's context when the
// client leaves), and it keeps a slow sender from holding the lock while it
// sends.
func bufferBody(r *http.Request, max int64) (*http.Request, error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength <= 0 || r.ContentLength > max {
		return r, nil
	}
	b := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, b); err != nil {
		return r, fmt.Errorf("dlockhttp: reading the request body: %w", err)
	}
	// Read on to EOF: net/http starts watching the connection when its body
	// reader reports the end, which ReadFull does not ask for. Nothing
	// more can come: the reader stops at Content-Length.
	if _, err := r.Body.Read(make([]byte, 1)); err != io.EOF {
		return r, fmt.Errorf("dlockhttp: reading the request body: no end after its %d bytes: %v", len(b), err)
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return r, nil
}

// bodyError marks a request body that could not be read, for writeError.
type bodyError struct{ err error }

func (e bodyError) Error() string { return e.err.Error() }
func (e bodyError) Unwrap() error { return e.err }

// isNil reports a nil Locker, also a nil pointer in a non-nil interface (a
// *dlock.Client from a New that failed), which would panic on the first
// request.
func isNil(l dlock.Locker) bool {
	if l == nil {
		return true
	}
	v := reflect.ValueOf(l)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// MustMiddleware is Middleware for wiring fixed in the program: it panics
// where Middleware returns an error.
func MustMiddleware(locker dlock.Locker, name NameFunc, opts ...Option) func(http.Handler) http.Handler {
	mw, err := Middleware(locker, name, opts...)
	if err != nil {
		panic(err)
	}
	return mw
}

// refuse answers a request whose lock was not acquired.
func (cfg *config) refuse(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() == context.Canceled {
		// The client went away (or the server cancelled the request):
		// whatever Acquire returned, a Redis call cut short or a wait given
		// up, is the cancellation's doing, not an outage or a conflict.
		if !errors.Is(err, context.Canceled) {
			err = errors.Join(context.Canceled, err)
		}
		cfg.writeError(w, r, cfg.cancelled, &cancelledError{err})
		return
	}
	status := cfg.status(err)
	var busy *dlock.NotObtainedError
	if errors.As(err, &busy) {
		if s := retryAfter(busy.HolderTTL); s != "" {
			w.Header().Set("Retry-After", s)
		}
	}
	cfg.writeError(w, r, status, err)
}

// status maps an error of Acquire to the answer's status.
func (cfg *config) status(err error) int {
	switch {
	case errors.Is(err, dlock.ErrNotObtained):
		// Also when the request's deadline ended the wait: the lock was busy
		// all along. (A cancelled request is answered before: refuse.)
		return cfg.busy
	case errors.Is(err, dlock.ErrInvalidName):
		return cfg.invalid
	case errors.Is(err, dlock.ErrInvalidTTL), errors.Is(err, dlock.ErrInvalidOption), errors.Is(err, dlock.ErrWrongType),
		errors.Is(err, dlock.ErrReentrant):
		// The program's configuration, its nesting of locks, or the data
		// in Redis is wrong: no retry by the client helps, and 503 would
		// hide it as an outage.
		return http.StatusInternalServerError
	default:
		// dlock.ErrClosed and everything Redis or the network returned.
		return cfg.unavailable
	}
}

// retryAfter is the Retry-After value for a holder's remaining lease: whole
// seconds rounded up (answering 0 or rounding down invites a retry that is
// sure to fail), at least 1. It is empty for a lease without expiry (a key
// dlock did not write), when no time can honestly be promised.
func retryAfter(holder time.Duration) string {
	if holder <= 0 {
		return "" // no expiry, or unknown (a Locker that cannot tell)
	}
	secs := (holder + time.Second - 1) / time.Second
	return strconv.FormatInt(max(int64(secs), 1), 10)
}

// nameError marks an error of the NameFunc for writeError, without changing
// its text or what it matches.
type nameError struct{ err error }

func (e nameError) Error() string { return e.err.Error() }
func (e nameError) Unwrap() error { return e.err }

// cancelledError marks an acquisition the request's cancellation ended, for
// writeError, without changing what it matches.
type cancelledError struct{ err error }

func (e *cancelledError) Error() string {
	return "dlockhttp: request cancelled while its lock was acquired: " + e.err.Error()
}
func (e *cancelledError) Unwrap() error { return e.err }

// writeError is the default ErrorWriter. The body names a missing field,
// which the client can fix, and nothing internal: no Redis address, no
// error text from Redis or from a NameFunc.
func writeError(w http.ResponseWriter, _ *http.Request, status int, err error) {
	var missing *MissingValueError
	var msg string
	switch {
	case errors.As(err, &missing):
		msg = missing.Error()
	case errors.As(err, new(*cancelledError)):
		msg = "dlockhttp: request cancelled"
	case errors.As(err, new(nameError)):
		msg = "dlockhttp: the request names no lock"
	case errors.As(err, new(bodyError)):
		msg = "dlockhttp: the request body could not be read"
	case errors.Is(err, dlock.ErrNotObtained):
		msg = "dlockhttp: busy: another request holds the lock; retry later"
	case errors.Is(err, dlock.ErrInvalidName):
		msg = "dlockhttp: the request names an invalid lock (empty or too long)"
	case errors.Is(err, dlock.ErrInvalidTTL), errors.Is(err, dlock.ErrInvalidOption), errors.Is(err, dlock.ErrWrongType), errors.Is(err, dlock.ErrReentrant):
		msg = "dlockhttp: internal error"
	default:
		msg = "dlockhttp: lock service unavailable"
	}
	http.Error(w, msg, status)
}

// panicEnd is what the release-error handler hears of a lock whose handler
// panicked, from the lock's context: Run's own error went with the panic.
func panicEnd(lock dlock.Lock) error {
	switch cause := context.Cause(lock.Context()); {
	case errors.Is(cause, dlock.ErrReleased):
		return nil
	case cause == nil:
		return fmt.Errorf("%s: handler panicked; lock %q: the release did not complete (the lock expires with its TTL)", "dlockhttp", lock.Name())
	default:
		return fmt.Errorf("%s: handler panicked; lock %q: %w", "dlockhttp", lock.Name(), cause)
	}
}
