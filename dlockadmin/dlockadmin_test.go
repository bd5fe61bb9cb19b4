package dlockadmin_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockadmin"
	"github.com/dlock-go/dlock/internal/redistest"
)

const (
	// helperEnv makes the test binary a lock holder (holderProcess) instead
	// of running tests.
	helperEnv   = "DLOCKADMIN_TEST_HOLDER"
	adminSecret = "s3cret-admin-token-for-tests-only"
)

var bg = context.Background()

// exampleAddr is the redis-server of the Example functions, started by
// TestMain.
var exampleAddr string

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(holderProcess())
	}
	os.Exit(redistest.RunMain(m, &exampleAddr))
}

// holderProcess is the body of a holder process: acquire LOCK for TTL
// through REDIS_ADDR, print "held", report "lost" if the lock is taken away,
// and release when stdin closes.
func holderProcess() int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	c := dlock.MustNew(rdb)
	defer c.Close(bg)
	ttl, err := time.ParseDuration(os.Getenv("TTL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 2
	}
	lock, err := c.Acquire(bg, os.Getenv("LOCK"), dlock.WithTTL(ttl))
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	var out sync.Mutex
	say := func(s string) { out.Lock(); fmt.Println(s); out.Unlock() }
	say("held")
	stdinClosed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stdinClosed) }()
	select {
	case <-lock.Context().Done():
		say("lost: " + context.Cause(lock.Context()).Error())
		<-stdinClosed
	case <-stdinClosed:
	}
	_ = lock.Release(bg)
	return 0
}

// holder is a lock held by another process.
type holder struct {
	pid   int
	lines chan string // its stdout, line by line
}

// startHolder re-executes the test binary as a process that holds name and
// waits until it reports "held". The process releases and exits when the test
// ends (stdin closes); it is killed if it does not.
func startHolder(t *testing.T, addr, name string, ttl time.Duration) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "REDIS_ADDR="+addr, "LOCK="+name, "TTL="+ttl.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{pid: cmd.Process.Pid, lines: make(chan string, 16)}
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(h.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case h.lines <- sc.Text():
			default: // nobody reads: drop rather than block the child
			}
		}
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		exited := make(chan struct{})
		go func() { <-read; _ = cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	if line := h.next(t, 10*time.Second); line != "held" {
		t.Fatalf("holder process said %q, want held", line)
	}
	return h
}

func (h *holder) next(t *testing.T, within time.Duration) string {
	t.Helper()
	select {
	case line, ok := <-h.lines:
		if !ok {
			t.Fatal("holder process ended")
		}
		return line
	case <-time.After(within):
		t.Fatalf("holder process said nothing for %v", within)
		return ""
	}
}

// owner is the default owner dlock writes for a process.
func (h *holder) owner() string {
	host, _ := os.Hostname()
	return host + "/" + strconv.Itoa(h.pid)
}

// env is one test's Redis, dlock client, admin server and audit log.
type env struct {
	srv   *redistest.Server
	c     *dlock.Client
	ts    *httptest.Server
	audit *syncBuffer
}

func setup(t *testing.T, opts ...dlockadmin.Option) *env {
	t.Helper()
	srv := redistest.Start(t)
	e := &env{srv: srv, c: newClient(t, srv), audit: &syncBuffer{}}
	logger := slog.New(slog.NewJSONHandler(e.audit, nil))
	e.ts = httptest.NewServer(dlockadmin.MustNewHandler(e.c, append([]dlockadmin.Option{dlockadmin.WithLogger(logger)}, opts...)...))
	t.Cleanup(e.ts.Close)
	return e
}

// newClient returns a dlock client of its own (its own waiter identity in
// Redis), closed when the test ends.
func newClient(t *testing.T, srv *redistest.Server, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c := dlock.MustNew(srv.Client(t), opts...)
	t.Cleanup(func() { _ = c.Close(bg) })
	return c
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// entries returns the audit log's JSON lines.
func (s *syncBuffer) entries(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(s.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// do sends a request to the admin server and returns the status and body.
func (e *env) do(t *testing.T, method, path string, body io.Reader, header http.Header) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(bg, method, e.ts.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

type lockJSON struct {
	Name        string    `json:"name"`
	Owner       string    `json:"owner"`
	TokenPrefix string    `json:"token_prefix"`
	Fence       int64     `json:"fence"`
	TTLms       int64     `json:"ttl_ms"`
	LeaseMs     int64     `json:"lease_ms"`
	AgeMs       int64     `json:"age_ms"`
	Since       time.Time `json:"since"`
	Waiters     int64     `json:"waiters"`
}

type listJSON struct {
	Locks       []lockJSON `json:"locks"`
	Hottest     []lockJSON `json:"hottest"`
	Longest     []lockJSON `json:"longest"`
	Match       string     `json:"match"`
	Limit       int        `json:"limit"`
	Truncated   bool       `json:"truncated"`
	GeneratedAt time.Time  `json:"generated_at"`
}

func (e *env) list(t *testing.T, query string) listJSON {
	t.Helper()
	status, body, _ := e.do(t, "GET", "/api/locks"+query, nil, nil)
	if status != http.StatusOK {
		t.Fatalf("GET /api/locks%s: %d %s", query, status, body)
	}
	var l listJSON
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatalf("GET /api/locks%s: %v in %s", query, err, body)
	}
	if l.Locks == nil || l.Hottest == nil || l.Longest == nil {
		t.Fatalf("GET /api/locks%s: null lists in %s", query, body)
	}
	return l
}

func names(ls []lockJSON) []string {
	out := []string{}
	for _, l := range ls {
		out = append(out, l.Name)
	}
	return out
}

func acquire(t *testing.T, c *dlock.Client, name string) dlock.Lock {
	t.Helper()
	l, err := c.TryAcquire(bg, name, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatalf("acquire %q: %v", name, err)
	}
	t.Cleanup(func() { _ = l.Release(bg) })
	return l
}

func TestListsLockOfAnotherProcess(t *testing.T) {
	e := setup(t)
	const name = "job:nightly-report"
	h := startHolder(t, e.srv.Addr, name, 30*time.Second)
	info, err := e.c.Inspect(bg, name)
	if err != nil {
		t.Fatal(err)
	}

	status, body, hdr := e.do(t, "GET", "/api/locks", nil, nil)
	if status != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /api/locks: %d %s %s", status, hdr.Get("Content-Type"), body)
	}
	if strings.Contains(body, info.Token) {
		t.Fatalf("the full token %s is in the listing: %s", info.Token, body)
	}
	var l listJSON
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Locks) != 1 {
		t.Fatalf("locks = %v, want the holder's one", names(l.Locks))
	}
	got := l.Locks[0]
	if got.Name != name || got.Owner != h.owner() || got.TokenPrefix != info.Token[:8] || got.Fence != info.Fence || got.Fence <= 0 {
		t.Errorf("lock = %+v; want name %q, owner %q, token prefix %q, fence %d", got, name, h.owner(), info.Token[:8], info.Fence)
	}
	if got.LeaseMs != 30000 || got.TTLms <= 0 || got.TTLms > 30000 {
		t.Errorf("lease_ms = %d, ttl_ms = %d; want 30000 and (0, 30000]", got.LeaseMs, got.TTLms)
	}
	if got.AgeMs < 0 || got.AgeMs > 60000 || time.Since(got.Since).Abs() > time.Minute || got.Waiters != 0 {
		t.Errorf("age_ms = %d, since = %v, waiters = %d", got.AgeMs, got.Since, got.Waiters)
	}
	if !slices.Equal(names(l.Longest), []string{name}) || len(l.Hottest) != 0 || l.Truncated || l.Limit != dlockadmin.DefaultLimit {
		t.Errorf("longest = %v, hottest = %v, truncated = %v, limit = %d", names(l.Longest), names(l.Hottest), l.Truncated, l.Limit)
	}
	if time.Since(l.GeneratedAt).Abs() > time.Minute {
		t.Errorf("generated_at = %v", l.GeneratedAt)
	}

	// One lock: by name, with '/' in a name escaped or not.
	status, body, _ = e.do(t, "GET", "/api/locks/"+url.PathEscape(name), nil, nil)
	var one lockJSON
	if status != http.StatusOK || json.Unmarshal([]byte(body), &one) != nil || one.Fence != info.Fence || one.Owner != h.owner() {
		t.Errorf("GET /api/locks/%s: %d %s", name, status, body)
	}
	if strings.Contains(body, info.Token) {
		t.Errorf("the full token is in %s", body)
	}
	if status, body, _ := e.do(t, "GET", "/api/locks/nobody-holds-this", nil, nil); status != http.StatusNotFound || !strings.Contains(body, "nobody holds it") {
		t.Errorf("GET a free lock: %d %s, want 404", status, body)
	}

	// The page shows it too, without the token.
	status, body, _ = e.do(t, "GET", "/", nil, nil)
	if status != http.StatusOK || !strings.Contains(body, name) || !strings.Contains(body, h.owner()) || strings.Contains(body, info.Token) {
		t.Errorf("GET /: %d, name shown %v, owner shown %v, token hidden %v",
			status, strings.Contains(body, name), strings.Contains(body, h.owner()), !strings.Contains(body, info.Token))
	}
}

func TestMatchAndLimit(t *testing.T) {
	e := setup(t)
	for _, n := range []string{"order:1", "order:2", "order:3", "user:1", "a/b"} {
		acquire(t, e.c, n)
	}
	for _, tc := range []struct {
		query string
		want  []string
		trunc bool
	}{
		{"", []string{"a/b", "order:1", "order:2", "order:3", "user:1"}, false},
		{"?match=order:*", []string{"order:1", "order:2", "order:3"}, false},
		{"?match=user:*", []string{"user:1"}, false},
		{"?match=order:[12]", []string{"order:1", "order:2"}, false},
		{"?match=nothing:*", []string{}, false},
		{"?match=order:*&limit=3", []string{"order:1", "order:2", "order:3"}, false},
		{"?match=*&limit=5", []string{"a/b", "order:1", "order:2", "order:3", "user:1"}, false},
	} {
		l := e.list(t, tc.query)
		if got := names(l.Locks); !slices.Equal(got, tc.want) || l.Truncated != tc.trunc {
			t.Errorf("GET /api/locks%s: %v truncated=%v, want %v truncated=%v", tc.query, got, l.Truncated, tc.want, tc.trunc)
		}
	}
	// A limit below the number held cuts the listing and says so.
	l := e.list(t, "?match=order:*&limit=2")
	if len(l.Locks) != 2 || !l.Truncated || l.Limit != 2 {
		t.Errorf("limit=2: %v truncated=%v limit=%d", names(l.Locks), l.Truncated, l.Limit)
	}
	// The page filters the same way.
	_, body, _ := e.do(t, "GET", "/?match=user:*", nil, nil)
	if !strings.Contains(body, "user:1") || strings.Contains(body, "order:1") {
		t.Errorf("page with match=user:* shows the wrong locks")
	}
	if _, body, _ := e.do(t, "GET", "/api/locks/a/b", nil, nil); !strings.Contains(body, `"name": "a/b"`) {
		t.Errorf("GET /api/locks/a/b: %s", body)
	}
}

func TestBadInput(t *testing.T) {
	e := setup(t, dlockadmin.WithLimit(50))
	long := strings.Repeat("x", 2*dlock.MaxNameLength+1)
	for _, tc := range []struct{ query, want string }{
		{"?limit=abc", "limit"},
		{"?limit=0", "limit"},
		{"?limit=-3", "limit"},
		{"?limit=51", "from 1 to 50"},
		{"?limit=1e3", "limit"},
		{"?limit=99999999999999999999999", "limit"},
		{"?match=" + long, "match pattern"},
	} {
		status, body, _ := e.do(t, "GET", "/api/locks"+tc.query, nil, nil)
		if status != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("GET /api/locks%.40s: %d %.200s, want 400 naming %q", tc.query, status, body, tc.want)
		}
		status, body, _ = e.do(t, "GET", "/"+tc.query, nil, nil)
		if status != http.StatusBadRequest || !strings.Contains(body, tc.want) || !strings.Contains(body, "<form") {
			t.Errorf("GET /%.40s: %d, want 400 with the message and the filter form", tc.query, status)
		}
	}
	if status, body, _ := e.do(t, "GET", "/api/locks/"+strings.Repeat("n", dlock.MaxNameLength+1), nil, nil); status != http.StatusBadRequest {
		t.Errorf("GET a too long name: %d %s, want 400", status, body)
	}
	if status, _, _ := e.do(t, "GET", "/api/locks/", nil, nil); status != http.StatusBadRequest {
		t.Errorf("GET /api/locks/: %d, want 400", status)
	}
	if status, _, _ := e.do(t, "DELETE", "/api/locks/x", nil, nil); status != http.StatusMethodNotAllowed {
		t.Errorf("DELETE /api/locks/x: %d, want 405", status)
	}
	if status, _, _ := e.do(t, "GET", "/nowhere", nil, nil); status != http.StatusNotFound {
		t.Errorf("GET /nowhere: %d, want 404", status)
	}
}

// addWaiters lines up n clients waiting for name, each a dlock client of its
// own (dlock queues one entry per client and name), until the test ends.
func addWaiters(t *testing.T, srv *redistest.Server, name string, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(bg)
	var wg sync.WaitGroup
	for range n {
		c := newClient(t, srv)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l, err := c.Acquire(ctx, name, dlock.WithTTL(30*time.Second), dlock.WithWait(time.Minute)); err == nil {
				_ = l.Release(bg)
			}
		}()
	}
	// Registered after the clients' Close, so it runs before them.
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// waitFor polls cond every 20ms for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestHottestAndLongest(t *testing.T) {
	e := setup(t)
	// Twelve locks acquired a few milliseconds apart (Since has millisecond
	// precision), so "longest" has one right order and is cut at TopN.
	var all []string
	for i := range 12 {
		n := fmt.Sprintf("lock-%02d", 11-i) // the oldest has the largest number: order by age, not name
		acquire(t, e.c, n)
		all = append(all, n)
		time.Sleep(3 * time.Millisecond)
	}
	addWaiters(t, e.srv, "lock-05", 3)
	addWaiters(t, e.srv, "lock-09", 1)
	addWaiters(t, e.srv, "lock-02", 2)
	waitFor(t, "6 waiters", func() bool {
		l := e.list(t, "")
		var sum int64
		for _, x := range l.Locks {
			sum += x.Waiters
		}
		return sum == 6
	})

	l := e.list(t, "")
	if got, want := names(l.Hottest), []string{"lock-05", "lock-02", "lock-09"}; !slices.Equal(got, want) {
		t.Errorf("hottest = %v, want %v", got, want)
	}
	if got, want := names(l.Longest), all[:dlockadmin.TopN]; !slices.Equal(got, want) {
		t.Errorf("longest = %v, want %v", got, want)
	}
	for i := 1; i < len(l.Longest); i++ {
		if l.Longest[i].AgeMs > l.Longest[i-1].AgeMs {
			t.Errorf("longest not by age: %+v", l.Longest)
		}
	}
	// The page shows both sections.
	_, body, _ := e.do(t, "GET", "/", nil, nil)
	for _, s := range []string{"Hottest names", "Longest holders", "lock-05"} {
		if !strings.Contains(body, s) {
			t.Errorf("page lacks %q", s)
		}
	}
}

// unlock posts to the API's force unlock.
func (e *env) unlock(t *testing.T, name, fence string, header http.Header) (int, string) {
	t.Helper()
	path := "/api/locks/" + url.PathEscape(name) + "/unlock"
	if fence != "" {
		path += "?fence=" + url.QueryEscape(fence)
	}
	status, body, hdr := e.do(t, "POST", path, nil, header)
	if status == http.StatusUnauthorized && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("401 without WWW-Authenticate: Bearer")
	}
	return status, body
}

func bearerHeader(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

func TestForceUnlockDisabled(t *testing.T) {
	e := setup(t) // no WithForceUnlock
	l := acquire(t, e.c, "orders")
	fence := strconv.FormatInt(l.Fence(), 10)
	for _, h := range []http.Header{nil, bearerHeader(""), bearerHeader(adminSecret)} {
		if status, body := e.unlock(t, "orders", fence, h); status != http.StatusForbidden || !strings.Contains(body, "disabled") {
			t.Errorf("unlock on a read-only handler: %d %s, want 403", status, body)
		}
	}
	form := url.Values{"name": {"orders"}, "fence": {fence}, "admin_token": {adminSecret}}
	// The form's answer is the page, after a redirect, with the refusal.
	status, body, _ := e.do(t, "POST", "/unlock", strings.NewReader(form.Encode()), http.Header{"Content-Type": {"application/x-www-form-urlencoded"}})
	if status != http.StatusOK || !strings.Contains(body, `class="box bad"`) || !strings.Contains(body, "force unlock is disabled") {
		t.Errorf("form unlock on a read-only handler: %d, want the page with the refusal:\n%s", status, body)
	}
	if _, body, _ := e.do(t, "GET", "/", nil, nil); strings.Contains(body, `<form class="unlock"`) || strings.Contains(body, `id="admin-token"`) ||
		!strings.Contains(body, "Read-only view: force unlock is disabled ("+dlockadmin.DefaultReadOnlyHint+")") {
		t.Errorf("read-only page shows unlock forms, or no hint to enable them:\n%s", body)
	}
	if _, err := e.c.Inspect(bg, "orders"); err != nil {
		t.Fatalf("lock gone after refused unlocks: %v", err)
	}
}

func TestForceUnlockRefusals(t *testing.T) {
	e := setup(t, dlockadmin.WithForceUnlock(adminSecret))
	l := acquire(t, e.c, "orders")
	fence := strconv.FormatInt(l.Fence(), 10)
	for _, tc := range []struct {
		name, lock, fence string
		header            http.Header
		status            int
		want              string
	}{
		{"no token", "orders", fence, nil, 401, "admin token"},
		{"empty token", "orders", fence, bearerHeader(""), 401, "admin token"},
		{"wrong token", "orders", fence, bearerHeader("guess"), 401, "wrong admin token"},
		{"right token, longer", "orders", fence, bearerHeader(adminSecret + "x"), 401, "wrong admin token"},
		{"basic auth", "orders", fence, http.Header{"Authorization": {"Basic " + adminSecret}}, 401, "admin token"},
		{"cross-origin", "orders", fence, http.Header{
			"Authorization":  {"Bearer " + adminSecret},
			"Origin":         {"https://evil.example"},
			"Sec-Fetch-Site": {"cross-site"},
		}, 403, "cross-origin"},
		{"cross-origin by Origin only", "orders", fence, http.Header{
			"Authorization": {"Bearer " + adminSecret},
			"Origin":        {"https://evil.example"},
		}, 403, "cross-origin"},
		{"no fence", "orders", "", bearerHeader(adminSecret), 400, "fence"},
		{"bad fence", "orders", "twelve", bearerHeader(adminSecret), 400, "fence"},
		{"negative fence", "orders", "-4", bearerHeader(adminSecret), 400, "fence"},
		{"fence mismatch", "orders", strconv.FormatInt(l.Fence()-1, 10), bearerHeader(adminSecret), 409, "fence differs"},
		{"not locked", "free-lock", fence, bearerHeader(adminSecret), 404, "nobody holds it"},
		{"name too long", strings.Repeat("n", dlock.MaxNameLength+1), fence, bearerHeader(adminSecret), 400, "lock name"},
	} {
		status, body := e.unlock(t, tc.lock, tc.fence, tc.header)
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d mentioning %q", tc.name, status, body, tc.status, tc.want)
		}
		if strings.Contains(body, l.Token()) {
			t.Errorf("%s: the full token is in the answer", tc.name)
		}
	}
	// The conflict names the holder found, by fence.
	_, body := e.unlock(t, "orders", "1", bearerHeader(adminSecret))
	var conflict struct{ Current lockJSON }
	if err := json.Unmarshal([]byte(body), &conflict); err != nil || conflict.Current.Fence != l.Fence() {
		t.Errorf("409 body %s: want the current holder's fence %d", body, l.Fence())
	}
	if info, err := e.c.Inspect(bg, "orders"); err != nil || info.Fence != l.Fence() {
		t.Fatalf("lock changed by refused unlocks: %+v, %v", info, err)
	}
	if err := l.Refresh(bg, 30*time.Second); err != nil {
		t.Fatalf("holder lost its lock to a refused unlock: %v", err)
	}

	// Every refusal is audited, none with a secret.
	log := e.audit.String()
	if strings.Contains(log, adminSecret) || strings.Contains(log, l.Token()) {
		t.Errorf("audit log holds a secret: %s", log)
	}
	var unauthorized, crossOrigin, conflicts int
	for _, m := range e.audit.entries(t) {
		switch {
		case m["msg"] == "dlockadmin: cross-origin request refused":
			crossOrigin++
		case m["status"] == float64(401):
			unauthorized++
			if m["level"] != "WARN" || !strings.HasPrefix(m["remote"].(string), "127.0.0.1:") {
				t.Errorf("401 audit line: %v", m)
			}
		case m["status"] == float64(409):
			conflicts++
			if h, _ := m["holder"].(map[string]any); h["fence"] != float64(l.Fence()) || h["token_prefix"] != l.Token()[:8] {
				t.Errorf("409 audit line lacks the holder found: %v", m)
			}
		}
	}
	if unauthorized != 5 || crossOrigin != 2 || conflicts != 2 {
		t.Errorf("audit: %d unauthorized, %d cross-origin, %d conflicts; want 5, 2, 2:\n%s", unauthorized, crossOrigin, conflicts, log)
	}
}

func TestForceUnlockHandsLockToWaiter(t *testing.T) {
	e := setup(t, dlockadmin.WithForceUnlock(adminSecret))
	const name = "stuck-job"
	h := startHolder(t, e.srv.Addr, name, 3*time.Second)
	info, err := e.c.Inspect(bg, name)
	if err != nil {
		t.Fatal(err)
	}

	// A waiter in this process, lined up in Redis behind the other process.
	waiter := newClient(t, e.srv, dlock.WithDefaultOwner("the-waiter"))
	got := make(chan dlock.Lock, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(bg, name, dlock.WithTTL(30*time.Second), dlock.WithWait(20*time.Second))
		got <- l
		errc <- err
	}()
	waitFor(t, "the waiter in line", func() bool {
		i, err := e.c.Inspect(bg, name)
		return err == nil && i.Waiters == 1
	})

	status, body := e.unlock(t, name, strconv.FormatInt(info.Fence, 10), bearerHeader(adminSecret))
	if status != http.StatusOK {
		t.Fatalf("force unlock: %d %s", status, body)
	}
	var res struct{ Removed lockJSON }
	if err := json.Unmarshal([]byte(body), &res); err != nil || res.Removed.Fence != info.Fence || res.Removed.Owner != h.owner() {
		t.Errorf("answer %s: want the removed holder %s, fence %d", body, h.owner(), info.Fence)
	}
	if strings.Contains(body, info.Token) {
		t.Errorf("the full token is in the answer")
	}

	// The waiter gets the lock, with a larger fence.
	l, err := <-got, <-errc
	if err != nil {
		t.Fatalf("waiter after force unlock: %v", err)
	}
	defer l.Release(bg)
	if l.Fence() <= info.Fence {
		t.Errorf("waiter's fence %d, not above the removed %d", l.Fence(), info.Fence)
	}
	now, err := e.c.Inspect(bg, name)
	if err != nil || now.Owner != "the-waiter" || now.Fence != l.Fence() {
		t.Errorf("after the hand-off: %+v, %v", now, err)
	}
	// The other process learns it lost the lock at its next renewal.
	if line := h.next(t, 10*time.Second); !strings.HasPrefix(line, "lost") {
		t.Errorf("holder process said %q, want lost", line)
	}
	// The same request again must not remove the new holder.
	if status, body := e.unlock(t, name, strconv.FormatInt(info.Fence, 10), bearerHeader(adminSecret)); status != http.StatusConflict {
		t.Errorf("repeated force unlock: %d %s, want 409", status, body)
	}

	var done map[string]any
	for _, m := range e.audit.entries(t) {
		if m["result"] == "unlocked" {
			if done != nil {
				t.Errorf("two unlocks audited")
			}
			done = m
		}
	}
	removed, _ := done["removed"].(map[string]any)
	if done == nil || done["level"] != "WARN" || done["lock"] != name || !strings.HasPrefix(done["remote"].(string), "127.0.0.1:") ||
		removed["owner"] != h.owner() || removed["fence"] != float64(info.Fence) || removed["token_prefix"] != info.Token[:8] {
		t.Errorf("audit line of the unlock: %v\nlog:\n%s", done, e.audit.String())
	}
	if strings.Contains(e.audit.String(), info.Token) || strings.Contains(e.audit.String(), adminSecret) {
		t.Errorf("audit log holds a secret")
	}
}

func TestForceUnlockForm(t *testing.T) {
	e := setup(t, dlockadmin.WithForceUnlock(adminSecret))
	l := acquire(t, e.c, "order:7")
	fence := strconv.FormatInt(l.Fence(), 10)
	sameOrigin := http.Header{
		"Content-Type":   {"application/x-www-form-urlencoded"},
		"Origin":         {e.ts.URL},
		"Sec-Fetch-Site": {"same-origin"},
	}
	post := func(query string, form url.Values) (int, string) {
		status, body, _ := e.do(t, "POST", "/unlock"+query, strings.NewReader(form.Encode()), sameOrigin)
		return status, body
	}

	_, page, _ := e.do(t, "GET", "/", nil, nil)
	for _, s := range []string{`action="unlock"`, `name="admin_token"`, `type="password"`, `name="fence" value="` + fence + `"`, "breaks mutual exclusion"} {
		if !strings.Contains(page, s) {
			t.Errorf("page lacks %s", s)
		}
	}
	// Each answer is the page after a redirect, with the result on top.
	refused := func(what string, status int, body, want string) {
		t.Helper()
		if status != http.StatusOK || !strings.Contains(body, `class="box bad"`) || !strings.Contains(body, want) {
			t.Errorf("%s: %d, want the page with %q on top:\n%s", what, status, want, body)
		}
	}
	// The token is read from the body only, never from the query string.
	status, body := post("?admin_token="+adminSecret, url.Values{"name": {"order:7"}, "fence": {fence}})
	refused("token in the query string", status, body, "needs the admin token")
	status, body = post("", url.Values{"name": {"order:7"}, "fence": {fence}, "admin_token": {"nope"}})
	refused("wrong token", status, body, "wrong admin token")
	if !strings.Contains(body, "data-token-refused") {
		t.Errorf("wrong token: the page does not tell its script to forget the token")
	}
	status, body = post("", url.Values{"name": {"order:7"}, "fence": {"1"}, "admin_token": {adminSecret}})
	refused("fence mismatch", status, body, "fence differs")
	if strings.Contains(body, "changed hands") {
		t.Errorf("fence mismatch says the lock changed hands")
	}
	status, body = post("", url.Values{"name": {"order:7"}, "fence": {fence}, "admin_token": {adminSecret}, "match": {"order:*"}})
	if status != http.StatusOK || !strings.Contains(body, `class="box ok"`) || !strings.Contains(body, "No lock is held matching") ||
		!strings.Contains(body, `name="match" value="order:*"`) {
		t.Errorf("form unlock: %d, want 200 with the result and the list under the same filter:\n%s", status, body)
	}
	if _, err := e.c.Inspect(bg, "order:7"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("after form unlock: %v, want ErrNotLocked", err)
	}
	// A form sent again finds nothing to remove.
	status, body = post("", url.Values{"name": {"order:7"}, "fence": {fence}, "admin_token": {adminSecret}})
	refused("resubmitted form", status, body, "nobody holds it")
	// A cross-site form post never reaches the token check.
	cross := sameOrigin.Clone()
	cross.Set("Origin", "https://evil.example")
	cross.Set("Sec-Fetch-Site", "cross-site")
	l2 := acquire(t, e.c, "order:8")
	form := url.Values{"name": {"order:8"}, "fence": {strconv.FormatInt(l2.Fence(), 10)}, "admin_token": {adminSecret}}
	if status, _, _ := e.do(t, "POST", "/unlock", strings.NewReader(form.Encode()), cross); status != http.StatusForbidden {
		t.Errorf("cross-site form: %d, want 403", status)
	}
	if _, err := e.c.Inspect(bg, "order:8"); err != nil {
		t.Errorf("cross-site form removed the lock: %v", err)
	}
}

func TestRedisDown(t *testing.T) {
	e := setup(t, dlockadmin.WithForceUnlock(adminSecret), dlockadmin.WithTimeout(2*time.Second))
	e.srv.Kill()
	if status, body, _ := e.do(t, "GET", "/api/locks", nil, nil); status != http.StatusServiceUnavailable {
		t.Errorf("list with Redis down: %d %s, want 503", status, body)
	}
	if status, body, _ := e.do(t, "GET", "/", nil, nil); status != http.StatusServiceUnavailable || !strings.Contains(body, "<form") {
		t.Errorf("page with Redis down: %d, want 503 with the page", status)
	}
	if status, body := e.unlock(t, "x", "3", bearerHeader(adminSecret)); status != http.StatusServiceUnavailable {
		t.Errorf("unlock with Redis down: %d %s, want 503", status, body)
	}
}

func TestServeMux(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "# metrics\n") })
	mux, err := dlockadmin.NewServeMux(c, metrics, dlockadmin.WithTitle("Staging locks"))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(mux)
	defer ts.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := ts.Client().Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct{ path, want string }{
		{"/healthz", "ok\n"},
		{"/readyz", "ready\n"},
		{"/metrics", "# metrics\n"},
	} {
		if status, body := get(tc.path); status != http.StatusOK || body != tc.want {
			t.Errorf("GET %s: %d %q, want 200 %q", tc.path, status, body, tc.want)
		}
	}
	if status, body := get("/"); status != http.StatusOK || !strings.Contains(body, "<title>Staging locks</title>") {
		t.Errorf("GET /: %d, want the page titled Staging locks", status)
	}
	if status, body := get("/api/locks"); status != http.StatusOK || !strings.Contains(body, `"locks": []`) {
		t.Errorf("GET /api/locks: %d %s", status, body)
	}
	srv.Kill()
	if status, _ := get("/readyz"); status != http.StatusServiceUnavailable {
		t.Errorf("GET /readyz with Redis down: %d, want 503", status)
	}
	if status, _ := get("/healthz"); status != http.StatusOK {
		t.Errorf("GET /healthz with Redis down: %d, want 200: liveness does not depend on Redis", status)
	}
}

// Invalid options and a nil client are refused by the constructors, before
// anything serves.
func TestNewHandlerRefusesBadOptions(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	for _, tc := range []struct {
		name string
		c    *dlock.Client
		opts []dlockadmin.Option
		want string
	}{
		{"nil client", nil, nil, "needs a dlock.Client"},
		{"limit 0", c, []dlockadmin.Option{dlockadmin.WithLimit(0)}, "WithLimit(0)"},
		{"negative timeout", c, []dlockadmin.Option{dlockadmin.WithTimeout(-time.Second)}, "WithTimeout(-1s)"},
	} {
		h, err := dlockadmin.NewHandler(tc.c, tc.opts...)
		if h != nil || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewHandler = %v, %v; want an error naming %s", tc.name, h != nil, err, tc.want)
		}
		if m, err := dlockadmin.NewServeMux(tc.c, nil, tc.opts...); m != nil || err == nil {
			t.Errorf("%s: NewServeMux = %v, %v; want an error", tc.name, m != nil, err)
		}
	}
}
