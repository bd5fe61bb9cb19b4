package dlock

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// movedError is a MOVED reply as go-redis hands it over: a redis.Error.
type movedError string

func (e movedError) Error() string { return string(e) }
func (movedError) RedisError()     {}

// A Cluster wait rides out a MOVED its client could not follow (the slot
// map in flux) as an outage; when the wait ends during it, the error must
// say unavailable, as one that ended in any other outage does, though a
// MOVED alone is no unavailability (a client of one node that meets it is
// misconfigured: clusterHint).
func TestWaitEndedInRedirectsIsUnavailable(t *testing.T) {
	for _, moved := range []error{
		movedError("MOVED 3999 127.0.0.1:7001"),
		opError("acquire", "x", movedError("MOVED 3999 127.0.0.1:7001")), // as an attempt reports it
	} {
		w := &waiter{}
		w.sawOutage(moved)
		ne := &NotObtainedError{Name: "x", waited: true}
		err := opError("acquire", "x", ne.DuringOutage(w.outage, time.Second))
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrNotObtained) {
			t.Fatalf("a wait that ended riding out MOVED: %v; want ErrNotObtained and ErrUnavailable", err)
		}
		if n := strings.Count(err.Error(), `acquire "x"`); n != 1 {
			t.Errorf("%q names the acquisition %d times, want once", err, n)
		}
	}
}
