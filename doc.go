// Package dlock is a distributed lock for Go services that run as many
// instances, kept in Redis.
//
// # Model
//
// A Client (one per process, made by New) hands out Locks. A Lock is one
// acquisition of a name: it carries a random token that identifies this
// acquisition, a fencing token (Fence) that grows with every acquisition of
// the name, and a lease (TTL) after which Redis forgets it if the holder
// stops renewing it.
//
//	locker, err := dlock.New(rdb)
//	...
//	lock, err := locker.TryAcquire(ctx, "order:42", dlock.WithTTL(10*time.Second))
//	if errors.Is(err, dlock.ErrNotObtained) {
//		return nil // busy: someone else has it; retry later
//	}
//	if err != nil {
//		return err // Redis down, a bad name or TTL: no lock to release
//	}
//	defer lock.Release(ctx)
//
// # One shape for every lock
//
// Client implements Locker (Acquire, TryAcquire, Do) and hands out the Lock
// interface. The redlock package (a quorum of independent Redis primaries)
// and the dlocktest package (in memory, for unit tests) implement the same
// interfaces, and so the integrations (dlockhttp, dlockgrpc) take any
// Locker. Do acquires and calls Run, which runs a function under a held
// lock: its context ends when the lock is lost, it carries the lock
// (FromContext), and the lock is released when the function returns or
// panics (the panic keeps its stack).
//
// # Read-write locks
//
// WithShared makes an acquisition a read lock: readers hold a name together,
// never beside a writer (an acquisition without WithShared). A reader is a Lock
// like any other, with its own token, lease, renewal, loss and fence. A
// waiting writer keeps new readers out (WithoutWriterPriority lets a reader
// past it, at the risk of starving writers), and the writer's release, or
// the last reader's, hands the name to the next writer or to every reader
// in line up to it. As with sync.RWMutex, a reader must not take the same
// name again while it reads: behind a waiting writer, that waits for itself.
//
// # Errors and configuration
//
// Every error is an *Error naming the operation and the lock, and matches
// one sentinel (ErrNotObtained, ErrNotHeld, ErrUnavailable, …) with
// errors.Is. Invalid configuration is an error from the constructor (New;
// MustNew panics instead); per-call options are checked on each call before
// anything is sent.
//
// # Guarantees
//
//   - One holder per name at a time while Redis keeps the key, on one Redis
//     primary. Acquiring is one atomic script: the key, its TTL and the fence
//     are written together, never SETNX then EXPIRE.
//   - Every lease is in milliseconds (PX, PEXPIRE) and bounded: WithTTL
//     refuses zero, negative and out-of-bounds values before anything is
//     sent, so a unit mistake is an error, not a lock held for years.
//   - Release, Refresh and TTL check the token and act in one script: a
//     holder whose lease ran out gets ErrNotHeld and cannot free or extend
//     the next holder's lock.
//   - A command that go-redis sends again after a lost reply does no harm:
//     an acquire that finds its own token succeeds (no stranded lock), a
//     waiter's entry is keyed by its token (no second entry), a release that
//     finds the record of its token's release succeeds (no false ErrNotHeld).
//     A grant whose reply was lost is given back at once.
//   - Redis never shortens a held lease, and the lock's deadline is the latest
//     lease Redis confirmed: a renewal and a Refresh that cross cannot leave
//     the client believing in a longer lease than Redis keeps. (A release
//     before WithMinHold's minimum shortens the lease of a lock that is then
//     nobody's: see WithMinHold.)
//   - Fences never go backwards: each is at least the last one + 1 and at
//     least the server's clock in microseconds, so they grow also after the
//     key expired, the counter expired, Redis restarted empty, or a failover
//     lost the last grant (unless the new primary's clock is behind by more
//     than the time since).
//   - Redis 5 or newer is needed (7 in a Cluster), with maxmemory-policy
//     noeviction: lock keys carry a TTL, and volatile-* policies evict them.
//
// # Limits
//
// A lock is a lease, not a guarantee. A holder paused longer than its lease
// (GC, SIGSTOP, a VM freeze), a clock jump on the Redis host, or a failover
// that loses an acknowledged write can let two holders overlap. Pass Fence to
// the protected resource and have it refuse smaller fences than it has seen;
// keep critical writes idempotent (unique constraints, request ids).
//
// # Semaphores
//
// WithPermits(n) makes an acquisition take one of n permits of a name: up to n
// holders at once, each permit its own lease on the server clock, freed
// permits handed to the first live waiters in line (FIFO). All holders of a
// name must agree on n, and a name is a semaphore or an exclusive lock at a
// time (ErrMismatch); see WithPermits for the limits and what a permit's fence
// means.
//
// # Data in Redis
//
// With the default prefix, the lock "order:42" is the hash dlock:{order:42}
// with the fields token, fence, owner, since (server time in ms) and ttl
// (ms); its fence counter is dlock:{order:42}:fence (expires 7 days after the
// last grant), the record of a token's release dlock:{order:42}:r:<token>
// (kept 30 s), and its waiters' tokens line up in the sorted set
// dlock:{order:42}:q, with each waiter's data in the hash dlock:{order:42}:qd.
// A release hands the lock to the first
// live waiter and tells that waiter's client alone on the channel
// dlock:{order:42}:w:<client id>. The braces are a hash tag: all keys of one
// lock share a Cluster slot. A lock released before its min hold
// (WithMinHold) keeps its hash, with the token "min-hold", until then.
// Readers live in the same hash: its token is a marker, and each reader has
// a field r:<token> with its lease's end. A semaphore's permits are the
// sorted set dlock:{order:42}:sem (token by lease end), their data the hash
// dlock:{order:42}:sem:d, and its waiters dlock:{order:42}:sem:q and :sem:qd.
package dlock
