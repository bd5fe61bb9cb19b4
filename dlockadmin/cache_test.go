package dlockadmin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockadmin"
	"github.com/dlock-go/dlock/internal/redistest"
)

// scanCounter counts the walks of the keyspace a client starts: SCAN
// calls with cursor 0.
type scanCounter struct{ walks atomic.Int64 }

func (*scanCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *scanCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() == "scan" && len(args) > 1 && fmt.Sprint(args[1]) == "0" {
			s.walks.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (*scanCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// countedServer serves the admin handler on a dlock client whose SCANs are
// counted.
func countedServer(t *testing.T, srv *redistest.Server, opts ...dlockadmin.Option) (*httptest.Server, *scanCounter, *dlock.Client) {
	t.Helper()
	rdb := srv.Client(t)
	var sc scanCounter
	rdb.AddHook(&sc)
	c := dlock.MustNew(rdb)
	t.Cleanup(func() { _ = c.Close(bg) })
	ts := httptest.NewServer(dlockadmin.MustNewHandler(c, opts...))
	t.Cleanup(ts.Close)
	return ts, &sc, c
}

func get(t *testing.T, ts *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := ts.Client().Get(ts.URL + path)
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Error(err)
	}
	return resp.StatusCode, string(b)
}

// N requests at once, to the page and the API, unauthenticated, cost Redis
// one walk of the keyspace, and the requests of the next seconds none: one
// listing runs at a time, concurrent requests share it, and its snapshot
// answers for the cache period. Before, every request walked the keyspace
// (twice: hashes, then semaphores).
func TestConcurrentListingsShareOneScan(t *testing.T) {
	srv := redistest.Start(t)
	ts, sc, c := countedServer(t, srv)
	acquire(t, c, "order:1")
	// Other data in the keyspace makes a walk long enough for the requests
	// to overlap.
	rdb := srv.Client(t)
	pipe := rdb.Pipeline()
	for i := range 20000 {
		pipe.Set(bg, fmt.Sprintf("other:%d", i), "x", 0)
	}
	if _, err := pipe.Exec(bg); err != nil {
		t.Fatal(err)
	}
	sc.walks.Store(0)

	const n = 8
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		path := "/api/locks"
		if i%2 == 1 {
			path = "/?match="
		}
		wg.Go(func() {
			<-start
			if status, body := get(t, ts, path); status != http.StatusOK || !strings.Contains(body, "order:1") {
				t.Errorf("GET %s: %d %.200s", path, status, body)
			}
		})
	}
	close(start)
	wg.Wait()
	if w := sc.walks.Load(); w > 1 {
		t.Fatalf("%d concurrent requests walked the keyspace %d times, want 1", n, w)
	}
	// Within the cache period: no walk at all.
	for range 3 {
		get(t, ts, "/api/locks")
	}
	if w := sc.walks.Load(); w > 1 {
		t.Fatalf("requests within the cache period walked the keyspace again (%d walks)", w)
	}
}

// After the cache period the next request lists again; a force unlock made
// through the handler is shown at once.
func TestCachePeriodAndUnlockRefresh(t *testing.T) {
	srv := redistest.Start(t)
	const period = 300 * time.Millisecond
	ts, sc, c := countedServer(t, srv, dlockadmin.WithCacheTTL(period), dlockadmin.WithForceUnlock(adminSecret))
	l := acquire(t, c, "order:1")
	get(t, ts, "/api/locks")
	acquire(t, c, "order:2")
	if _, body := get(t, ts, "/api/locks"); strings.Contains(body, "order:2") || sc.walks.Load() != 1 {
		t.Fatalf("within the period: %d walks, body has order:2: %t; want the kept listing", sc.walks.Load(), strings.Contains(body, "order:2"))
	}
	time.Sleep(period + 50*time.Millisecond)
	if _, body := get(t, ts, "/api/locks"); !strings.Contains(body, "order:2") || sc.walks.Load() != 2 {
		t.Fatalf("after the period: %d walks, body has order:2: %t; want a new listing", sc.walks.Load(), strings.Contains(body, "order:2"))
	}
	req, _ := http.NewRequest("POST", ts.URL+"/api/locks/order:1/unlock?fence="+fmt.Sprint(l.Fence()), nil)
	req.Header.Set("Authorization", "Bearer "+adminSecret)
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("unlock: %d", resp.StatusCode)
	}
	if _, body := get(t, ts, "/api/locks"); strings.Contains(body, `"order:1"`) {
		t.Fatalf("the listing after a force unlock still shows the lock: %.300s", body)
	}
}

// A keyspace full of other data costs one listing no more than its scan
// budget, and the API and the page say the listing is truncated.
func TestScanBudgetTruncates(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	pipe := rdb.Pipeline()
	for i := range 5000 {
		pipe.Set(bg, fmt.Sprintf("other:%d", i), "x", 0)
	}
	if _, err := pipe.Exec(bg); err != nil {
		t.Fatal(err)
	}
	const budget = 1000
	ts, _, c := countedServer(t, srv, dlockadmin.WithScanBudget(budget))
	acquire(t, c, "order:1")
	var scans atomic.Int64
	before := commandCalls(t, rdb, "scan")
	_, body := get(t, ts, "/api/locks")
	scans.Store(commandCalls(t, rdb, "scan") - before)
	var l struct {
		Truncated     bool `json:"truncated"`
		ScanTruncated bool `json:"scan_truncated"`
		KeysExamined  int  `json:"keys_examined"`
	}
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatal(err, body)
	}
	if !l.Truncated || !l.ScanTruncated || l.KeysExamined > budget {
		t.Fatalf("listing %+v of a 5000-key keyspace with a budget of %d, want truncated by the scan", l, budget)
	}
	if n := scans.Load(); n > budget/1000+1 {
		t.Fatalf("%d SCAN calls for a budget of %d keys", n, budget)
	}
	if _, page := get(t, ts, "/?match=x*"); !strings.Contains(page, "truncated: the scan stopped after") {
		t.Fatalf("the page does not say the listing is truncated: %.500s", page)
	}
	// A budget above the keyspace is not truncated.
	ts2, _, _ := countedServer(t, srv, dlockadmin.WithScanBudget(100_000))
	if _, body := get(t, ts2, "/api/locks"); !strings.Contains(body, `"scan_truncated": false`) || !strings.Contains(body, `"truncated": false`) {
		t.Fatalf("a listing within its budget: %.300s", body)
	}
}

// commandCalls is Redis' own count of calls of cmd (INFO commandstats).
func commandCalls(t *testing.T, rdb *redis.Client, cmd string) int64 {
	t.Helper()
	info, err := rdb.Info(bg, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}

func TestListingOptionsRefused(t *testing.T) {
	c := newClient(t, redistest.Start(t))
	for _, o := range []dlockadmin.Option{dlockadmin.WithCacheTTL(-time.Second), dlockadmin.WithScanBudget(0), dlockadmin.WithScanBudget(-1)} {
		if _, err := dlockadmin.NewHandler(c, o); err == nil {
			t.Errorf("an option out of range was accepted")
		}
	}
}
