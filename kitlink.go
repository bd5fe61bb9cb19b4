package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/kit"
)

// The internals package lockerkit hands to the authors of other Lockers
// (redlock, dlocktest, a user's own), so that every Locker reads options,
// refuses input and re-enters by the same rules and with the same errors
// as the Client.
func init() {
	kit.ClosedRelease = errClosedRelease
	kit.ReadAcquire = func(name string, b kit.Bounds, opts any) (kit.Settings, error) {
		ac, err := readAcquire(name, b, opts.([]AcquireOption))
		if err != nil {
			return kit.Settings{}, opError("acquire", name, err)
		}
		return kit.Settings{TTL: ac.ttl, Wait: ac.wait, Renew: ac.renew, MaxHold: ac.maxHold, MinHold: ac.minHold,
			Replicas: ac.replicas, ReplicaTimeout: ac.replicaWait, DurableGrant: ac.durable, Reentrant: ac.reentrant, HoldWarning: ac.holdWarn,
			Owner: ac.owner, Shared: ac.shared, NoWriterPriority: ac.skipWriters, Permits: ac.permits}, nil
	}
	kit.CheckTTL = func(ttl time.Duration, b kit.Bounds) error { return checkTTL(ttl, b.Min, b.Max) }
	kit.CheckReentry = func(ctx context.Context, name string, mine any) error {
		return checkReentry(ctx, name, mine.(func(Lock) bool))
	}
	kit.Reenter = func(ctx context.Context, name string, shared bool, permits int, mine any) (any, error) {
		l, err := reenter(ctx, name, shared, permits, mine.(func(Lock) bool))
		if l == nil {
			return nil, err // an untyped nil: no lock held, or refused
		}
		return l, err
	}
	kit.Reentrant = func(l any, shared bool, permits int) any {
		if l == nil {
			return nil
		}
		return reentrantOf(l.(Lock), shared, permits)
	}
	kit.NotObtained = func(name string, holderTTL time.Duration, cause error) any {
		return &NotObtainedError{Name: name, HolderTTL: holderTTL, cause: cause}
	}
}
