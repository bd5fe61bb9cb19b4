package dlock

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors, matched with errors.Is. Errors returned by dlock wrap them
// with the operation and the lock's name.
var (
	// ErrNotObtained: the lock is held by someone else and this call gave up.
	// The concrete error is a *NotObtainedError, which tells how long the
	// holder's lease still runs.
	ErrNotObtained = errors.New("dlock: not obtained")

	// ErrNotHeld: the lock is not (or no longer) ours: it was released
	// already, it expired, or another holder has it now. Nothing was changed
	// in Redis.
	ErrNotHeld = errors.New("dlock: not held")

	// ErrLockLost is the cause of a lock's context when ownership was lost
	// while the lock was believed held.
	ErrLockLost = errors.New("dlock: lock lost")

	// ErrHoldLimit is part of the cause of a lock's context when WithMaxHold's
	// limit ended the lock; such a cause also matches ErrLockLost.
	ErrHoldLimit = errors.New("dlock: hold limit")

	// ErrReleased is the cause of a lock's context after Release.
	ErrReleased = errors.New("dlock: released")

	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("dlock: client closed")

	// ErrInvalidName: the lock name is empty or too long. Nothing was sent to
	// Redis.
	ErrInvalidName = errors.New("dlock: invalid lock name")

	// ErrInvalidTTL: a TTL is zero, negative or outside the client's bounds.
	// Nothing was sent to Redis.
	ErrInvalidTTL = errors.New("dlock: invalid ttl")

	// ErrInvalidOption: an option is out of range (a negative wait or hold
	// limit, WithReplicas without a timeout, a prefix with braces). Nothing
	// was sent to Redis.
	ErrInvalidOption = errors.New("dlock: invalid option")

	// ErrWrongType: the lock's key in Redis holds a value dlock did not write
	// (Redis answered WRONGTYPE). Nothing was changed.
	ErrWrongType = errors.New("dlock: key holds a value of another type")
)

// NotObtainedError is returned when another holder has the lock. It matches
// ErrNotObtained, and also the context's error when the context ended the
// wait, so callers can tell "busy" from "gave up because cancelled".
type NotObtainedError struct {
	// Name is the lock's name.
	Name string
	// HolderTTL is the holder's remaining lease as Redis reported it on the
	// last attempt: a good Retry-After. Negative when the key has no expiry,
	// which only happens when something other than dlock wrote it.
	HolderTTL time.Duration

	cause  error // the context's error, when it ended the wait
	waited bool  // the wait limit ended the wait
	// late: the lock was granted, but the reply took this long, past the
	// deadline of its lease: the grant was given back.
	late, lease time.Duration
}

func (e *NotObtainedError) Error() string {
	if e.late > 0 {
		return fmt.Sprintf("dlock: not obtained: lock %q: the reply granting it came %v after it was sent, past the deadline of its %v lease; the grant was given back",
			e.Name, e.late.Round(time.Millisecond), e.lease)
	}
	msg := fmt.Sprintf("dlock: not obtained: lock %q is held by another owner", e.Name)
	if e.HolderTTL >= 0 {
		msg += fmt.Sprintf(" for another %v", e.HolderTTL)
	} else {
		msg += " with no expiry"
	}
	if e.cause != nil {
		msg += ": " + e.cause.Error()
	}
	return msg
}

// Is makes errors.Is(err, ErrNotObtained) true.
func (e *NotObtainedError) Is(target error) bool { return target == ErrNotObtained }

// Unwrap returns the context's error when it ended the wait.
func (e *NotObtainedError) Unwrap() error { return e.cause }

// opError names the operation and the lock that failed. It keeps one
// "dlock:" prefix in the text even when err is one of ours.
func opError(op, name string, err error) error {
	return &lockOpError{op: op, name: name, err: err}
}

type lockOpError struct {
	op, name string
	err      error
}

func (e *lockOpError) Error() string {
	return fmt.Sprintf("dlock: %s %q: %s", e.op, e.name, strings.TrimPrefix(e.err.Error(), "dlock: "))
}

func (e *lockOpError) Unwrap() error { return e.err }
