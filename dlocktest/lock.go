package dlocktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
)

// lock is one acquisition of a name on a Locker. Its fields after the first
// line are guarded by Locker.mu.
type lock struct {
	l     *Locker
	name  string
	token string
	fence int64
	renew bool
	owner string    // dlock.WithOwner's, or "dlocktest"
	since time.Time // acquired (granted or handed over), on the clock
	// shared: a reader (dlock.WithShared), one of entry.readers
	shared bool
	sem    bool // a semaphore's permit (WithPermits)
	ctx    context.Context
	// cancel ends ctx. It is called under Locker.mu, before the name goes
	// to the next holder: whoever gets the lock next finds the previous
	// holder's context ended.
	cancel context.CancelCauseFunc

	state   lockState
	ttl     time.Duration // the lease each renewal asks for: WithTTL, or the last Refresh
	leased  time.Time     // the start of the last lease asked for (acquired, refreshed)
	until   time.Time     // the end of the lease of a lock that is not renewed
	maxHold time.Duration
	hold    time.Time // WithMaxHold's limit; zero without one
	minHold time.Duration
	granted time.Time   // for WithMinHold
	notice  time.Time   // taken and renewed: when its next renewal finds the lock gone
	stop    func() bool // the timer armed by arm, if any
}

type lockState int

const (
	held     lockState = iota
	taken              // ForceUnlock gave the name away; the holder has not noticed yet
	lost               // the lock's context ended with a loss
	released           // Release (or Close) ran
)

var _ dlock.Lock = (*lock)(nil)

// Name returns the lock's name.
func (lk *lock) Name() string { return lk.name }

// Token returns this acquisition's random token (128 bits, hex).
func (lk *lock) Token() string { return lk.token }

// Fence returns this acquisition's fencing token: 1 for the first
// acquisition of a name on a Locker, then one more for each, across
// releases, expiries and force unlocks. The Client's fences are large
// numbers (at least the Redis server's clock in µs): compare fences, never
// rely on their values.
func (lk *lock) Fence() int64 { return lk.fence }

// Context returns the lock's context: cancelled with dlock.ErrReleased by
// Release, with a cause matching dlock.ErrLockLost when the lease ended
// (Expire, a lease without renewal that ran out on the clock, a force
// unlock noticed), and with one matching both dlock.ErrLockLost and
// dlock.ErrHoldLimit at WithMaxHold's limit.
func (lk *lock) Context() context.Context { return lk.ctx }

// TTL returns what is left of the lease on the Locker's clock. A renewed
// lock's lease is renewed every third of its TTL, as the Client's is, so
// TTL reads between two thirds of it and all of it. It reports
// dlock.ErrNotHeld once the lock is no longer held.
func (lk *lock) TTL(ctx context.Context) (time.Duration, error) {
	lk.l.mu.Lock()
	defer lk.l.mu.Unlock()
	if lk.state != held {
		return 0, opError("ttl", lk.name, dlock.ErrNotHeld)
	}
	if err := ctx.Err(); err != nil {
		return 0, opError("ttl", lk.name, err)
	}
	return lk.leaseLeft(lk.l.clock.Now()).Truncate(time.Millisecond), nil
}

// Refresh makes the lease last at least ttl from now, as the Client's does:
// ttl must lie within the Locker's bounds (dlock.ErrInvalidTTL otherwise,
// checked first), later renewals use it, a lease is never shortened, and no
// lease runs past WithMaxHold's limit. A lock that is no longer held gives
// dlock.ErrNotHeld; one that was force-unlocked learns it here, and its
// context ends.
func (lk *lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := lk.l.bounds.Check(ttl); err != nil {
		return opError("refresh", lk.name, err)
	}
	ttl = ttl.Truncate(time.Millisecond)
	lk.l.mu.Lock()
	defer lk.l.mu.Unlock()
	if lk.state == lost || lk.state == released {
		return opError("refresh", lk.name, dlock.ErrNotHeld)
	}
	if err := ctx.Err(); err != nil {
		return opError("refresh", lk.name, err)
	}
	if lk.state == taken {
		lk.lose(takenOver())
		return opError("refresh", lk.name, dlock.ErrNotHeld)
	}
	now := lk.l.clock.Now()
	if !lk.hold.IsZero() {
		left := lk.hold.Sub(now).Truncate(time.Millisecond)
		if left < time.Millisecond {
			return opError("refresh", lk.name, fmt.Errorf("%w: %w of %v reached", dlock.ErrNotHeld, dlock.ErrHoldLimit, lk.maxHold))
		}
		ttl = min(ttl, left)
	}
	lk.ttl, lk.leased = ttl, now
	if end := now.Add(ttl); end.After(lk.until) {
		lk.until = end
	}
	lk.arm(now)
	return nil
}

// Release lets the lock go: its context ends with dlock.ErrReleased and the
// name goes to the first waiter, or is free. It reports dlock.ErrNotHeld
// when the lock was no longer held (released before, lost, force-unlocked);
// then it changed nothing, and a lost lock's context keeps its cause. As
// with the Client, it works on a ctx that has ended already: ctx is not
// used.
func (lk *lock) Release(ctx context.Context) error {
	lk.l.mu.Lock()
	defer lk.l.mu.Unlock()
	switch lk.state {
	case released:
		return opError("release", lk.name, dlock.ErrNotHeld)
	case lost, taken:
		// The Client's release finds the key gone too; for a loss nobody
		// noticed it then ends the context with ErrReleased, and Run
		// reports the loss.
		lk.end(released, dlock.ErrReleased)
		return opError("release", lk.name, dlock.ErrNotHeld)
	}
	lk.end(released, dlock.ErrReleased)
	lk.l.release(lk, lk.l.clock.Now())
	return nil
}

// leaseLeft is what is left of the lease at now. Locker.mu must be held.
func (lk *lock) leaseLeft(now time.Time) time.Duration {
	var left time.Duration
	if lk.renew {
		// Renewed at leased + k*ttl/3, as the Client renews.
		left = lk.ttl - now.Sub(lk.leased)%max(lk.ttl/3, 1)
	} else {
		left = lk.until.Sub(now)
	}
	if !lk.hold.IsZero() {
		left = min(left, lk.hold.Sub(now))
	}
	return max(left, 0)
}

// nextRenewal is the first renewal after now of a renewed lock.
func (lk *lock) nextRenewal(now time.Time) time.Time {
	period := max(lk.ttl/3, 1)
	return lk.leased.Add((now.Sub(lk.leased)/period + 1) * period)
}

// due is when the lock ends by itself, or the zero time: a held lock at the
// end of its lease (one not renewed) or at the hold limit; a force-unlocked
// one when it would next renew, or its lease ends. Locker.mu must be held.
func (lk *lock) due() time.Time {
	var at time.Time
	switch {
	case lk.state == taken && lk.renew:
		at = lk.notice
	case lk.state == held || lk.state == taken:
		if !lk.renew {
			at = lk.until
		}
	default:
		return time.Time{}
	}
	if !lk.hold.IsZero() && (at.IsZero() || lk.hold.Before(at)) {
		at = lk.hold
	}
	return at
}

// arm sets the timer for the lock's due time, replacing the one set before.
// Locker.mu must be held.
func (lk *lock) arm(now time.Time) {
	if lk.stop != nil {
		lk.stop()
		lk.stop = nil
	}
	if at := lk.due(); !at.IsZero() {
		lk.stop = lk.l.clock.AfterFunc(at.Sub(now), lk.fire)
	}
}

// fire runs on the clock when the lock may be due to end.
func (lk *lock) fire() {
	lk.l.mu.Lock()
	defer lk.l.mu.Unlock()
	now := lk.l.clock.Now()
	at := lk.due()
	switch {
	case at.IsZero():
		return // ended since
	case now.Before(at):
		lk.arm(now) // moved by a Refresh while the timer fired
		return
	}
	wasHeld := lk.state == held
	switch {
	case !lk.hold.IsZero() && !now.Before(lk.hold):
		lk.lose(fmt.Errorf("%w: %w of %v reached", dlock.ErrLockLost, dlock.ErrHoldLimit, lk.maxHold))
	case lk.state == taken && lk.renew:
		lk.lose(takenOver())
	default:
		lk.lose(fmt.Errorf("%w: lease of %v ran out (renewal off)", dlock.ErrLockLost, lk.ttl))
	}
	if wasHeld {
		lk.l.release(lk, now)
	}
}

// lose ends a held lock with cause, matching dlock.ErrLockLost. The caller
// frees the name if the lock held it. Locker.mu must be held.
func (lk *lock) lose(cause error) { lk.end(lost, cause) }

// end moves the lock to lost or released, ends its context with cause
// unless it had ended before, and stops its timer. Locker.mu must be held.
func (lk *lock) end(to lockState, cause error) {
	if lk.state == released || (lk.state == lost && to == lost) {
		return
	}
	lk.state = to
	lk.cancel(cause) // no effect if the context ended before: the first cause stays
	if lk.stop != nil {
		lk.stop()
		lk.stop = nil
	}
	delete(lk.l.live, lk)
}

func takenOver() error {
	return fmt.Errorf("%w: renewal found the lock gone or taken over", dlock.ErrLockLost)
}

// newToken returns 128 random bits, hex encoded, as the Client's tokens; a
// reader's starts with "R", as the Client's do.
func newToken(shared bool) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	if shared {
		return "R" + hex.EncodeToString(b[:])
	}
	return hex.EncodeToString(b[:])
}
