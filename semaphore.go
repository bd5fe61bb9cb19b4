package dlock

import (
	"fmt"

	"github.com/dlock-go/dlock/internal/node"
)

// Permits makes the acquisition take one of n permits of the name: a
// counting semaphore. Up to n holders hold the name at once; the n+1st waits
// (or TryAcquire reports ErrNotObtained) until a permit comes back.
//
// The Lock returned is a normal Lock: renewed by the Client's renewal loop,
// its context ended before its lease ends when renewals fail, and Release
// hands the permit straight to the first live waiter. Each permit is its own
// lease, dated by the Redis server's clock: a crashed holder's permit comes
// back after its TTL while the other permits stay held. Waiting is FIFO:
// free permits go to the first live waiters in line, never to a newcomer
// while a live waiter is ahead of it.
//
// n must be between 1 and MaxPermits (else ErrInvalidOption). All holders of
// a name must use the same n while any permit is held, and a name is either
// a semaphore or an exclusive lock at a time: an acquisition that disagrees
// is refused at once with ErrMismatch, naming both; so is an exclusive or a
// read lock of a name whose permits are held. WithPermits(1) is a semaphore of
// one permit, not the exclusive lock.
//
// Every grant of a permit takes the next fence of the name, so fences of a
// name still grow with every acquisition; but up to n holders are legitimate
// at once, so a resource cannot refuse a write for having a smaller fence
// than another live permit's. See "Semaphores" in docs/family.md.
func WithPermits(n int) AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.semaphore, c.permits = true, n })
}

// checkPermits refuses a number of permits no semaphore can have.
func checkPermits(n int) error {
	if n < 1 || n > MaxPermits {
		return fmt.Errorf("%w: WithPermits(%d) is outside [1, %d]", ErrInvalidOption, n, MaxPermits)
	}
	return nil
}

// mismatch is the error of an attempt refused because the name is in use
// as another kind (a semaphore of another n, a lock, a semaphore), or nil.
func mismatch(ac acquireConfig, g node.Grant) error {
	switch {
	case g.Exclusive:
		return fmt.Errorf("%w: WithPermits(%d) asked, but the name is held as an exclusive lock", ErrMismatch, ac.permits)
	case g.Readers:
		return fmt.Errorf("%w: WithPermits(%d) asked, but the name is held as a read lock (WithShared)", ErrMismatch, ac.permits)
	case g.Permits > 0:
		return fmt.Errorf("%w: WithPermits(%d) asked, but the holders use WithPermits(%d)", ErrMismatch, ac.permits, g.Permits)
	case g.SemHeld > 0:
		kind := "an exclusive lock"
		if ac.shared {
			kind = "a read lock (WithShared)"
		}
		return fmt.Errorf("%w: %s asked, but the name is held as a semaphore: %d of its WithPermits(%d) held", ErrMismatch, kind, g.SemHeld, g.SemPermits)
	}
	return nil
}
