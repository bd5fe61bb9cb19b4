// Package observe is what an observer of dlock's locks implements and
// receives: the Observer interface and its events, for metrics, traces and
// logs (dlockprom and dlockotel are observers; dlock.WithLogger is one
// too). A lock's user does not need it: it is for the authors of
// observers, who add theirs to a Client with dlock.WithObserver (or
// redlock.WithObserver).
package observe

import (
	"context"
	"time"
)

// Observer receives what happens to a client's locks, for metrics, traces
// and logs (dlockprom, dlockotel, dlock.WithLogger). Methods run synchronously on
// the caller's goroutine, or on the renewal loop's: they must be quick and
// must not block or call back into the Client. Events carry the lock's name,
// never its token.
//
// Every Observer embeds BaseObserver (the interface asks for a method only
// it has), so an event added in a later version reaches existing observers
// as a no-op instead of breaking their build.
type Observer interface {
	// OnAcquire follows every Acquire and TryAcquire, successful or not.
	OnAcquire(ctx context.Context, e AcquireEvent)
	// OnRenew follows every background renewal of a lock.
	OnRenew(e RenewEvent)
	// OnLost follows the loss of a held lock, at most once per lock.
	OnLost(e LostEvent)
	// OnRelease follows every Release, also one that failed with a Redis
	// error (ResultError: the lock may still be held, the caller may retry).
	OnRelease(ctx context.Context, e ReleaseEvent)
	// OnHoldWarning follows a hold that ran past its warning threshold
	// (dlock.WithHoldWarning), at most once per lock.
	OnHoldWarning(e HoldWarningEvent)

	baseObserver()
}

// BaseObserver implements Observer with methods that do nothing. Embed it in
// an observer and override the events it cares about.
type BaseObserver struct{}

func (BaseObserver) OnAcquire(context.Context, AcquireEvent) {}
func (BaseObserver) OnRenew(RenewEvent)                      {}
func (BaseObserver) OnLost(LostEvent)                        {}
func (BaseObserver) OnRelease(context.Context, ReleaseEvent) {}
func (BaseObserver) OnHoldWarning(HoldWarningEvent)          {}
func (BaseObserver) baseObserver()                           {}

// Result is the outcome of an acquisition, renewal or release, as a label
// value: short, lower case, one of a fixed set.
type Result string

// Reason is why a held lock was lost, as a label value.
type Reason string

// Results and reasons.
const (
	ResultAcquired  Result = "acquired"  // the lock was taken
	ResultBusy      Result = "busy"      // held by another; a single attempt gave up
	ResultTimeout   Result = "timeout"   // the wait limit or ctx's deadline passed
	ResultCancelled Result = "cancelled" // ctx was cancelled
	ResultError     Result = "error"     // Redis failed, or bad input

	ResultOK      Result = "ok"       // renewed, or released
	ResultLost    Result = "lost"     // a renewal found the lock gone
	ResultNotHeld Result = "not_held" // released, but it was no longer ours

	ReasonTakenOver Reason = "taken_over" // the token in Redis was gone or another's
	ReasonExpired   Reason = "expired"    // no renewal confirmed before the lease deadline
	ReasonHoldLimit Reason = "hold_limit" // dlock.WithMaxHold ended it
)

// AcquireResults, RenewResults, ReleaseResults and LostReasons list every
// value each event can carry, for observers that create their series up
// front (a counter that starts at zero shows in a graph; a missing one does
// not).
func AcquireResults() []Result {
	return []Result{ResultAcquired, ResultBusy, ResultTimeout, ResultCancelled, ResultError}
}

// RenewResults lists the results of RenewEvent.
func RenewResults() []Result { return []Result{ResultOK, ResultLost, ResultError} }

// ReleaseResults lists the results of ReleaseEvent.
func ReleaseResults() []Result { return []Result{ResultOK, ResultNotHeld, ResultError} }

// LostReasons lists the reasons of LostEvent.
func LostReasons() []Reason { return []Reason{ReasonTakenOver, ReasonExpired, ReasonHoldLimit} }

// AcquireEvent is one Acquire or TryAcquire.
type AcquireEvent struct {
	Name   string
	Result Result        // ResultAcquired, ResultBusy, ResultTimeout, ResultCancelled, ResultError
	Wait   time.Duration // from the call to its result
	Fence  int64         // the fence handed out, when acquired
	Err    error         // the error returned, unless acquired
}

// RenewEvent is one background renewal of a lock.
type RenewEvent struct {
	Name string
	// Fence is the lock's fencing token: with Name, it ties the events of
	// one acquisition together (AcquireEvent's Fence, and the Lost and
	// Release events of the same lock).
	Fence  int64
	Result Result // ResultOK, ResultLost, ResultError
	Err    error  // the Redis error, for ResultError
}

// LostEvent is the loss of a held lock.
type LostEvent struct {
	Name   string
	Fence  int64         // the lock's fencing token, as in RenewEvent
	Reason Reason        // ReasonTakenOver, ReasonExpired, ReasonHoldLimit
	Held   time.Duration // from acquisition to the loss
	TTL    time.Duration // the lease it was renewed with, as in ReleaseEvent
	Cause  error         // the cause given to the lock's context
}

// ReleaseEvent is one Release.
type ReleaseEvent struct {
	Name   string
	Fence  int64         // the lock's fencing token, as in RenewEvent
	Result Result        // ResultOK, ResultNotHeld, ResultError
	Held   time.Duration // from acquisition to the release
	// AfterLoss: the lock had been reported lost before (an OnLost event),
	// so this release does not end a held lock a second time.
	AfterLoss bool
	// TTL is the lease the lock was renewed with (dlock.WithTTL, or the last
	// Refresh): Held/TTL is the hold-to-TTL ratio dlockprom and dlockotel
	// record, to size TTLs by.
	TTL time.Duration
	Err error
}

// HoldWarningEvent is a hold that ran past its warning threshold.
type HoldWarningEvent struct {
	Name      string
	Fence     int64
	Held      time.Duration // from acquisition to when it was noticed
	TTL       time.Duration // the lease it is renewed with
	Threshold time.Duration // dlock.WithHoldWarning's, or dlock.DefaultHoldWarningTTLs × TTL
}
