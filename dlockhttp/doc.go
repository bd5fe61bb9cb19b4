// Package dlockhttp runs net/http handlers under a dlock lock named from the
// request: one request per order, per user, per tenant at a time, across
// every instance of a service that shares one Redis.
//
//	locker, err := dlock.New(rdb)
//	...
//	byOrder := dlockhttp.MustMiddleware(locker, dlockhttp.MustParseTemplate("order:{path.orderId}"))
//	mux.Handle("POST /orders/{orderId}/pay", byOrder(payHandler))
//
// # Model
//
// For each request the middleware derives a lock name (a NameFunc: the
// helpers PathValue, Header and Query, or a template from configuration,
// ParseTemplate), acquires the lock from any dlock.Locker (a *dlock.Client, a
// Redlock, or dlocktest's Locker in unit tests), runs the handler through
// dlock.Run, and releases the lock when the handler returns or panics (the
// panic goes on after the release).
//
// The handler's request context is cancelled when the request ends, as
// usual, and also the moment the lock is lost (its cause then matches
// dlock.ErrLockLost): a handler that passes r.Context() to its database
// calls stops writing when it is no longer exclusive. dlock.FromContext
// gives the handler the lock itself, for its fencing token.
//
// # Responses
//
// When the middleware does not run the handler, it answers:
//
//   - 409 Conflict, with Retry-After, when another request holds the lock
//     (WithBusyStatus). 409 says "this request conflicts with the current
//     state of the resource", which is what a held lock is, and clients do
//     not retry it on their own: a duplicate POST must not be replayed
//     blindly. 423 Locked is WebDAV's and unknown to most clients; 429 says
//     the client itself sent too much and makes SDKs throttle every call;
//     503 says the server is unwell and makes load balancers and circuit
//     breakers eject it, so it is kept for a Redis outage. Retry-After is the
//     holder's remaining lease in whole seconds, rounded up, at least 1: the
//     latest moment the lock frees unless the holder renews it.
//   - 400 Bad Request when the request names no valid lock: a NameFunc error
//     (a missing path value, header or query parameter, named in the body)
//     or a name dlock refuses (dlock.ErrInvalidName) (WithInvalidNameStatus).
//   - 503 Service Unavailable when Redis cannot be reached or the dlock
//     Client is closed (WithUnavailableStatus): the lock service is down, not
//     the resource busy; with no Retry-After, since nobody knows when Redis
//     returns.
//   - 499 (StatusClientClosedRequest, nginx's "client closed request") when
//     the request's context was cancelled while the lock was acquired: the
//     client went away, during a wait or a Redis round trip
//     (WithCancelledStatus). Nobody reads it; it keeps a client's own
//     cancellation out of the 5xx that alerts and load balancers count, and
//     the ErrorWriter's error matches context.Canceled, for logs and metrics.
//   - 500 Internal Server Error for a misconfiguration (an acquire option
//     dlock refuses, such as a TTL outside the client's bounds, or a lock key
//     that holds foreign data).
//
// WithErrorWriter replaces how these answers are written.
//
// By default the middleware makes one attempt and answers busy at once: a
// waiting request holds a server goroutine and a client connection, and
// under contention waiters pile up faster than they drain. Pass
// WithAcquireOptions(dlock.WithWait(d)) to wait up to d instead. The
// request's context bounds the wait too, but net/http cancels it when the
// client leaves only if it watches the connection, and it watches only once
// the request's body has been read to its end: a request without a body is
// noticed at once, while a POST whose body the handler has not read yet (it
// has not run) goes on waiting after its client left, until d ends. Keep d
// short, a few seconds, or let the middleware read small bodies first
// (WithBufferedBody): then the client's leaving ends the wait at once.
//
// # Security
//
// A client decides when its request ends, so without a bound it would decide
// how long the lock is held: the middleware takes the lock before the
// handler reads the body, and renewal keeps it while the handler runs, so a
// client sending its body one byte a second would keep everyone else out.
// The middleware therefore bounds every hold at DefaultMaxHold (30s),
// through dlock.WithMaxHold: past it no renewal keeps the lock, which frees
// in Redis for the next request, and the handler's context ends with a
// cause matching dlock.ErrHoldLimit and dlock.ErrLockLost. WithMaxHold
// changes the bound (0 removes it; a Locker that refuses dlock.WithMaxHold,
// Redlock, is asked without it and left unbounded), and a dlock.WithMaxHold
// in WithAcquireOptions wins over it. What the client sees then is what the handler writes: a handler that passes
// its context to its database calls fails them and answers an error; one
// blocked reading a slow body learns of it only when the read returns,
// which the server's ReadTimeout bounds. The middleware writes nothing once
// the handler has started.
//
// Better, for routes whose handlers read small bodies whole (a JSON
// command, a form): WithBufferedBody(max) reads a body of declared length
// up to max before the lock is taken, so a slow sender holds no lock at
// all, only its own connection; and net/http, which watches a connection
// only once its body has been read, then cancels a waiting request as soon
// as its client leaves.
//
// Set the server's timeouts too, for the time before the lock and for the
// bytes after it: ReadHeaderTimeout (a client that never finishes its
// headers holds a connection), ReadTimeout (bounds reading the whole
// request, the body included: the slow-body client), WriteTimeout (bounds
// the handler and its response), and IdleTimeout for keep-alive
// connections; examples/orders sets all four. With ReadTimeout and
// WriteTimeout below the hold bound, the bound is only a backstop.
//
// A lock name derived from the request creates keys in Redis: a flood of
// distinct names costs, per name, a lock key while it is held and a fence
// counter that stays after it for the Client's fence lifetime
// (dlock.WithFenceLifetime, 7 days by default). Name
// locks after things the request was authorised for, and rate-limit in
// front of the middleware.
//
// # Limits
//
// A lock name taken from a header or a query parameter is chosen by the
// client: anyone who can send the request can lock any name of that form,
// and so hold up someone else's requests for a lease. Name locks after
// authenticated identities, or after resources the request was authorised
// for.
//
// Two different requests may map to one name (for example "a:{query.x}:{query.y}"
// with x="1:2", y="3" and with x="1", y="2:3"): that serialises more than
// needed, never less.
//
// The lock is a lease, as everywhere in dlock: a handler paused past its
// lease can overlap the next holder. Pass the lock's Fence to the resource.
package dlockhttp
