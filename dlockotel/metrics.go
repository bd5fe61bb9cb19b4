package dlockotel

import (
	"context"
	"slices"
	"time"

	"github.com/dlock-go/dlock/observe"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Bucket boundaries, in seconds, advised to the SDK (a View can override
// them). Waits run from 100µs (an uncontended lock on a local Redis) to 30s
// (a long queue); holds from a millisecond to an hour (a leader, a batch).
var (
	waitBounds = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
		0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	holdBounds = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600}
	// Holds in TTLs: up to 1 the work fits its lease, above it renewal
	// carried it, at dlock.DefaultHoldWarningTTLs a hold warning fires.
	ratioBounds = []float64{0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30, 100}
)

// instruments are the observer's metrics.
type instruments struct {
	wait     metric.Float64Histogram
	hold     metric.Float64Histogram
	renews   metric.Int64Counter
	losses   metric.Int64Counter
	releases metric.Int64Counter
	held     metric.Int64UpDownCounter
	ratio    metric.Float64Histogram
	warnings metric.Int64Counter

	// Options with the attribute sets of the fixed results and reasons,
	// built once (slices too, so a call allocates none): the renewal path
	// runs thousands of times a second with many locks.
	results map[observe.Result]measure
	reasons map[observe.Reason]measure
}

// measure is the options of one attribute set, for Add and for Record.
type measure struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

func newMeasure(kv attribute.KeyValue) measure {
	o := metric.WithAttributeSet(attribute.NewSet(kv))
	return measure{add: []metric.AddOption{o}, record: []metric.RecordOption{o}}
}

func newInstruments(m metric.Meter) instruments {
	// A failed instrument is reported to the global error handler, as the
	// OpenTelemetry API asks; the API still returns a working no-op
	// instrument, so the rest go on.
	check := func(err error) {
		if err != nil {
			otel.Handle(err)
		}
	}
	var in instruments
	var err error
	in.wait, err = m.Float64Histogram("dlock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from an Acquire or TryAcquire call to its result, by dlock.result."),
		metric.WithExplicitBucketBoundaries(waitBounds...))
	check(err)
	in.hold, err = m.Float64Histogram("dlock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a lock was held, recorded once when it ends: on release or on loss."),
		metric.WithExplicitBucketBoundaries(holdBounds...))
	check(err)
	in.renews, err = m.Int64Counter("dlock.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Background renewals of held locks, by dlock.result (ok, lost, error)."))
	check(err)
	in.losses, err = m.Int64Counter("dlock.losses", metric.WithUnit("{lock}"),
		metric.WithDescription("Held locks lost before release, by dlock.reason (taken_over, expired, hold_limit)."))
	check(err)
	in.releases, err = m.Int64Counter("dlock.releases", metric.WithUnit("{release}"),
		metric.WithDescription("Release calls, by dlock.result (ok, not_held, error)."))
	check(err)
	in.held, err = m.Int64UpDownCounter("dlock.held", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks held by this process now: acquired and neither released nor lost."))
	check(err)

	in.ratio, err = m.Float64Histogram("dlock.hold.ttl_ratio", metric.WithUnit("1"),
		metric.WithDescription("Time a lock was held divided by its TTL, recorded once when it ends: the work's run time against the lease it was sized for."),
		metric.WithExplicitBucketBoundaries(ratioBounds...))
	check(err)
	in.warnings, err = m.Int64Counter("dlock.hold.warnings", metric.WithUnit("{lock}"),
		metric.WithDescription("Holds that ran past their warning threshold (dlock.WithHoldWarning)."))
	check(err)
	in.results = prebuild(AttrResult, slices.Concat(observe.AcquireResults(), observe.RenewResults(), observe.ReleaseResults()))
	in.reasons = prebuild(AttrReason, observe.LostReasons())
	return in
}

// prebuild makes the attribute options of every value dlock lists (a value
// may appear twice: "error" is a result of every event).
func prebuild[T ~string](key attribute.Key, values []T) map[T]measure {
	m := make(map[T]measure, len(values))
	for _, v := range values {
		m[v] = newMeasure(key.String(string(v)))
	}
	return m
}

// attrs returns the prebuilt options for value, or builds them for a value
// that a newer core may add.
func attrs[T ~string](prebuilt map[T]measure, key attribute.Key, value T) measure {
	if m, ok := prebuilt[value]; ok {
		return m
	}
	return newMeasure(key.String(string(value)))
}

func (in instruments) acquire(ctx context.Context, e observe.AcquireEvent) {
	in.wait.Record(ctx, e.Wait.Seconds(), attrs(in.results, AttrResult, e.Result).record...)
	if e.Result == observe.ResultAcquired {
		in.held.Add(ctx, 1)
	}
}

func (in instruments) renew(e observe.RenewEvent) {
	in.renews.Add(context.Background(), 1, attrs(in.results, AttrResult, e.Result).add...)
}

func (in instruments) lost(e observe.LostEvent) {
	ctx := context.Background()
	in.losses.Add(ctx, 1, attrs(in.reasons, AttrReason, e.Reason).add...)
	in.ended(ctx, e.Held, e.TTL)
}

// release records a release and reports whether it ended the lock.
func (in instruments) release(ctx context.Context, e observe.ReleaseEvent) bool {
	in.releases.Add(ctx, 1, attrs(in.results, AttrResult, e.Result).add...)
	// A failed release leaves the lock held (a retry, or the lease
	// deadline, ends it later); after a loss, OnLost has ended it already.
	ends := e.Result != observe.ResultError && !e.AfterLoss
	if ends {
		in.ended(ctx, e.Held, e.TTL)
	}
	return ends
}

// ended records the end of a held lock; a Locker that tells no TTL (0)
// records no ratio.
func (in instruments) ended(ctx context.Context, held, ttl time.Duration) {
	in.hold.Record(ctx, held.Seconds())
	in.held.Add(ctx, -1)
	if ttl > 0 {
		in.ratio.Record(ctx, float64(held)/float64(ttl))
	}
}

func (in instruments) holdWarning() { in.warnings.Add(context.Background(), 1) }
