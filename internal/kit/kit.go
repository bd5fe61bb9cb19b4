// Package kit links package lockerkit to the dlock internals it exposes to
// the authors of other Lockers. dlock fills the variables in at init;
// lockerkit imports dlock, so they are set before any lockerkit call. Locks
// and options cross as any because this package cannot name dlock's types
// (dlock imports it).
package kit

import (
	"context"
	"time"
)

// Settings mirrors lockerkit.AcquireSettings field for field, so that one
// converts to the other.
type Settings struct {
	TTL              time.Duration
	Wait             time.Duration
	Renew            bool
	MaxHold          time.Duration
	MinHold          time.Duration
	Replicas         int
	ReplicaTimeout   time.Duration
	DurableGrant     time.Duration
	Reentrant        bool
	HoldWarning      time.Duration
	Owner            string
	Shared           bool
	NoWriterPriority bool
	Permits          int
}

// Bounds mirrors lockerkit.TTLBounds.
type Bounds struct{ Default, Min, Max time.Duration }

var (
	// ReadAcquire reads opts (a []dlock.AcquireOption) for name.
	ReadAcquire func(name string, b Bounds, opts any) (Settings, error)
	// CheckTTL checks ttl against b.
	CheckTTL func(ttl time.Duration, b Bounds) error
	// CheckReentry, Reenter and Reentrant take mine as a
	// func(dlock.Lock) bool, and locks as dlock.Lock.
	CheckReentry func(ctx context.Context, name string, mine any) error
	Reenter      func(ctx context.Context, name string, shared bool, permits int, mine any) (any, error)
	Reentrant    func(l any, shared bool, permits int) any
	// ClosedRelease is the cause of a lock a Locker's Close released.
	ClosedRelease error
	// NotObtained returns a *dlock.NotObtainedError.
	NotObtained func(name string, holderTTL time.Duration, cause error) any
)
