// Package dlockadmin is an operator's view of the locks held in a Redis: who
// holds what, for how long, with how many waiting; and, when enabled, a
// guarded force unlock for a holder that is stuck or dead.
//
//	locker, err := dlock.New(rdb)
//	...
//	admin, err := dlockadmin.NewHandler(locker) // read-only
//	// or, with force unlock guarded by an admin token:
//	admin, err = dlockadmin.NewHandler(locker, dlockadmin.WithForceUnlock(os.Getenv("DLOCK_ADMIN_TOKEN")))
//	http.ListenAndServe("127.0.0.1:9090", admin)
//
// NewServeMux adds /metrics, /healthz and /readyz, for `dlock serve`.
//
// # Routes
//
//   - GET / — an HTML page, rendered on the server (no external assets): a
//     filter form, the held locks (name, owner, token prefix, fence, lease
//     left, age, waiters), the "Hottest names" (most waiters) and the
//     "Longest holders", and when it was generated. One small inline script
//     refreshes the listing in place every 10 s from the page's own URL (so
//     the filter stays), and asks for the admin token once per browser tab
//     (kept in sessionStorage, never in a cookie, forgotten when the server
//     refuses it). Without script the page still works: each row has a
//     token field and a reload refreshes. On a narrow window each row is a
//     card and long names wrap.
//   - GET /api/locks?match=PATTERN&limit=N — the same as JSON:
//     {"locks": [...], "hottest": [...], "longest": [...], "match", "limit",
//     "truncated", "generated_at", "scan_truncated", "keys_examined"}, each lock a Lock: {name, key, owner,
//     token_prefix, fence, since, age_ms, lease_ms, ttl_ms, waiters, kind,
//     and when they apply readers, permits, holders, queue}. The CLI's
//     `dlock list -o json` and `dlock inspect -o json` print the same
//     shape; its field names are stable (fields are added, never renamed). match is a Redis glob
//     on lock names ("" for all); limit is 1 to WithLimit's bound, by
//     default that bound. "truncated" says more locks matched than listed,
//     or that the walk stopped at its scan budget ("scan_truncated", after
//     "keys_examined" keys): see Security.
//     "hottest" has the TopN listed locks with the most waiters (only those
//     with any); "longest" the TopN held the longest.
//   - GET /api/locks/{name} — one lock, or 404. A name with '/' may be sent
//     as is or escaped as %2F.
//   - POST /api/locks/{name}/unlock?fence=N — force unlock for API clients,
//     with "Authorization: Bearer <admin token>". fence may also come in a
//     form body; a name with '/' must be escaped as %2F here. Answers
//     {"removed": lock}, or on 409 {"error", "current": lock}.
//   - POST /unlock — the same for the HTML page's forms (fields name, fence,
//     admin_token, and match and limit to come back to); answers 303 See
//     Other to the page with the result on top (Post/Redirect/Get), so that
//     a reload of the result never sends the unlock again. The result waits
//     in memory, under a random id in the redirect's URL, for 5 minutes.
//
// A full lock token never leaves the server: it would let its reader release
// the lock. Pages and JSON carry its first 8 characters only.
//
// # Force unlock
//
// Force unlock removes a lock from under its holder and hands it to the next
// waiter, as a release would. It breaks mutual exclusion if the holder is
// alive: the holder learns at its next renewal, and what it does until then
// overlaps with the next holder. It is for holders known to be dead or stuck,
// in systems whose writes are fenced.
//
// It is off unless WithForceUnlock sets an admin token. An unlock names the
// holder to remove by its fence, as the operator saw it on the page or in
// the API: fences come from a per-name counter that never goes back, so a
// fence names one acquisition of a lock forever (a token prefix could be
// ambiguous; the full token is never shown). The server then reads the
// lock's current token itself, checks that the fence still matches, and
// calls dlock's ForceUnlock with that token, a compare-and-delete in Redis:
// if the lock changed hands at any point after the operator looked, nothing
// is removed and the answer is 409 Conflict ("fence differs") with the
// current holder. A form sent twice therefore cannot remove the next
// holder, and the page's redirect after each unlock keeps a reload from
// sending it twice at all.
//
// Every attempt, refused or done, writes one audit line to the WithLogger
// logger (slog.Default() by default): the remote address, the lock, the
// fence the operator saw, the result and its reason, and the owner, fence
// and token prefix of the holder removed (or of the holder found instead).
// The remote address is the TCP peer: behind a reverse proxy it is the
// proxy, whose own log then tells who asked. Values the client chose (the
// name, the fence, the Origin) are cut at dlock.MaxNameLength bytes with a
// "…[truncated: N bytes]" marker, so a valid name is logged whole and no
// request writes more than a few KB.
//
// # Security
//
//   - The admin token is compared in constant time (crypto/subtle, on
//     SHA-256 digests so that its length does not leak either). API clients
//     send it as a bearer token. The page's forms send it in the POST body
//     (the script copies it from the token field; without script, a
//     password field of the row); it is read from the body only, never from
//     a query string, which would end up in access logs and browser history.
//   - Cross-origin browser POSTs are refused with net/http's
//     CrossOriginProtection (Sec-Fetch-Site, or Origin against Host): a page
//     on another site cannot make an operator's browser post to an admin
//     view on their loopback or intranet. Non-browser clients, which send
//     neither header, are let through to the token check.
//   - The page is served with a Content-Security-Policy that allows its own
//     inline script by hash and no other, fetches to its own origin only,
//     and no framing; every response has Cache-Control: no-store.
//   - Listings are bounded (WithLimit) and each request's Redis work is
//     bounded by WithTimeout.
//   - A listing cannot be made to scan Redis on demand. The page and the
//     API are read without authentication, and a listing walks the whole
//     keyspace with SCAN (other data included) and reads every lock it
//     finds. So one listing runs at a time, whatever the number of requests:
//     requests for the same filter and limit during a listing share it, and
//     its result answers them for WithCacheTTL (DefaultCacheTTL, 2s; a force
//     unlock through the handler clears it, so the page shows it at once);
//     a request for another filter waits its turn, within WithTimeout, and
//     at most 16 filters are kept. One listing asks SCAN to look at no more
//     than WithScanBudget keys (DefaultScanMaxKeys): past it the listing
//     shows what it found and says so ("truncated" and "scan_truncated" in
//     the API, a notice on the page), and it stops reading locks once it
//     has one more than the limit. "generated_at" tells how old a listing
//     is.
//   - An admin token shorter than MinAdminTokenLength (16) bytes is
//     refused when the handler is made.
//   - Wrong admin tokens are limited per client address (its IP, or its
//     /64 for IPv6): 5 at once, then one a second. Past that, the
//     address's unlocks are answered 429 Too Many Requests with
//     Retry-After, whatever token they carry (the page's form shows the
//     same refusal after its redirect); only the first refusal of a
//     lockout is logged. At most 4096 addresses are remembered, those
//     beyond share one limit. That is a trade-off, and a lever for denial
//     of service: whoever guesses from more than 4096 addresses (one IPv6
//     /52 is enough) keeps the shared limit spent, and an operator from a
//     new address is refused too until the guessing stops; an unlimited
//     table would be a memory lever instead. Behind a reverse proxy all
//     clients are the proxy and share its limit: one guesser locks everyone
//     out. Keep the admin view off networks that can reach it in bulk.
//   - No answer carries what went wrong inside: when Redis fails (say
//     "dial tcp 10.0.3.7:6379: connection refused"), the client, who need
//     not be authenticated, gets a generic 503 "lock service unavailable",
//     /readyz a plain "not ready", and the error itself goes to the
//     WithLogger logger. Errors about the request (a bad name, no such
//     lock) are answered as they are.
//   - Each audit line is bounded (see Force unlock above).
//
// Serve the handler on loopback, or behind TLS and authentication: the list
// of lock names and owners may itself be sensitive, and the admin token
// travels with every unlock. The handler cannot bound the connections it is
// served on: give the http.Server ReadHeaderTimeout, ReadTimeout,
// WriteTimeout, IdleTimeout and MaxHeaderBytes (`dlock serve` sets 5 s,
// 10 s, 30 s, 15 s and 64 KB), or an idle keep-alive or a client sending its
// body one byte at a time keeps a connection open for as long as it likes.
//
// # Status codes
//
//   - 200 OK.
//   - 400 Bad Request: a bad match or limit, an invalid lock name, a missing
//     or malformed fence; the body says which.
//   - 401 Unauthorized: no admin token, or the wrong one.
//   - 403 Forbidden: force unlock is not enabled, or a cross-origin browser
//     request.
//   - 404 Not Found: nobody holds the lock.
//   - 409 Conflict: the lock is held by another holder than the fence named
//     (the fence differs: the lock changed hands, or the fence was not the
//     holder's); nothing was removed.
//   - 429 Too Many Requests: too many wrong admin tokens from the client's
//     address; Retry-After says when to try again.
//   - 500 Internal Server Error: the lock's key holds data dlock did not
//     write.
//   - 503 Service Unavailable: Redis did not answer in time, or the dlock
//     Client is closed (the body says only that; the log has the error).
//
// An unlock is checked in this order: same origin, enabled, a token
// present, the address not locked out, authenticated, well-formed, then
// against Redis; so a caller without the admin token
// learns nothing about the locks from an unlock's answer.
//
// # Limits
//
// A listing is a snapshot taken with SCAN while locks come and go: a lock
// acquired or released during the walk may be missing or already gone.
// Ages are measured on the servers' clocks, never a holder's: from the
// acquisition time Redis recorded (its TIME) to the admin server's clock
// when the listing is made; a skew between the two shifts them, and an age
// that would be negative shows as zero.
package dlockadmin
