package dlock

import "time"

// NewNotObtainedError returns the error of a busy lock with the Client's
// shape, for Lockers outside this package (redlock, dlocktest, a user's
// own): a *NotObtainedError for name that matches ErrNotObtained and
// reports holderTTL, the holder's remaining lease (0 when unknown). When
// cause is not nil it also matches cause: pass the context's error when the
// caller's context ended the wait, and nil when a single attempt or the
// wait limit (WithWait) did, as the Client does. NotObtainedError keeps the
// cause in an unexported field, so this is the one way to set it: a Locker
// that wrapped the two errors itself would differ from the Client in the
// chain errors.As walks and in the message.
//
// Wrap the result in an *Error of Op "acquire" naming the lock, as every
// Locker's errors are.
func NewNotObtainedError(name string, holderTTL time.Duration, cause error) *NotObtainedError {
	return &NotObtainedError{Name: name, HolderTTL: holderTTL, cause: cause}
}

// DuringOutage records on e that the wait it ends was riding out an
// outage (Redis unreachable, READONLY, LOADING, ...) when its time ran
// out: err is the outage's last error, lasted how long the outage had
// lasted. The error then matches err too (ErrUnavailable with it) and says
// so, as the Client's does. It returns e.
func (e *NotObtainedError) DuringOutage(err error, lasted time.Duration) *NotObtainedError {
	e.outage, e.outageFor = err, lasted
	return e
}
