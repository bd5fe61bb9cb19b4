package dlockprom_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockprom"
	"github.com/dlock-go/dlock/internal/redistest"
)

// cmdCounter is a go-redis hook that counts the commands sent by name
// (pipelined ones too) and can hold SCAN calls back.
type cmdCounter struct {
	mu     sync.Mutex
	n      map[string]int
	onScan func() // run before each SCAN is sent, if set
}

func (h *cmdCounter) count(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	for _, c := range cmds {
		h.n[c.Name()]++
	}
}

func (h *cmdCounter) get(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[name]
}

func (h *cmdCounter) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, v := range h.n {
		n += v
	}
	return n
}

func (h *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		if cmd.Name() == "scan" {
			h.mu.Lock()
			f := h.onScan
			h.mu.Unlock()
			if f != nil {
				f()
			}
		}
		return next(ctx, cmd)
	}
}

func (h *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

// fleet is a FleetCollector on its own Redis client (with a command
// counter) and registry.
type fleet struct {
	fc   *dlockprom.FleetCollector
	reg  *prometheus.Registry
	cmds *cmdCounter
}

func newFleet(t *testing.T, srv *redistest.Server, opts ...dlockprom.Option) *fleet {
	t.Helper()
	rdb := srv.Client(t)
	cmds := &cmdCounter{}
	rdb.AddHook(cmds)
	c := dlock.MustNew(rdb)
	t.Cleanup(func() { _ = c.Close(bg) })
	fc, err := dlockprom.NewFleetCollector(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(fc)
	return &fleet{fc: fc, reg: reg, cmds: cmds}
}

// holders are two dlock clients that hold locks of every kind, with
// waiters; their locks are released in t.Cleanup.
func holdKnownSet(t *testing.T, srv *redistest.Server) (acquiredAt time.Time) {
	t.Helper()
	ctx, cancel := context.WithCancel(bg)
	a := dlock.MustNew(srv.Client(t), dlock.WithDefaultOwner("a"))
	b := dlock.MustNew(srv.Client(t), dlock.WithDefaultOwner("b"))
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel() // ends the waits
		wg.Wait()
		_ = a.Close(bg)
		_ = b.Close(bg)
	})
	must := func(l dlock.Lock, err error) dlock.Lock {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	acquiredAt = time.Now()
	must(a.TryAcquire(ctx, "order:1"))
	must(a.TryAcquire(ctx, "order:2"))
	must(a.TryAcquire(ctx, "report:x", dlock.WithShared()))
	must(b.TryAcquire(ctx, "report:x", dlock.WithShared()))
	must(a.TryAcquire(ctx, "pool:db", dlock.WithPermits(2)))
	must(b.TryAcquire(ctx, "pool:db", dlock.WithPermits(2)))
	must(a.TryAcquire(ctx, "leader"))
	// Waiters: b for order:1, and for a third permit of pool:db.
	for _, w := range []struct {
		name string
		opts []dlock.AcquireOption
	}{{"order:1", nil}, {"pool:db", []dlock.AcquireOption{dlock.WithPermits(2)}}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := b.Acquire(ctx, w.name, append(w.opts, dlock.WithWait(time.Minute))...)
			if err == nil {
				_ = l.Release(bg)
			}
		}()
		waitFor(t, "a waiter on "+w.name, func() bool {
			info, err := a.Inspect(bg, w.name)
			return err == nil && info.Waiters == 1
		})
	}
	return acquiredAt
}

// Known locks of each kind, with waiters, are counted by group and kind;
// keys that are not locks (fences, queues, other data) are not.
func TestFleetFigures(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	for i := range 50 {
		if err := rdb.Set(bg, fmt.Sprintf("app:data:%d", i), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A released lock leaves its fence counter behind: not held.
	{
		c := dlock.MustNew(rdb)
		l, err := c.TryAcquire(bg, "order:gone")
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Release(bg)
		_ = c.Close(bg)
	}
	acquiredAt := holdKnownSet(t, srv)
	time.Sleep(300 * time.Millisecond)
	f := newFleet(t, srv)
	before := time.Now()
	fams := gather(t, f.reg)
	fams.expect(t, map[string]float64{
		`dlock_fleet_locks{group=order,kind=exclusive}`:    2,
		`dlock_fleet_holders{group=order,kind=exclusive}`:  2,
		`dlock_fleet_waiters{group=order,kind=exclusive}`:  1,
		`dlock_fleet_locks{group=leader,kind=exclusive}`:   1,
		`dlock_fleet_waiters{group=leader,kind=exclusive}`: 0,
		`dlock_fleet_locks{group=report,kind=shared}`:      1,
		`dlock_fleet_holders{group=report,kind=shared}`:    2,
		`dlock_fleet_waiters{group=report,kind=shared}`:    0,
		`dlock_fleet_locks{group=pool,kind=semaphore}`:     1,
		`dlock_fleet_holders{group=pool,kind=semaphore}`:   2,
		`dlock_fleet_waiters{group=pool,kind=semaphore}`:   1,
		`dlock_fleet_truncated`:                            0,
		`dlock_fleet_scans_total`:                          1,
		`dlock_fleet_scan_errors_total`:                    0,
	})
	if n := len(fams["dlock_fleet_locks"].GetMetric()); n != 4 {
		t.Errorf("dlock_fleet_locks has %d series, want 4: %v", n, fams["dlock_fleet_locks"].GetMetric())
	}
	// The oldest hold is at least the 300 ms slept since the grants, and
	// no older than the time since the first of them (both allowing for
	// the server's whole-millisecond clock).
	oldest := fams.value(t, "dlock_fleet_oldest_hold_seconds", "group=order,kind=exclusive")
	if upper := time.Since(acquiredAt).Seconds() + 0.01; oldest < 0.29 || oldest > upper {
		t.Errorf("oldest hold of order = %.3fs, want within [0.29, %.3f]", oldest, upper)
	}
	took := fams.value(t, "dlock_fleet_scan_duration_seconds", "")
	if took <= 0 || took > time.Since(before).Seconds() {
		t.Errorf("scan duration %v, want within (0, %v]", took, time.Since(before).Seconds())
	}
	if got := fams.value(t, "dlock_fleet_scan_keys", ""); got != 1000 {
		t.Errorf("scan keys %v, want one SCAN call of COUNT 1000", got)
	}
	lint(t, f.fc)
}

// Two scrapes within the cache TTL walk the keyspace once; after it, again.
func TestFleetCache(t *testing.T) {
	srv := redistest.Start(t)
	holdKnownSet(t, srv)
	f := newFleet(t, srv, dlockprom.WithCacheTTL(500*time.Millisecond))
	gather(t, f.reg)
	scans, total := f.cmds.get("scan"), f.cmds.total()
	if scans != 1 {
		t.Fatalf("first scrape sent %d SCAN, want 1", scans)
	}
	fams := gather(t, f.reg)
	if got := f.cmds.total(); got != total {
		t.Errorf("second scrape within the TTL sent %d more commands, want none", got-total)
	}
	fams.expect(t, map[string]float64{`dlock_fleet_scans_total`: 1, `dlock_fleet_locks{group=order,kind=exclusive}`: 2})
	time.Sleep(600 * time.Millisecond)
	fams = gather(t, f.reg)
	if got := f.cmds.get("scan"); got != 2*scans {
		t.Errorf("scrape after the TTL: %d SCAN calls in all, want %d", got, 2*scans)
	}
	fams.expect(t, map[string]float64{`dlock_fleet_scans_total`: 2})
}

// Scrapes that arrive while a listing is under way wait for it and share
// its figures, even with no cache at all.
func TestFleetConcurrentScrapesShareListing(t *testing.T) {
	srv := redistest.Start(t)
	holdKnownSet(t, srv)
	f := newFleet(t, srv, dlockprom.WithCacheTTL(0))
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.cmds.onScan = func() {
		once.Do(func() { close(started); <-release })
	}
	const scrapers = 5
	results := make(chan families, scrapers)
	var wg sync.WaitGroup
	scrape := func() {
		defer wg.Done()
		mfs, err := f.reg.Gather()
		if err != nil {
			t.Error(err)
			return
		}
		fams := families{}
		for _, mf := range mfs {
			fams[mf.GetName()] = mf
		}
		results <- fams
	}
	wg.Add(1)
	go scrape()
	<-started // the first scrape's listing is under way, held at its SCAN
	for range scrapers - 1 {
		wg.Add(1)
		go scrape()
	}
	// Time for the others to reach the wait; one that comes after the
	// listing ended would start its own (no cache) and fail the count.
	time.Sleep(300 * time.Millisecond)
	close(release)
	wg.Wait()
	close(results)
	if got := f.cmds.get("scan"); got != 1 {
		t.Errorf("%d concurrent scrapes sent %d SCAN calls, want 1 (one listing)", scrapers, got)
	}
	n := 0
	for fams := range results {
		n++
		fams.expect(t, map[string]float64{`dlock_fleet_scans_total`: 1, `dlock_fleet_locks{group=order,kind=exclusive}`: 2})
	}
	if n != scrapers {
		t.Errorf("%d scrapes answered, want %d", n, scrapers)
	}
}

// 20k keys of other data and a budget of 2000 keys: the listing stops at
// the budget and says so; without a budget it finds every lock.
func TestFleetBudgetTruncates(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const other = 20_000
	for i := 0; i < other; i += 1000 {
		pipe := rdb.Pipeline()
		for j := i; j < i+1000; j++ {
			pipe.Set(bg, fmt.Sprintf("cache:item:%d", j), "x", 0)
		}
		if _, err := pipe.Exec(bg); err != nil {
			t.Fatal(err)
		}
	}
	holdKnownSet(t, srv)

	f := newFleet(t, srv, dlockprom.WithScanBudget(2000, 5*time.Second))
	start := time.Now()
	fams := gather(t, f.reg)
	t.Logf("budget of 2000 keys over %d keys: scrape took %v", other, time.Since(start))
	fams.expect(t, map[string]float64{`dlock_fleet_truncated`: 1, `dlock_fleet_scan_keys`: 2000, `dlock_fleet_scan_errors_total`: 0})
	if got := f.cmds.get("scan"); got != 2 {
		t.Errorf("%d SCAN calls, want 2 (COUNT 1000 each)", got)
	}

	full := newFleet(t, srv, dlockprom.WithScanBudget(0, 5*time.Second))
	start = time.Now()
	fams = gather(t, full.reg)
	t.Logf("no key budget over %d keys: scrape took %v, %d SCAN calls", other, time.Since(start), full.cmds.get("scan"))
	fams.expect(t, map[string]float64{
		`dlock_fleet_truncated`:                         0,
		`dlock_fleet_locks{group=order,kind=exclusive}`: 2,
		`dlock_fleet_locks{group=pool,kind=semaphore}`:  1,
	})
}

// A listing slower than its time bound ends at the bound, truncated, not
// counted as an error, and the scrape returns.
func TestFleetTimeBoundTruncates(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	pipe := rdb.Pipeline()
	for i := range 5000 {
		pipe.Set(bg, fmt.Sprintf("cache:item:%d", i), "x", 0)
	}
	if _, err := pipe.Exec(bg); err != nil {
		t.Fatal(err)
	}
	holdKnownSet(t, srv)
	f := newFleet(t, srv, dlockprom.WithScanBudget(0, 300*time.Millisecond))
	f.cmds.onScan = func() { time.Sleep(150 * time.Millisecond) } // a slow Redis
	start := time.Now()
	fams := gather(t, f.reg)
	took := time.Since(start)
	fams.expect(t, map[string]float64{`dlock_fleet_truncated`: 1, `dlock_fleet_scan_errors_total`: 0})
	// Bound 300 ms; at most one slow call started before it runs past.
	if took > 800*time.Millisecond {
		t.Errorf("scrape took %v with a time bound of 300ms", took)
	}
	if got := f.cmds.get("scan"); got >= 5 {
		t.Errorf("%d SCAN calls: the walk went on past its time bound", got)
	}
}

// A Redis that is gone: the scrape returns, counts an error and says the
// figures are partial.
func TestFleetRedisError(t *testing.T) {
	srv := redistest.Start(t)
	f := newFleet(t, srv, dlockprom.WithScanBudget(0, time.Second))
	srv.Kill()
	start := time.Now()
	fams := gather(t, f.reg)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("scrape against a dead Redis took %v", took)
	}
	fams.expect(t, map[string]float64{`dlock_fleet_truncated`: 1, `dlock_fleet_scan_errors_total`: 1, `dlock_fleet_scans_total`: 1})
	if _, ok := fams["dlock_fleet_locks"]; ok {
		t.Errorf("fleet figures exported with nothing read: %v", fams["dlock_fleet_locks"])
	}
}

// Past the group bound, the groups with the most locks keep their label
// and the rest are counted as "other".
func TestFleetGroupsBounded(t *testing.T) {
	srv := redistest.Start(t)
	c := dlock.MustNew(srv.Client(t))
	t.Cleanup(func() { _ = c.Close(bg) })
	names := []string{"big:1", "big:2", "big:3", "mid:1", "mid:2", "a:1", "z:1", "solo"}
	for _, n := range names {
		if _, err := c.TryAcquire(bg, n); err != nil {
			t.Fatal(err)
		}
	}
	f := newFleet(t, srv, dlockprom.WithGroups(nil, 2))
	fams := gather(t, f.reg)
	fams.expect(t, map[string]float64{
		`dlock_fleet_locks{group=big,kind=exclusive}`:   3,
		`dlock_fleet_locks{group=mid,kind=exclusive}`:   2,
		`dlock_fleet_locks{group=other,kind=exclusive}`: 3,
	})
	if n := len(fams["dlock_fleet_locks"].GetMetric()); n != 3 {
		t.Errorf("%d series with a bound of 2 groups, want 3 (2 and other)", n)
	}

	// A grouping of the caller's, with a name that is not UTF-8.
	g := newFleet(t, srv, dlockprom.WithGroups(func(name string) string {
		if strings.HasPrefix(name, "big") {
			return "b\xff"
		}
		return "rest"
	}, 10))
	gather(t, g.reg).expect(t, map[string]float64{
		"dlock_fleet_locks{group=b\uFFFD,kind=exclusive}": 3,
		`dlock_fleet_locks{group=rest,kind=exclusive}`:    5,
	})
}

func TestNewFleetCollectorBadOptions(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	c := dlock.MustNew(rdb)
	defer c.Close(bg)
	for _, tc := range []struct {
		name   string
		client *dlock.Client
		opt    dlockprom.Option
		want   string
	}{
		{"nil client", nil, dlockprom.WithCacheTTL(time.Second), "no dlock.Client"},
		{"negative ttl", c, dlockprom.WithCacheTTL(-time.Second), "WithCacheTTL -1s is below 0"},
		{"negative keys", c, dlockprom.WithScanBudget(-1, time.Second), "maxKeys -1 is below 0"},
		{"no time bound", c, dlockprom.WithScanBudget(10, 0), "maxTime 0s must be above 0"},
		{"no group", c, dlockprom.WithGroups(nil, 0), "WithGroups: max 0 is below 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc, err := dlockprom.NewFleetCollector(tc.client, tc.opt)
			var de *dlock.Error
			if fc != nil || !errors.Is(err, dlock.ErrInvalidOption) || !errors.As(err, &de) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, %v; want a *dlock.Error matching ErrInvalidOption saying %q", fc, err, tc.want)
			}
		})
	}
}

// A Redis that stopped answering (SIGSTOP) holds no scrape past the time
// bound, concurrent ones included: the listing ends at its bound, counted
// as an error (not even the first reply came back).
func TestFleetScrapeDoesNotHang(t *testing.T) {
	srv := redistest.Start(t)
	holdKnownSet(t, srv)
	f := newFleet(t, srv, dlockprom.WithCacheTTL(0), dlockprom.WithScanBudget(0, 500*time.Millisecond))
	gather(t, f.reg) // connections made while Redis answered
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.reg.Gather(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("3 scrapes of a stopped Redis took %v with a time bound of 500ms", took)
	}
	fams := gather(t, f.reg)
	if got := fams.value(t, "dlock_fleet_scan_errors_total", ""); got < 1 {
		t.Errorf("dlock_fleet_scan_errors_total = %v, want at least 1", got)
	}
	fams.expect(t, map[string]float64{`dlock_fleet_truncated`: 1})
}

// A grouping function that panics fails the listing, counted, rather than
// the whole scrape.
func TestFleetGroupPanic(t *testing.T) {
	srv := redistest.Start(t)
	holdKnownSet(t, srv)
	f := newFleet(t, srv, dlockprom.WithGroups(func(name string) string { panic("bad grouping") }, 10))
	gather(t, f.reg).expect(t, map[string]float64{`dlock_fleet_truncated`: 1, `dlock_fleet_scan_errors_total`: 1})
	gather(t, f.reg) // answered from the cache, not stuck behind the failed listing
}
