// Package dlockgrpc runs gRPC server handlers under a dlock lock named from
// the call: one call per order, per account, per job at a time, across every
// instance of a service that shares one Redis.
//
// It is a module of its own (github.com/dlock-go/dlock/dlockgrpc), so that
// programs using dlock without gRPC do not download it.
//
//	locker, err := dlock.New(rdb)
//	...
//	name := dlockgrpc.ByMethod(map[string]dlockgrpc.NameFunc{
//		"/shop.Orders/Pay": dlockgrpc.FromRequest("order:", (*shop.PayRequest).GetOrderId),
//	})
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(dlockgrpc.MustUnaryServerInterceptor(locker, name)),
//		grpc.ChainStreamInterceptor(dlockgrpc.MustStreamServerInterceptor(locker, name)),
//	)
//
// # Model
//
// For each call the interceptor derives a lock name with a NameFunc, acquires
// the lock from any dlock.Locker (a *dlock.Client, a Redlock, or dlocktest's
// Locker in unit tests), runs the handler through dlock.Run, and releases the
// lock when the handler returns or panics. A NameFunc that returns ErrNoLock lets the call run without a
// lock: interceptors apply to every method of a server, and most methods
// need none (ByMethod does this for the methods it does not list).
//
// The handler's context is cancelled when the call ends, as usual, and also
// the moment the lock is lost (its cause then matches dlock.ErrLockLost).
// A handler that fails after its lock was lost, with an error that is not
// already a gRPC status, is answered Aborted "lock lost": the work may not
// have been exclusive and should be retried from the start.
// dlock.FromContext gives the handler the lock itself, for its fencing token.
//
// # Streams
//
// A stream's lock is named from the method and the call's context
// (metadata, peer) only: the NameFunc gets a nil request. An interceptor does
// not know a stream's message types, so it cannot read the first message
// itself; and taking the lock when the handler reads that message would let
// the handler run, and send, before it holds the lock. Put the key in
// metadata (FromMetadata), or lock inside the handler with dlock.Client.Do.
//
// # Status codes
//
// When the interceptor does not run the handler, it answers:
//
//   - Aborted when another call holds the lock (WithBusyCode). gRPC's guide
//     gives Aborted for concurrency conflicts that the client resolves by
//     retrying the whole operation, and grpc-gateway maps it to 409 Conflict,
//     the status dlockhttp answers. ResourceExhausted is for quotas and
//     makes clients throttle every call; Unavailable is retried by clients
//     blindly and is kept for a Redis outage; FailedPrecondition tells the
//     client not to retry until it fixed something, but a held lock frees
//     by itself. The status carries the holder's remaining lease as a
//     google.rpc.RetryInfo detail, and as the grpc-retry-pushback-ms trailer
//     that grpc-go's retry policy honours when the client's service config
//     retries Aborted.
//   - InvalidArgument when the call names no valid lock: a NameFunc error, or
//     a name dlock refuses (dlock.ErrInvalidName). A NameFunc error that is
//     already a gRPC status (status.Error) is returned as it is, so a
//     NameFunc can answer Unauthenticated or NotFound itself.
//   - Unavailable when Redis cannot be reached or the dlock Client is closed:
//     transient, and not the client's fault.
//   - Canceled or DeadlineExceeded when the call's context ended while its
//     lock was acquired: during a wait for a busy lock (dlock.WithWait) or a
//     Redis round trip. The client's own cancellation is not counted as
//     Unavailable, which dashboards read as an outage.
//   - Internal for a misconfiguration (an acquire option dlock refuses, or a
//     lock key that holds foreign data).
//
// Messages name no internals (no Redis address, no lock token).
//
// By default the interceptor makes one attempt and answers Aborted at once:
// a waiting call holds a server goroutine and a stream, and a client with a
// deadline is better told early. WithAcquireOptions(dlock.WithWait(d))
// waits up to d instead, bounded by the call's deadline too.
//
// # Security
//
// A client decides when its call ends, so without a bound it would decide
// how long the lock is held: a stream's lock is held, and renewed, for the
// stream's whole life, and a client may keep a stream open as long as the
// server lets it. The interceptors therefore bound every hold at
// DefaultMaxHold (30s), through dlock.WithMaxHold: past it no renewal keeps
// the lock, which frees in Redis for the next call, and the handler's
// context (a stream's Context()) ends with a cause matching
// dlock.ErrHoldLimit and dlock.ErrLockLost. WithMaxHold changes the bound
// (0 removes it; a Locker that refuses dlock.WithMaxHold, Redlock, is
// asked without it and left unbounded), and a
// dlock.WithMaxHold in WithAcquireOptions wins over it. The client sees what
// the handler returns then: a handler that fails after the bound with an
// error that is not a status is answered Aborted "lock lost", as for any
// lost lock. A handler blocked in RecvMsg does not see its context end: the
// lock is free all the same, but bound streams with the client's deadline
// and the server's keepalive settings (keepalive.ServerParameters
// MaxConnectionAge and MaxConnectionIdle) as well.
//
// A lock name derived from the call creates keys in Redis: a flood of
// distinct names costs, per name, a lock key while it is held and a fence
// counter that stays after it for the Client's fence lifetime
// (dlock.WithFenceLifetime, 7 days by default). Name locks after what the
// call was authorised for, and rate-limit in front of the interceptor.
//
// # Limits
//
// A name taken from metadata or the request is chosen by the client: anyone
// who can call the method can lock any name of that form. Name locks after
// authenticated identities, or after resources the call was authorised for.
// And a lock is a lease: pass the lock's Fence to the resource.
package dlockgrpc
