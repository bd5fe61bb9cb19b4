package dlock

import (
	"fmt"
	"time"
)

// WithMinHold keeps the lock for at least d after it was granted, even when
// it is released sooner: ShedLock's "lock at least for". It is for
// scheduled jobs that must run once per tick across instances. A job that
// finishes in 50 ms on one instance must still keep out the same tick's run
// on an instance whose clock or scheduler is a second late, and that
// instance's attempt must find the lock busy (TryAcquire, or a Locker whose
// busy means "skip this run") rather than free.
//
// A Release before d has passed does not delete the lock: in one script it
// shortens the lease to end d after the grant, measured on the Redis
// server's clock (the grant's own time in Redis, not the holder's), and
// leaves it held by nobody. From then on the lock is no longer the caller's:
// its context has ended with ErrReleased, renewal has stopped, and Refresh,
// TTL and a second Release report ErrNotHeld; a release sent again by
// go-redis after a lost reply still reports success. Nobody is handed the
// lock early: waiters get it when that lease ends, as after a holder that
// crashed. A Release after d is a plain release, with hand-off to the next
// waiter.
//
// A holder that crashes releases nothing: its lock ends with its lease. So
// that a crash still blocks the tick, the first lease lasts at least d
// (max(TTL, d)); later renewals ask for the TTL as usual, and the lock's own
// context keeps describing the TTL-long lease, so WithoutRenewal's context
// may end before others are let in.
//
// Zero (the default) means no min hold. d must not be negative, and must be
// at most the client's maximum TTL; with WithMaxHold it must not exceed the
// max hold (a lock cannot be kept longer than it may be held). Redlock
// refuses it. Choose d below the interval between ticks, and above the clock
// skew between instances plus the scheduler's jitter.
func WithMinHold(d time.Duration) AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.minHold = d })
}

// checkMinHold enforces WithMinHold's bounds, after the TTL was checked. It
// rounds the min hold down to whole ms, as Redis counts them.
func (ac *acquireConfig) checkMinHold(b ttlBounds) error {
	if ac.minHold == 0 {
		return nil
	}
	switch {
	case ac.minHold < 0:
		return fmt.Errorf("%w: min hold %v is not positive", ErrInvalidOption, ac.minHold)
	case ac.minHold < time.Millisecond:
		return fmt.Errorf("%w: min hold %v is below 1ms", ErrInvalidOption, ac.minHold)
	case ac.minHold > b.Max:
		// The first lease is at least the min hold, and a lease above
		// the maximum TTL is a unit mistake as much as such a TTL is.
		return fmt.Errorf("%w: min hold %v is above the maximum TTL %v", ErrInvalidOption, ac.minHold, b.Max)
	case ac.maxHold > 0 && ac.minHold > ac.maxHold:
		return fmt.Errorf("%w: min hold %v is above the max hold %v", ErrInvalidOption, ac.minHold, ac.maxHold)
	}
	ac.minHold = ac.minHold.Truncate(time.Millisecond)
	return nil
}

// firstLease is the lease an acquisition asks Redis for: at least the min
// hold, so that a holder that crashes before it releases still keeps others
// out until then.
func (ac acquireConfig) firstLease() time.Duration { return max(ac.ttl, ac.minHold) }
