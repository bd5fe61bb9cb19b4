package dlockprom

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock/observe"
	"github.com/prometheus/client_golang/prometheus"
)

// Default histogram buckets, in seconds.
var (
	// DefaultWaitBuckets covers lock waits from 100µs (an uncontended
	// acquisition on a local Redis) to 30s (a long queue behind a slow
	// holder), about three buckets per decade.
	DefaultWaitBuckets = []float64{
		0.0001, 0.00025, 0.0005,
		0.001, 0.0025, 0.005,
		0.01, 0.025, 0.05,
		0.1, 0.25, 0.5,
		1, 2.5, 5,
		10, 30,
	}
	// DefaultHoldBuckets covers holds from a millisecond (a short critical
	// section) to an hour (a leader or a long batch job).
	DefaultHoldBuckets = []float64{
		0.001, 0.005, 0.01, 0.05, 0.1, 0.5,
		1, 5, 10, 30, 60,
		300, 900, 3600,
	}
	// DefaultHoldRatioBuckets are the buckets of dlock_hold_ttl_ratio:
	// holds in TTLs. Up to 1 the work fits its lease; above it, renewal
	// carried it; at dlock.DefaultHoldWarningTTLs a hold warning fires.
	DefaultHoldRatioBuckets = []float64{0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30, 100}
)

// Label values of the fixed labels, so every series exists from the start.
var (
	acquireResults = labelValues(observe.AcquireResults())
	renewResults   = labelValues(observe.RenewResults())
	lostReasons    = labelValues(observe.LostReasons())
	releaseResults = labelValues(observe.ReleaseResults())
)

func labelValues[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// Collector turns dlock's observer events into Prometheus metrics. Pass it to
// dlock.New with dlock.WithObserver and register it with a
// prometheus.Registerer. It is safe for concurrent use, and one Collector may
// observe several dlock Clients.
type Collector struct {
	observe.BaseObserver

	nameOf func(string) string // nil: no name label

	acquire *prometheus.CounterVec
	wait    *prometheus.HistogramVec
	hold    *prometheus.HistogramVec
	renew   *prometheus.CounterVec
	lost    *prometheus.CounterVec
	release *prometheus.CounterVec
	held    *prometheus.GaugeVec
	ratio   *prometheus.HistogramVec
	warned  *prometheus.CounterVec
}

var (
	_ observe.Observer     = (*Collector)(nil)
	_ prometheus.Collector = (*Collector)(nil)
)

// An Option configures a Collector.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	namespace   string
	constLabels prometheus.Labels
	nameOf      func(string) string
	waitBuckets []float64
	holdBuckets []float64
	fleet       fleetConfig // NewFleetCollector's
}

// WithNamespace puts ns and an underscore before every metric name
// (default: none), so WithNamespace("billing") gives
// billing_dlock_acquire_total.
func WithNamespace(ns string) Option {
	return optionFunc(func(c *config) { c.namespace = ns })
}

// WithConstLabels adds labels with fixed values to every metric (default:
// none). Two Collectors registered in one registry need different const
// labels, for example {"client": "orders"} and {"client": "billing"}, or the
// registry refuses the second one as a duplicate.
func WithConstLabels(l prometheus.Labels) Option {
	return optionFunc(func(c *config) {
		c.constLabels = make(prometheus.Labels, len(l))
		for k, v := range l {
			c.constLabels[k] = v
		}
	})
}

// WithNameLabel adds a label "name" to every metric, with the value
// f(lock name). Default: no name label.
//
// f must map names onto a small, bounded set, such as the part before the
// first colon ("order:42" to "order"): every distinct value is a new series
// of every metric, and of every bucket of the histograms, kept for the life
// of the process. Passing the lock name through unchanged makes the series
// grow with the data (one per order, per user) until the process and
// Prometheus run out of memory; do not do it unless the names themselves are
// a fixed, small set.
//
// f runs on dlock's hot paths (every acquire, renewal and release), so it
// must be quick and must not block. A value that is not valid UTF-8 is
// repaired rather than allowed to make the metrics library panic.
func WithNameLabel(f func(name string) string) Option {
	return optionFunc(func(c *config) { c.nameOf = f })
}

// WithWaitBuckets sets the buckets of dlock_acquire_wait_seconds, in
// seconds (default DefaultWaitBuckets).
func WithWaitBuckets(b []float64) Option {
	return optionFunc(func(c *config) { c.waitBuckets = append([]float64(nil), b...) })
}

// WithHoldBuckets sets the buckets of dlock_hold_seconds, in seconds
// (default DefaultHoldBuckets).
func WithHoldBuckets(b []float64) Option {
	return optionFunc(func(c *config) { c.holdBuckets = append([]float64(nil), b...) })
}

// NewCollector returns a Collector with the given options. It registers
// nothing: call reg.MustRegister(col) on the registry that serves /metrics.
// Bad label options (a const label named like a metric's own label, a value
// that is not UTF-8) are reported by the registry when the Collector is
// registered.
//
// NewCollector panics when buckets given to WithWaitBuckets or
// WithHoldBuckets are not in increasing order, as prometheus.NewHistogram
// does: the Prometheus client would otherwise panic later, on the first
// event of a new label set, inside the caller's Acquire.
func NewCollector(opts ...Option) *Collector {
	cfg := config{waitBuckets: DefaultWaitBuckets, holdBuckets: DefaultHoldBuckets}
	for _, o := range opts {
		o.apply(&cfg)
	}
	for _, b := range [][]float64{cfg.waitBuckets, cfg.holdBuckets} {
		for i := 1; i < len(b); i++ {
			if b[i] <= b[i-1] {
				panic(fmt.Sprintf("dlockprom: histogram buckets must be in increasing order: %v", b))
			}
		}
	}
	// The name label goes first so that a query grouping by name reads
	// naturally next to the per-event label.
	labels := func(ls ...string) []string {
		if cfg.nameOf != nil {
			return append([]string{"name"}, ls...)
		}
		return ls
	}
	counter := func(name, help string, ls ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: cfg.namespace, Subsystem: "dlock", Name: name, Help: help, ConstLabels: cfg.constLabels,
		}, labels(ls...))
	}
	histogram := func(name, help string, buckets []float64, ls ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: cfg.namespace, Subsystem: "dlock", Name: name, Help: help, ConstLabels: cfg.constLabels,
			Buckets: buckets,
		}, labels(ls...))
	}
	c := &Collector{
		nameOf: cfg.nameOf,
		acquire: counter("acquire_total",
			"Acquire and TryAcquire calls, by result (acquired, busy, timeout, cancelled, error).", "result"),
		wait: histogram("acquire_wait_seconds",
			"Time from an Acquire or TryAcquire call to its result, by result.", cfg.waitBuckets, "result"),
		hold: histogram("hold_seconds",
			"Time a lock was held, observed once when it ends: on release or on loss.", cfg.holdBuckets),
		renew: counter("renew_total",
			"Background renewals of held locks, by result (ok, lost, error).", "result"),
		lost: counter("lost_total",
			"Held locks lost before release, by reason (taken_over, expired, hold_limit).", "reason"),
		release: counter("release_total",
			"Release calls, by result (ok, not_held, error).", "result"),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: cfg.namespace, Subsystem: "dlock", Name: "held", ConstLabels: cfg.constLabels,
			Help: "Locks held by this process now: acquired and neither released nor lost.",
		}, labels()),
		ratio: histogram("hold_ttl_ratio",
			"Time a lock was held divided by its TTL, observed once when it ends: the work's run time against the lease it was sized for.",
			DefaultHoldRatioBuckets),
		warned: counter("hold_warnings_total",
			"Holds that ran past their warning threshold (dlock.WithHoldWarning; default dlock.DefaultHoldWarningTTLs TTLs)."),
	}
	if c.nameOf == nil {
		// Without a name label every label set is known: create them all at
		// zero, so rates and alerts work before the first event of a kind.
		for _, r := range acquireResults {
			c.acquire.WithLabelValues(r)
			c.wait.WithLabelValues(r)
		}
		for _, r := range renewResults {
			c.renew.WithLabelValues(r)
		}
		for _, r := range lostReasons {
			c.lost.WithLabelValues(r)
		}
		for _, r := range releaseResults {
			c.release.WithLabelValues(r)
		}
		c.hold.WithLabelValues()
		c.held.WithLabelValues()
		c.ratio.WithLabelValues()
		c.warned.WithLabelValues()
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics() {
		m.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.metrics() {
		m.Collect(ch)
	}
}

func (c *Collector) metrics() [9]prometheus.Collector {
	return [...]prometheus.Collector{c.acquire, c.wait, c.hold, c.renew, c.lost, c.release, c.held, c.ratio, c.warned}
}

// OnAcquire implements observe.Observer.
func (c *Collector) OnAcquire(_ context.Context, e observe.AcquireEvent) {
	if c.nameOf == nil {
		c.acquire.WithLabelValues(string(e.Result)).Inc()
		c.wait.WithLabelValues(string(e.Result)).Observe(e.Wait.Seconds())
		if e.Result == observe.ResultAcquired {
			c.held.WithLabelValues().Inc()
		}
		return
	}
	name := c.name(e.Name)
	c.acquire.WithLabelValues(name, string(e.Result)).Inc()
	c.wait.WithLabelValues(name, string(e.Result)).Observe(e.Wait.Seconds())
	if e.Result == observe.ResultAcquired {
		c.held.WithLabelValues(name).Inc()
	}
}

// OnRenew implements observe.Observer.
func (c *Collector) OnRenew(e observe.RenewEvent) {
	if c.nameOf == nil {
		c.renew.WithLabelValues(string(e.Result)).Inc()
		return
	}
	c.renew.WithLabelValues(c.name(e.Name), string(e.Result)).Inc()
}

// OnLost implements observe.Observer. A loss ends the lock: the held gauge
// goes down and the hold time is observed here, not again on the Release
// that follows (which has AfterLoss set).
func (c *Collector) OnLost(e observe.LostEvent) {
	if c.nameOf == nil {
		c.lost.WithLabelValues(string(e.Reason)).Inc()
		c.ended(e.Held, e.TTL)
		return
	}
	name := c.name(e.Name)
	c.lost.WithLabelValues(name, string(e.Reason)).Inc()
	c.ended(e.Held, e.TTL, name)
}

// OnRelease implements observe.Observer.
func (c *Collector) OnRelease(_ context.Context, e observe.ReleaseEvent) {
	// A failed release leaves the lock as it was (the caller may retry, or
	// the lease deadline reports a loss); a release after a loss ends
	// nothing that OnLost did not already end.
	ends := e.Result != observe.ResultError && !e.AfterLoss
	if c.nameOf == nil {
		c.release.WithLabelValues(string(e.Result)).Inc()
		if ends {
			c.ended(e.Held, e.TTL)
		}
		return
	}
	name := c.name(e.Name)
	c.release.WithLabelValues(name, string(e.Result)).Inc()
	if ends {
		c.ended(e.Held, e.TTL, name)
	}
}

// OnHoldWarning implements observe.Observer.
func (c *Collector) OnHoldWarning(e observe.HoldWarningEvent) {
	if c.nameOf == nil {
		c.warned.WithLabelValues().Inc()
		return
	}
	c.warned.WithLabelValues(c.name(e.Name)).Inc()
}

// ended records the end of a held lock; name is empty or the name label. A
// Locker that does not tell the TTL (0) records no ratio.
func (c *Collector) ended(held, ttl time.Duration, name ...string) {
	c.hold.WithLabelValues(name...).Observe(held.Seconds())
	c.held.WithLabelValues(name...).Dec()
	if ttl > 0 {
		c.ratio.WithLabelValues(name...).Observe(float64(held) / float64(ttl))
	}
}

// name is the name label for a lock name. The Prometheus client panics on
// label values that are not UTF-8, and a panic here would take down the
// caller's Acquire: repair the value instead.
func (c *Collector) name(lock string) string {
	v := c.nameOf(lock)
	if !utf8.ValidString(v) {
		v = strings.ToValidUTF8(v, "\uFFFD")
	}
	return v
}
