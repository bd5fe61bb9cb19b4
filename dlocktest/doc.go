// Package dlocktest is an in-memory dlock.Locker for unit tests, and the
// conformance suite that keeps it, the Redis Client and any other Locker
// honest.
//
// # When to use it
//
// Write the code that needs a lock against the dlock.Locker interface, hand
// it a *dlock.Client in production and a *dlocktest.Locker in unit tests:
//
//	func Settle(ctx context.Context, locker dlock.Locker, order string) error {
//		return locker.Do(ctx, "order:"+order, func(ctx context.Context) error { ... })
//	}
//
//	locker := dlocktest.MustNew()
//	err := Settle(ctx, locker, "42")
//
// The test needs no Redis, runs in microseconds, and can do what is hard to
// arrange against a server: hold a lock from the test to see the code find
// it busy, end a lease at a chosen moment (Expire) to see the code stop its
// work, take a lock away while the holder still believes it holds it
// (ForceUnlock) to see the protected resource refuse the stale fence, and
// move time by hand (NewClock, WithClock) so that leases, hold limits and
// wait limits end exactly when the test says.
//
// Keep a few integration tests against a real redis-server for what the
// double does not model: the network, Redis failing or failing over,
// replication, clock drift between hosts, and the Client's options
// (prefixes, observers, WithReplicas' acknowledgements).
//
// # Semantics
//
// A Locker behaves as *dlock.Client does, and Conformance checks it against
// the same suite as the Client: the same input validation and errors (every
// error an *dlock.Error naming the operation and the lock; a busy lock a
// *dlock.NotObtainedError matching dlock.ErrNotObtained, and the context's
// error when that ended the wait), waiters served in arrival order with the
// lock handed straight from the releasing holder to the first of them,
// fences that grow with every acquisition of a name, a lock context that
// ends with dlock.ErrReleased or a cause matching dlock.ErrLockLost (and
// dlock.ErrHoldLimit at WithMaxHold's limit), Refresh within the bounds,
// Do through dlock.Run. The differences, all on the side of predictability:
//
//   - Renewal never fails: a renewed lock (the default) is held until it is
//     released, expired with Expire, force-unlocked, or ends at its hold
//     limit. A lock acquired WithoutRenewal ends when its TTL has passed on
//     the clock.
//   - There is no drift margin: a lease ends exactly at its TTL, and the
//     holder's context ends before the next holder gets the lock. A Client
//     ends the context a tenth of the TTL before Redis lets the key go.
//   - A waiter gets a lock the moment its lease ends; Redis' waiters notice
//     an expired lease on their own timer.
//   - Fences start at 1 per name and Locker; the Client's are large numbers.
//     Compare fences, never rely on their values.
//   - WithWait is measured on the Locker's clock, like the leases; context
//     deadlines stay on the real clock.
//   - WithReplicas is accepted and always satisfied.
//   - WithDurableGrant is accepted within its bounds (at least 1ms, at most
//     a third of a renewed lock's TTL, as on a Client) and always
//     satisfied: nothing is on disk to lose.
//
// # Time
//
// By default a Locker uses the real clock, through package time, so it also
// works inside a testing/synctest bubble, whose fake clock then drives the
// leases, the wait limits and the context deadlines alike (make the Locker
// inside the bubble). WithClock(NewClock(start)) gives a ManualClock
// instead: nothing expires until the test calls Advance, which fires what
// falls due in order, in the test's goroutine.
//
// # Conformance
//
// Conformance is a test suite for any dlock.Locker, in the manner of
// testing/fstest.TestFS: give it a Harness that makes a fresh Locker and
// can make a lock be lost behind its holder's back, and it checks the
// behaviour the dlock.Locker and dlock.Lock documentation promise. The dlock
// package runs it against a Client on a real redis-server, and this package
// against its Locker; a Locker of your own can run it too.
package dlocktest
