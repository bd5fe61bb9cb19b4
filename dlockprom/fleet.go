package dlockprom

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/inspect"
	"github.com/dlock-go/dlock/internal/flightcache"
)

// Defaults of the FleetCollector.
const (
	// DefaultCacheTTL is how long one listing of the fleet answers scrapes:
	// two Prometheus servers scraping every 15 s, or a scrape and an operator's
	// curl, cost one walk of the keyspace, not two.
	DefaultCacheTTL = 5 * time.Second
	// DefaultScanMaxKeys bounds the keys one listing looks at (about 100
	// SCAN calls): a few tens of milliseconds of Redis time in all, spread
	// over calls that each take well under a millisecond.
	DefaultScanMaxKeys = 100_000
	// DefaultScanMaxTime bounds one listing, well inside Prometheus'
	// default scrape timeout of 10 s.
	DefaultScanMaxTime = 3 * time.Second
	// DefaultMaxGroups bounds the group label.
	DefaultMaxGroups = 50
	// OtherGroup is the group of the names beyond the largest MaxGroups
	// groups.
	OtherGroup = "other"
)

// GroupBeforeColon is the default grouping of the FleetCollector: the part
// of a lock name before its first ':' ("order:42" is in group "order"), or
// the whole name when it has none.
func GroupBeforeColon(name string) string {
	g, _, _ := strings.Cut(name, ":")
	return g
}

// FleetCollector exports what Redis holds for every process that uses it:
// the locks held, their holders and waiters, and the oldest hold, by group
// of names and kind of lock. Where a Collector counts what one process's
// Client did, a FleetCollector reads the shared state, so one of them (in
// `dlock serve`, or in any one service) shows the whole fleet.
//
// The figures come from a walk of the keyspace (Client.Scan) when
// Prometheus scrapes, bounded in keys and in time (WithScanBudget); past
// the bound the figures are partial and dlock_fleet_truncated says so. One
// listing answers every scrape for WithCacheTTL, and scrapes that arrive
// while a listing is under way wait for it rather than start another, so
// Redis sees at most one walk at a time from a FleetCollector.
//
// It is safe for concurrent use and starts no goroutine: the listing runs
// in the goroutine of the scrape that found no fresh figures.
type FleetCollector struct {
	client *dlock.Client
	cfg    fleetConfig

	locks, holders, waiters, oldest *prometheus.Desc
	truncated, examined, duration   *prometheus.Desc
	timestamp                       *prometheus.Desc
	errors, listings                prometheus.Counter

	// One listing at a time, shared by the scrapes that come while it runs,
	// kept for cfg.ttl: the same cache as dlockadmin's listings.
	cache *flightcache.Cache[struct{}, *fleetFigures]
}

var _ prometheus.Collector = (*FleetCollector)(nil)

type fleetConfig struct {
	ttl       time.Duration
	maxKeys   int
	maxTime   time.Duration
	groupOf   func(string) string
	maxGroups int
	match     string
}

// fleetFigures are the result of one listing.
type fleetFigures struct {
	groups    map[groupKind]*groupFigures
	truncated bool
	examined  int
	took      time.Duration
	at        time.Time
}

type groupKind struct{ group, kind string }

type groupFigures struct {
	locks, holders, waiters int
	since                   time.Time // the oldest grant
	oldest                  time.Duration
}

// WithCacheTTL sets how long the figures of one listing answer scrapes
// (FleetCollector only; default DefaultCacheTTL). 0 lists on every scrape;
// scrapes at the same moment still share one listing.
func WithCacheTTL(d time.Duration) Option {
	return optionFunc(func(c *config) { c.fleet.ttl = d })
}

// WithScanBudget bounds one listing (FleetCollector only): maxKeys keys
// looked at by SCAN, all primaries together, whether they are dlock's keys
// or not (0: no bound; default DefaultScanMaxKeys), and maxTime (default
// DefaultScanMaxTime). A listing that reaches either bound exports what it
// read so far, with dlock_fleet_truncated 1.
//
// The time bound holds within one Redis call when the go-redis client was
// made with ContextTimeoutEnabled; without it a call that hangs waits for
// the client's ReadTimeout.
func WithScanBudget(maxKeys int, maxTime time.Duration) Option {
	return optionFunc(func(c *config) { c.fleet.maxKeys, c.fleet.maxTime = maxKeys, maxTime })
}

// WithGroups sets how lock names are grouped into the group label
// (FleetCollector only): f maps a name to its group (default
// GroupBeforeColon), and the max groups with the most locks keep their
// own label value; the names of the others are counted under OtherGroup
// (default DefaultMaxGroups). A nil f keeps the default grouping.
//
// The bound keeps the series per scrape at most about 4 × 3 × (max + 1)
// whatever names the fleet uses; f runs once per lock per listing, and a
// value that is not valid UTF-8 is repaired.
func WithGroups(f func(name string) string, max int) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.fleet.groupOf = f
		}
		c.fleet.maxGroups = max
	})
}

// WithMatch lists only the locks whose name matches the glob pattern, as
// Client.List's (FleetCollector only; default all).
func WithMatch(pattern string) Option {
	return optionFunc(func(c *config) { c.fleet.match = pattern })
}

// NewFleetCollector returns a FleetCollector reading the locks of client's
// Redis (under client's prefix). It registers nothing: call
// reg.MustRegister(fc). It reads the options WithNamespace,
// WithConstLabels, WithCacheTTL, WithScanBudget, WithGroups and WithMatch;
// the event Collector's options are ignored.
//
// A nil client or an option out of range is an error matching
// dlock.ErrInvalidOption that names the option and its bound.
func NewFleetCollector(client *dlock.Client, opts ...Option) (*FleetCollector, error) {
	cfg := config{fleet: fleetConfig{
		ttl: DefaultCacheTTL, maxKeys: DefaultScanMaxKeys, maxTime: DefaultScanMaxTime,
		groupOf: GroupBeforeColon, maxGroups: DefaultMaxGroups,
	}}
	for _, o := range opts {
		o.apply(&cfg)
	}
	fc := cfg.fleet
	var bad error
	switch {
	case client == nil:
		bad = errors.New("no dlock.Client")
	case fc.ttl < 0:
		bad = fmt.Errorf("WithCacheTTL %v is below 0", fc.ttl)
	case fc.maxKeys < 0:
		bad = fmt.Errorf("WithScanBudget: maxKeys %d is below 0", fc.maxKeys)
	case fc.maxTime <= 0:
		bad = fmt.Errorf("WithScanBudget: maxTime %v must be above 0: a listing must not hang a scrape", fc.maxTime)
	case fc.maxGroups < 1:
		bad = fmt.Errorf("WithGroups: max %d is below 1", fc.maxGroups)
	}
	if bad != nil {
		return nil, &dlock.Error{Op: "new fleet collector", Err: fmt.Errorf("%w: %w", dlock.ErrInvalidOption, bad)}
	}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(cfg.namespace, "dlock", name), help, labels, cfg.constLabels)
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: cfg.namespace, Subsystem: "dlock", Name: name, Help: help, ConstLabels: cfg.constLabels,
		})
	}
	return &FleetCollector{
		client: client, cfg: fc, cache: flightcache.New[struct{}, *fleetFigures](fc.ttl, 1),
		locks: desc("fleet_locks",
			"Names held in Redis now, by group of names and kind (exclusive, shared, semaphore).", "group", "kind"),
		holders: desc("fleet_holders",
			"Holders of the names held: 1 per exclusive lock, the readers of a shared one, the permits held of a semaphore.", "group", "kind"),
		waiters: desc("fleet_waiters",
			"Clients in line for the names held, by group and kind.", "group", "kind"),
		oldest: desc("fleet_oldest_hold_seconds",
			"Age of the oldest grant among the names held, by group and kind, on the Redis server's clock.", "group", "kind"),
		truncated: desc("fleet_truncated",
			"1 when the last listing stopped before the end of the keyspace (scan budget, time bound or error): the fleet figures are partial."),
		examined: desc("fleet_scan_keys",
			"Keys the last listing asked SCAN to look at: the part of the scan budget it spent."),
		duration: desc("fleet_scan_duration_seconds",
			"How long the last listing of the fleet took."),
		timestamp: desc("fleet_scan_timestamp_seconds",
			"When the last listing ended (Unix time): the figures are this old, up to the cache TTL."),
		errors: counter("fleet_scan_errors_total",
			"Listings of the fleet that failed: an error from Redis, or no reply at all within the time bound (the figures read before are exported, truncated)."),
		listings: counter("fleet_scans_total",
			"Listings of the fleet (walks of the keyspace); scrapes answered from the cache do not count."),
	}, nil
}

// Describe implements prometheus.Collector.
func (f *FleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{f.locks, f.holders, f.waiters, f.oldest, f.truncated, f.examined, f.duration, f.timestamp} {
		ch <- d
	}
	f.errors.Describe(ch)
	f.listings.Describe(ch)
}

// Collect implements prometheus.Collector: it lists the fleet, or takes the
// figures of a listing that is fresh or under way.
func (f *FleetCollector) Collect(ch chan<- prometheus.Metric) {
	fig := f.figures()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	keys := make([]groupKind, 0, len(fig.groups))
	for k := range fig.groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b groupKind) int {
		return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.kind, b.kind))
	})
	for _, k := range keys {
		g := fig.groups[k]
		gauge(f.locks, float64(g.locks), k.group, k.kind)
		gauge(f.holders, float64(g.holders), k.group, k.kind)
		gauge(f.waiters, float64(g.waiters), k.group, k.kind)
		gauge(f.oldest, g.oldest.Seconds(), k.group, k.kind)
	}
	truncated := 0.0
	if fig.truncated {
		truncated = 1
	}
	gauge(f.truncated, truncated)
	gauge(f.examined, float64(fig.examined))
	gauge(f.duration, fig.took.Seconds())
	gauge(f.timestamp, float64(fig.at.UnixNano())/1e9)
	f.errors.Collect(ch)
	f.listings.Collect(ch)
}

// figures returns fresh figures, from the cache, from the listing under
// way, or from a new listing run here. The listing is bounded in time, so
// the wait for it is too.
func (f *FleetCollector) figures() *fleetFigures {
	// Collect has no context: nobody gives up, and list reports a failure
	// in the figures it returns (truncated, an error counted).
	fig, _, _ := f.cache.Get(context.Background(), struct{}{}, func(context.Context) (*fleetFigures, error) {
		return f.list(), nil
	})
	return fig
}

// list walks the fleet once.
func (f *FleetCollector) list() (fig *fleetFigures) {
	start := time.Now()
	f.listings.Inc()
	// A panic (in the caller's grouping function) would fail the whole
	// Gather, every collector's metrics lost with the fleet's: report it
	// as a failed listing instead.
	defer func() {
		if r := recover(); r != nil {
			f.errors.Inc()
			fig = &fleetFigures{truncated: true, took: time.Since(start), at: time.Now()}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.maxTime)
	defer cancel()
	counts := map[groupKind]*groupFigures{}
	st, err := f.client.Scan(ctx, inspect.ScanOptions{Match: f.cfg.match, MaxKeys: f.cfg.maxKeys, Brief: true}, func(infos []inspect.LockInfo) {
		for _, info := range infos {
			k := groupKind{group: f.group(info.Name), kind: info.Kind}
			g := counts[k]
			if g == nil {
				g = &groupFigures{}
				counts[k] = g
			}
			g.locks++
			g.holders += holdersOf(info)
			g.waiters += int(info.Waiters)
			if g.since.IsZero() || info.Since.Before(g.since) {
				g.since = info.Since
			}
		}
	})
	for _, g := range counts {
		// Both on the server's clock; a grant made during the walk is
		// younger than its start, not negative.
		g.oldest = max(0, st.Now.Sub(g.since))
	}
	// Our own time bound ending the walk is a truncation, not a failure
	// of Redis; unless not even the first call (TIME) came back in time:
	// that is a Redis that cannot be reached.
	bounded := errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil && !st.Now.IsZero()
	if err != nil && !bounded {
		f.errors.Inc()
	}
	took := time.Since(start)
	return &fleetFigures{groups: f.cap(counts), truncated: st.Truncated || err != nil, examined: st.Examined, took: took, at: time.Now()}
}

// holdersOf is the holders of a held name: its readers, its permits, or its
// one holder.
func holdersOf(info inspect.LockInfo) int {
	switch info.Kind {
	case dlock.KindShared:
		return len(info.Readers)
	case dlock.KindSemaphore:
		return len(info.Holders)
	}
	return 1
}

func (f *FleetCollector) group(name string) string {
	g := f.cfg.groupOf(name)
	if !utf8.ValidString(g) {
		g = strings.ToValidUTF8(g, "\uFFFD")
	}
	return g
}

// cap keeps the maxGroups groups with the most locks (ties by name, so the
// same groups win from one scrape to the next) and folds the others into
// OtherGroup.
func (f *FleetCollector) cap(counts map[groupKind]*groupFigures) map[groupKind]*groupFigures {
	size := map[string]int{}
	for k, g := range counts {
		size[k.group] += g.locks
	}
	if len(size) <= f.cfg.maxGroups {
		return counts
	}
	groups := make([]string, 0, len(size))
	for g := range size {
		groups = append(groups, g)
	}
	slices.SortFunc(groups, func(a, b string) int { return cmp.Or(cmp.Compare(size[b], size[a]), cmp.Compare(a, b)) })
	keep := map[string]bool{}
	for _, g := range groups[:f.cfg.maxGroups] {
		keep[g] = true
	}
	out := map[groupKind]*groupFigures{}
	for k, g := range counts {
		if !keep[k.group] {
			k.group = OtherGroup
		}
		o := out[k]
		if o == nil {
			o = &groupFigures{}
			out[k] = o
		}
		o.locks += g.locks
		o.holders += g.holders
		o.waiters += g.waiters
		o.oldest = max(o.oldest, g.oldest)
	}
	return out
}
