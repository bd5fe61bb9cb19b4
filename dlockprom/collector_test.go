package dlockprom_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockprom"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/observe"
)

// families is one scrape, parsed: metric families by name.
type families map[string]*dto.MetricFamily

// scraper serves a registry the way an application would, on a loopback
// httptest server, and reads it back the way Prometheus would: over HTTP,
// in the text exposition format, parsed.
type scraper struct {
	t   *testing.T
	srv *httptest.Server
}

func newScraper(t *testing.T, reg *prometheus.Registry) *scraper {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	t.Cleanup(srv.Close) // also closes srv.Client()'s idle connections
	return &scraper{t: t, srv: srv}
}

func (s *scraper) scrape() families {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.srv.URL+"/metrics", nil)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		s.t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		s.t.Fatalf("scrape: status %d, %v: %s", resp.StatusCode, err, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		s.t.Fatalf("scrape: content type %q, want the text format", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		s.t.Fatalf("parse scrape: %v\n%s", err, body)
	}
	return fams
}

// gather reads a registry without HTTP, for the tests that feed events to a
// Collector directly.
func gather(t *testing.T, g prometheus.Gatherer) families {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := families{}
	for _, mf := range mfs {
		fams[mf.GetName()] = mf
	}
	return fams
}

// labels is a label set written as "k=v,k=v" ("" for none).
func labelSet(s string) map[string]string {
	m := map[string]string{}
	if s == "" {
		return m
	}
	for kv := range strings.SplitSeq(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// find returns the sample of family name whose labels are exactly ls.
func (f families) find(t *testing.T, name, ls string) *dto.Metric {
	t.Helper()
	mf, ok := f[name]
	if !ok {
		t.Fatalf("no metric family %s in the scrape", name)
	}
	want := labelSet(ls)
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return m
		}
	}
	t.Fatalf("no sample %s{%s}; the family has %v", name, ls, mf.GetMetric())
	return nil
}

// value is a counter's or gauge's value, or a histogram's sample count.
func (f families) value(t *testing.T, name, ls string) float64 {
	t.Helper()
	m := f.find(t, name, ls)
	switch f[name].GetType() {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	case dto.MetricType_HISTOGRAM:
		return float64(m.GetHistogram().GetSampleCount())
	}
	t.Fatalf("%s has type %v", name, f[name].GetType())
	return 0
}

// expect checks samples given as "name{labels}" -> value.
func (f families) expect(t *testing.T, want map[string]float64) {
	t.Helper()
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		name, ls, _ := strings.Cut(strings.TrimSuffix(k, "}"), "{")
		if got := f.value(t, name, ls); got != want[k] {
			t.Errorf("%s = %v, want %v", k, got, want[k])
		}
	}
}

// events counts renewals by result and losses by reason: the exact number
// of renewals depends on timing, but the metric must match what the core
// reported.
type events struct {
	observe.BaseObserver
	mu sync.Mutex
	n  map[string]int // "renew:ok", "lost:taken_over"
}

func (r *events) add(k string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[k]++
}

func (r *events) OnRenew(e observe.RenewEvent) { r.add("renew:" + string(e.Result)) }
func (r *events) OnLost(e observe.LostEvent)   { r.add("lost:" + string(e.Reason)) }

func (r *events) count(k string) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return float64(r.n[k])
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func lint(t *testing.T, col prometheus.Collector) {
	t.Helper()
	problems, err := testutil.CollectAndLint(col)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestScrapeAfterRealLocks drives a dlock client against a real Redis
// through every kind of event and checks what a scrape of /metrics shows.
func TestScrapeAfterRealLocks(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	col := dlockprom.NewCollector()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	rec := &events{}
	c := dlock.MustNew(rdb, dlock.WithObserver(col), dlock.WithObserver(rec))
	t.Cleanup(func() { _ = c.Close(bg) })
	s := newScraper(t, reg)

	// Every series of the fixed labels exists before any event.
	s.scrape().expect(t, map[string]float64{
		"dlock_held":                                 0,
		"dlock_hold_seconds":                         0,
		"dlock_acquire_total{result=cancelled}":      0,
		"dlock_acquire_wait_seconds{result=timeout}": 0,
		"dlock_renew_total{result=error}":            0,
		"dlock_lost_total{reason=hold_limit}":        0,
		"dlock_release_total{result=not_held}":       0,
	})

	a, err := c.Acquire(bg, "a", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s.scrape().expect(t, map[string]float64{"dlock_held": 1})

	if _, err := c.TryAcquire(bg, "a"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryAcquire of a held lock: %v", err)
	}
	if _, err := c.Acquire(bg, "a", dlock.WithWait(50*time.Millisecond)); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Acquire of a held lock with a wait limit: %v", err)
	}
	cancelled, cancel := context.WithCancel(bg)
	cancel()
	if _, err := c.Acquire(cancelled, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire on a cancelled context: %v", err)
	}
	if _, err := c.TryAcquire(bg, ""); err == nil {
		t.Fatal("TryAcquire of an empty name succeeded")
	}

	b, err := c.Acquire(bg, "b", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s.scrape().expect(t, map[string]float64{"dlock_held": 2})

	// Renewal runs at a third of the TTL: about 100ms.
	waitFor(t, "a renewal", func() bool { return rec.count("renew:ok") >= 2 })

	if err := a.Release(bg); err != nil {
		t.Fatal(err)
	}
	s.scrape().expect(t, map[string]float64{
		"dlock_held":                     1,
		"dlock_hold_seconds":             1,
		"dlock_release_total{result=ok}": 1,
	})

	// Another holder's token in the lock's hash: the next renewal of b
	// finds the lock taken over.
	if err := rdb.HSet(bg, "dlock:{b}", "token", "intruder").Err(); err != nil {
		t.Fatal(err)
	}
	<-b.Context().Done()
	// The core cancels the lock's context first and then reports the
	// loss, so the holder hears of it as early as possible.
	waitFor(t, "the loss reported", func() bool { return rec.count("lost:taken_over") == 1 })
	s.scrape().expect(t, map[string]float64{
		"dlock_held":                          0,
		"dlock_hold_seconds":                  2,
		"dlock_lost_total{reason=taken_over}": 1,
		"dlock_renew_total{result=lost}":      1,
	})

	// Releasing the lost lock reports not_held, and must not count the
	// end of the lock a second time.
	if err := b.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release of a lost lock: %v", err)
	}

	f := s.scrape()
	f.expect(t, map[string]float64{
		"dlock_acquire_total{result=acquired}":         2,
		"dlock_acquire_total{result=busy}":             1,
		"dlock_acquire_total{result=timeout}":          1,
		"dlock_acquire_total{result=cancelled}":        1,
		"dlock_acquire_total{result=error}":            1,
		"dlock_acquire_wait_seconds{result=acquired}":  2,
		"dlock_acquire_wait_seconds{result=busy}":      1,
		"dlock_acquire_wait_seconds{result=timeout}":   1,
		"dlock_acquire_wait_seconds{result=cancelled}": 1,
		"dlock_acquire_wait_seconds{result=error}":     1,
		"dlock_renew_total{result=ok}":                 rec.count("renew:ok"),
		"dlock_renew_total{result=lost}":               1,
		"dlock_renew_total{result=error}":              0,
		"dlock_lost_total{reason=taken_over}":          1,
		"dlock_lost_total{reason=expired}":             0,
		"dlock_lost_total{reason=hold_limit}":          0,
		"dlock_release_total{result=ok}":               1,
		"dlock_release_total{result=not_held}":         1,
		"dlock_release_total{result=error}":            0,
		"dlock_hold_seconds":                           2,
		"dlock_held":                                   0,
	})
	if got := f.find(t, "dlock_renew_total", "result=ok").GetCounter().GetValue(); got < 2 {
		t.Errorf("dlock_renew_total{result=ok} = %v, want at least the 2 renewals waited for", got)
	}

	// The timed-out wait lasted its limit, and the buckets say so.
	timeout := f.find(t, "dlock_acquire_wait_seconds", "result=timeout").GetHistogram()
	if timeout.GetSampleSum() < 0.05 {
		t.Errorf("timed-out wait sums to %vs, want at least the 50ms limit", timeout.GetSampleSum())
	}
	for _, bk := range timeout.GetBucket() {
		le, n := bk.GetUpperBound(), bk.GetCumulativeCount()
		if (le < 0.05 && n != 0) || (le >= 1 && n != 1) {
			t.Errorf("timed-out wait of %vs: bucket le=%v has %d", timeout.GetSampleSum(), le, n)
		}
	}
	// a was held past a renewal (>100ms) and b until its loss.
	if sum := f.find(t, "dlock_hold_seconds", "").GetHistogram().GetSampleSum(); sum < 0.1 {
		t.Errorf("hold times sum to %vs, want more than 0.1s", sum)
	}
	lint(t, col)
}

// TestHeldGauge checks the held gauge and hold histogram against the core's
// rules for the end of a lock, event by event, including orders that are
// hard to produce against a real Redis (a failed release, then a loss).
func TestHeldGauge(t *testing.T) {
	acquired := observe.AcquireEvent{Name: "x", Result: observe.ResultAcquired, Wait: time.Millisecond, Fence: 1}
	release := func(result observe.Result, afterLoss bool) observe.ReleaseEvent {
		return observe.ReleaseEvent{Name: "x", Result: result, Held: time.Second, AfterLoss: afterLoss}
	}
	lost := observe.LostEvent{Name: "x", Reason: observe.ReasonExpired, Held: time.Second, Cause: dlock.ErrLockLost}
	tests := []struct {
		name   string
		events []any
		held   float64 // after all events
		holds  float64 // hold times observed
	}{
		{"released", []any{acquired, release(observe.ResultOK, false)}, 0, 1},
		{"released but expired in Redis", []any{acquired, release(observe.ResultNotHeld, false)}, 0, 1},
		{"lost then released", []any{acquired, lost, release(observe.ResultNotHeld, true)}, 0, 1},
		{"release failed", []any{acquired, release(observe.ResultError, false)}, 1, 0},
		{"release failed then retried", []any{acquired, release(observe.ResultError, false), release(observe.ResultOK, false)}, 0, 1},
		{"release failed then lost", []any{acquired, release(observe.ResultError, false), lost}, 0, 1},
		{"two held, one lost", []any{acquired, acquired, lost}, 1, 1},
		{"busy", []any{observe.AcquireEvent{Name: "x", Result: observe.ResultBusy}}, 0, 0},
		{"failed renewal", []any{acquired, observe.RenewEvent{Name: "x", Result: observe.ResultError, Err: errors.New("i/o timeout")}}, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			col := dlockprom.NewCollector()
			for _, e := range tt.events {
				switch e := e.(type) {
				case observe.AcquireEvent:
					col.OnAcquire(bg, e)
				case observe.RenewEvent:
					col.OnRenew(e)
				case observe.LostEvent:
					col.OnLost(e)
				case observe.ReleaseEvent:
					col.OnRelease(bg, e)
				}
			}
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(col)
			gather(t, reg).expect(t, map[string]float64{"dlock_held": tt.held, "dlock_hold_seconds": tt.holds})
		})
	}
}

// byKind maps "order:42" to "order": the bounded set the docs ask for.
func byKind(name string) string {
	kind, _, _ := strings.Cut(name, ":")
	return kind
}

func TestNameLabel(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	col := dlockprom.NewCollector(dlockprom.WithNameLabel(byKind))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	c := dlock.MustNew(rdb, dlock.WithObserver(col))
	t.Cleanup(func() { _ = c.Close(bg) })
	s := newScraper(t, reg)

	var locks []dlock.Lock
	for _, name := range []string{"order:1", "order:2", "user:7"} {
		l, err := c.TryAcquire(bg, name)
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	if _, err := c.TryAcquire(bg, "order:1"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryAcquire of a held lock: %v", err)
	}
	s.scrape().expect(t, map[string]float64{
		"dlock_acquire_total{name=order,result=acquired}":        2,
		"dlock_acquire_total{name=order,result=busy}":            1,
		"dlock_acquire_total{name=user,result=acquired}":         1,
		"dlock_acquire_wait_seconds{name=order,result=acquired}": 2,
		"dlock_held{name=order}":                                 2,
		"dlock_held{name=user}":                                  1,
	})
	for _, l := range locks {
		if err := l.Release(bg); err != nil {
			t.Fatal(err)
		}
	}
	f := s.scrape()
	f.expect(t, map[string]float64{
		"dlock_release_total{name=order,result=ok}": 2,
		"dlock_release_total{name=user,result=ok}":  1,
		"dlock_hold_seconds{name=order}":            2,
		"dlock_hold_seconds{name=user}":             1,
		"dlock_held{name=order}":                    0,
		"dlock_held{name=user}":                     0,
	})
	// The lock names themselves never become label values.
	for _, mf := range f {
		for _, m := range mf.GetMetric() {
			var name string
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "name" {
					name = lp.GetValue()
				}
			}
			if name != "order" && name != "user" {
				t.Errorf("%s has name label %q", mf.GetName(), name)
			}
		}
	}
	lint(t, col)
}

// A mapping that returns bytes that are not UTF-8 must not make the
// Prometheus client panic inside the caller's Acquire.
func TestNameLabelNotUTF8(t *testing.T) {
	col := dlockprom.NewCollector(dlockprom.WithNameLabel(func(string) string { return "bad\xff" }))
	col.OnAcquire(bg, observe.AcquireEvent{Name: "x", Result: observe.ResultAcquired})
	col.OnRenew(observe.RenewEvent{Name: "x", Result: observe.ResultOK})
	col.OnLost(observe.LostEvent{Name: "x", Reason: observe.ReasonExpired, Cause: dlock.ErrLockLost})
	col.OnRelease(bg, observe.ReleaseEvent{Name: "x", Result: observe.ResultNotHeld, AfterLoss: true})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	gather(t, reg).expect(t, map[string]float64{
		"dlock_acquire_total{name=bad\uFFFD,result=acquired}": 1,
		"dlock_held{name=bad\uFFFD}":                          0,
	})
}

// Two Collectors, one per dlock client, can share a registry when their
// const labels differ; the namespace prefixes every name.
func TestNamespaceAndConstLabels(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	cols := map[string]*dlockprom.Collector{}
	for _, client := range []string{"orders", "billing"} {
		cols[client] = dlockprom.NewCollector(
			dlockprom.WithNamespace("shop"),
			dlockprom.WithConstLabels(prometheus.Labels{"client": client}),
			dlockprom.WithWaitBuckets([]float64{0.01, 1}),
			dlockprom.WithHoldBuckets([]float64{60}),
		)
		if err := reg.Register(cols[client]); err != nil {
			t.Fatalf("register the %s collector: %v", client, err)
		}
	}
	cols["orders"].OnAcquire(bg, observe.AcquireEvent{Name: "x", Result: observe.ResultAcquired, Wait: 5 * time.Millisecond})
	f := gather(t, reg)
	f.expect(t, map[string]float64{
		"shop_dlock_held{client=orders}":                                 1,
		"shop_dlock_held{client=billing}":                                0,
		"shop_dlock_acquire_total{client=orders,result=acquired}":        1,
		"shop_dlock_acquire_wait_seconds{client=orders,result=acquired}": 1,
	})
	buckets := f.find(t, "shop_dlock_acquire_wait_seconds", "client=orders,result=acquired").GetHistogram().GetBucket()
	if len(buckets) != 2 || buckets[0].GetUpperBound() != 0.01 || buckets[0].GetCumulativeCount() != 1 {
		t.Errorf("wait buckets %v, want le=0.01 holding the 5ms wait, and le=1", buckets)
	}
	if _, ok := f["dlock_held"]; ok {
		t.Error("dlock_held without the namespace")
	}
	// A third Collector with the same labels is a duplicate, and the
	// registry must be able to tell: Describe has to describe everything.
	dup := dlockprom.NewCollector(dlockprom.WithNamespace("shop"), dlockprom.WithConstLabels(prometheus.Labels{"client": "orders"}))
	var already prometheus.AlreadyRegisteredError
	if err := reg.Register(dup); !errors.As(err, &already) {
		t.Fatalf("registering a duplicate collector: %v", err)
	}
	for _, col := range cols {
		lint(t, col)
	}
}

// The Collector describes exactly the metrics it collects, so a pedantic
// registry accepts it, and lints clean with every option.
func TestLintAllOptions(t *testing.T) {
	for _, col := range []*dlockprom.Collector{
		dlockprom.NewCollector(),
		dlockprom.NewCollector(dlockprom.WithNameLabel(byKind), dlockprom.WithNamespace("app"),
			dlockprom.WithConstLabels(prometheus.Labels{"client": "a"})),
	} {
		col.OnAcquire(bg, observe.AcquireEvent{Name: "order:1", Result: observe.ResultAcquired, Wait: time.Millisecond})
		col.OnRenew(observe.RenewEvent{Name: "order:1", Result: observe.ResultOK})
		col.OnLost(observe.LostEvent{Name: "order:1", Reason: observe.ReasonTakenOver, Held: time.Second, Cause: dlock.ErrLockLost})
		col.OnRelease(bg, observe.ReleaseEvent{Name: "order:1", Result: observe.ResultNotHeld, AfterLoss: true})
		lint(t, col)
		if n := testutil.CollectAndCount(col); n < 7 {
			t.Errorf("collected %d series, want at least one per metric", n)
		}
	}
}

// Buckets out of order would make the Prometheus client panic on the first
// event of a new label set, on the caller's goroutine: NewCollector refuses
// them at once instead.
func TestBucketsOutOfOrder(t *testing.T) {
	for _, opt := range []dlockprom.Option{
		dlockprom.WithWaitBuckets([]float64{1, 0.5}),
		dlockprom.WithHoldBuckets([]float64{1, 1}),
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "increasing order") {
					t.Errorf("NewCollector with bad buckets: recovered %v", r)
				}
			}()
			dlockprom.NewCollector(opt, dlockprom.WithNameLabel(byKind))
		}()
	}
}

// The hold-to-TTL ratio is observed once per ended hold that tells its TTL,
// and every hold warning is counted.
func TestHoldRatioAndWarnings(t *testing.T) {
	col := dlockprom.NewCollector()
	acquired := observe.AcquireEvent{Name: "x", Result: observe.ResultAcquired, Fence: 1}
	col.OnAcquire(bg, acquired)
	col.OnHoldWarning(observe.HoldWarningEvent{Name: "x", Fence: 1, Held: 12 * time.Second, TTL: time.Second, Threshold: 10 * time.Second})
	col.OnRelease(bg, observe.ReleaseEvent{Name: "x", Result: observe.ResultOK, Held: 12 * time.Second, TTL: time.Second})
	col.OnAcquire(bg, acquired)
	col.OnLost(observe.LostEvent{Name: "x", Reason: observe.ReasonExpired, Held: time.Second, TTL: 2 * time.Second, Cause: dlock.ErrLockLost})
	col.OnAcquire(bg, acquired)
	col.OnRelease(bg, observe.ReleaseEvent{Name: "x", Result: observe.ResultOK, Held: time.Second}) // a Locker that tells no TTL
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	f := gather(t, reg)
	f.expect(t, map[string]float64{"dlock_hold_ttl_ratio": 2, "dlock_hold_warnings_total": 1, "dlock_hold_seconds": 3})
	h := f["dlock_hold_ttl_ratio"].GetMetric()[0].GetHistogram()
	if got := h.GetSampleSum(); got != 12.5 {
		t.Fatalf("ratio sum %v, want 12.5 (12s on a 1s TTL, 1s on a 2s TTL)", got)
	}
}
