// Package dlockotel reports what happens to dlock's locks to OpenTelemetry:
// spans for acquisitions, releases, losses and failed renewals, and metrics.
//
// It is its own Go module, so that OpenTelemetry's dependencies stay out of
// the go.mod of programs that use dlock without it.
//
//	locker, err := dlock.New(rdb, dlock.WithObserver(dlockotel.NewObserver()))
//
// By default the spans go to otel.GetTracerProvider() and the metrics to
// otel.GetMeterProvider(); WithTracerProvider and WithMeterProvider choose
// others.
//
// # Spans
//
// "acquire lock" covers one Acquire or TryAcquire, from the call to its
// result, as a child of the span in the caller's context. Attributes:
// dlock.name, dlock.result (acquired, busy, timeout, cancelled, error) and,
// when acquired, dlock.fence. Its status is Error only for result error (Redis
// failed, or the input was bad): busy, timeout and cancelled are answers a
// caller is built to handle, not faults.
//
// "release lock" is one Release, a child of the span in the context given
// to Release. Attributes: dlock.name, dlock.result (ok, not_held, error),
// dlock.held_ms (how long the lock was held) and dlock.after_loss when the
// lock had been reported lost before. Its status is Error for result error,
// and for not_held when no loss was reported before: then the lease ran out
// without the holder being told, which deserves a look. The core reports a
// release when it is over, without its duration, so the span has none: it
// marks the moment of the release.
//
// "lock lost" is the loss of a held lock: a renewal found it taken over, no
// renewal was confirmed before the lease deadline, or WithMaxHold's limit
// ended it. Attributes: dlock.name, dlock.reason (taken_over, expired,
// hold_limit), dlock.held_ms; status Error with the cause.
//
// "renew lock" is one background renewal that failed with an error (Redis
// did not answer in time, or answered with an error): dlock.name,
// dlock.result=error, status Error. Successful renewals make no span: a
// process holding 10k locks renews thousands of times a second, and a span
// each would drown every trace backend. A renewal that finds the lock gone
// makes no "renew lock" span either: it is reported once, as "lock lost"
// with reason taken_over.
//
// Losses and renewals happen on dlock's renewal loop, outside any request,
// so their spans are roots of traces of their own. Each carries a link to
// the "acquire lock" span of the same lock when that span was sampled, so a
// trace backend leads from the loss to the request that took the lock. The
// link is found by lock name: if one observer sees the same name held
// twice at once (two dlock Clients with different prefixes, say), a link
// may point at the other acquisition. A failing Redis makes one "renew
// lock" span per retry of every held lock: as root spans they are kept or
// dropped by the tracer provider's sampler, like any other root.
//
// Spans never carry a lock's token: whoever knows it can release the lock.
//
// # Metrics
//
// With the meter "github.com/dlock-go/dlock/dlockotel":
//
//	dlock.acquire.duration  histogram      s        dlock.result   every Acquire and TryAcquire
//	dlock.hold.duration     histogram      s                       once per lock, when it ends
//	dlock.renewals          counter        {renewal} dlock.result  background renewals
//	dlock.losses            counter        {lock}   dlock.reason   held locks lost
//	dlock.releases          counter        {release} dlock.result  every Release
//	dlock.held              updowncounter  {lock}                  locks held now
//	dlock.hold.ttl_ratio    histogram      1                       time held / TTL, once per lock
//	dlock.hold.warnings     counter        {lock}                  holds past their warning threshold
//
// A lock ends once: on its loss, or on a Release with result ok or
// not_held that did not follow a loss. A Release that failed with a Redis
// error leaves the lock held (the caller may retry, or the lease deadline
// reports the loss).
//
// Lock names are not a metric attribute: names like "order:42" are
// unbounded, and every distinct value would be a new time series. Programs
// that export metrics to Prometheus directly may prefer the dlockprom
// package, with the same metrics under Prometheus' names; using both with a
// MeterProvider that also exports to Prometheus reports everything twice.
package dlockotel
