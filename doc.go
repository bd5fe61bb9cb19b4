// Package dlock is a distributed lock for Go services that run as many
// instances, kept in Redis: one order processed once, one job run once.
//
// # First use
//
// Make one Client per process (New) on the go-redis client you have, and
// run the work that must not overlap with Do: it waits for the lock (up to
// DefaultWait, 10 s), runs fn, renews the lease while fn runs, cancels fn's
// context if the lock is lost, and releases it when fn returns or panics.
//
//	locker, err := dlock.New(rdb)
//	if err != nil {
//		return err
//	}
//	err = locker.Do(ctx, "order:42", func(ctx context.Context) error {
//		return ship(ctx, 42) // stop when ctx ends: the lock was lost
//	})
//
// Acquire (waits) and TryAcquire (one attempt) return the Lock for code
// that holds it across calls. Handle the error before using the lock:
//
//	lock, err := locker.TryAcquire(ctx, "order:42", dlock.WithTTL(30*time.Second))
//	if errors.Is(err, dlock.ErrNotObtained) {
//		return nil // busy: someone else has it; the error names the holder
//	}
//	if err != nil {
//		return err // Redis down, a bad name or TTL: no lock to release
//	}
//	defer lock.Release(ctx)
//
// A Lock carries a random token that identifies this acquisition, a fencing
// token (Fence) that grows with every acquisition of the name (pass it to
// the resource you protect, which refuses smaller ones), and a lease (TTL,
// DefaultTTL 10 s) that the Client renews at a third of the TTL while the
// lock is held: nobody refreshes by hand (WithoutRenewal for a fixed lease).
//
// # Options
//
// Options follow one rule. New takes Options, which configure the Client;
// Acquire, TryAcquire and Do take AcquireOptions, which configure one
// acquisition. Every option is With followed by what it sets (WithTTL,
// WithWait, WithPermits), or Without followed by the default it turns off
// (WithoutRenewal). A Client option whose value an acquisition can
// override says Default: WithDefaultTTL and WithDefaultOwner on the Client,
// WithTTL and WithOwner per call.
//
// # Errors
//
// Every error is an *Error naming the operation and the lock, and matches
// one sentinel with errors.Is: ErrNotObtained (busy: a *NotObtainedError
// says who holds it, how, and for how long), ErrNotHeld (the lease ran out,
// or another holds it), ErrUnavailable (Redis could not be reached), the
// ErrInvalid* of bad input, checked before anything is sent. A held lock's
// context ends with a cause matching ErrLockLost when the lock is lost.
//
// # What it guarantees
//
// One holder per name at a time while Redis keeps the key, on one primary:
// acquiring is one atomic script with a TTL in milliseconds, release and
// renewal check the token, a waiter is handed the lock in arrival order
// (no polling), a command re-sent after a lost reply does no harm, and
// fences never go backwards. A lock is a lease, not a guarantee: a holder
// paused longer than its lease, a clock jump on the Redis host or a
// failover that loses a write can let two holders overlap, which the fence
// lets the resource refuse. Redis 5 or newer is needed (7 in a Cluster),
// with maxmemory-policy noeviction. docs/contract.md has the whole
// contract; docs/requirements.md the servers.
//
// # The family
//
// WithShared takes a read lock (readers together, never beside a writer;
// a waiting writer keeps new readers out unless WithoutWriterPriority).
// WithPermits(n) takes one of n permits of a name (a semaphore). AcquireAll
// takes several names, all or none, in a fixed order (no deadlock between two sets). WithReentry lets code
// that holds a lock take it again through its context; WithMinHold keeps a
// lock for a minimum time (once a day, not once per instance); WithReplicas
// waits for replicas to acknowledge a grant, WithDurableGrant for the disk
// (where the server's WAITAOF means it). docs/family.md shows each.
//
// # Other packages
//
// redlock is a Locker over a quorum of independent primaries, dlocktest an
// in-memory Locker for unit tests, election a leader election, dlockhttp
// and dlockgrpc middleware; they all take or implement Locker. Observers
// (dlockprom, dlockotel, your own) implement package observe; operators'
// tools read package inspect (Client.Inspect, List, Scan, ForceUnlock);
// authors of other Lockers use lockerkit. docs/data.md lists the keys in
// Redis.
package dlock
