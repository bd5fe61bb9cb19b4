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
//   - 500 Internal Server Error for a misconfiguration (an acquire option
//     dlock refuses, such as a TTL outside the client's bounds, or a lock key
//     that holds foreign data).
//
// WithErrorWriter replaces how these answers are written.
//
// By default the middleware makes one attempt and answers busy at once: a
// waiting request holds a server goroutine and a client connection, and
// under contention waiters pile up faster than they drain. Pass
// WithAcquireOptions(dlock.WithWait(d)) to wait up to d instead; the
// request's context bounds the wait too.
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
