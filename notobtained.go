package dlock

import "time"

// DuringOutage records on e that the wait it ends was riding out an
// outage (Redis unreachable, READONLY, LOADING, ...) when its time ran
// out: err is the outage's last error, lasted how long the outage had
// lasted. The error then matches err too (ErrUnavailable with it) and says
// so, as the Client's does. It returns e.
func (e *NotObtainedError) DuringOutage(err error, lasted time.Duration) *NotObtainedError {
	e.outage, e.outageFor = err, lasted
	return e
}
