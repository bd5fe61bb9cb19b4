package dlockadmin_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockadmin"
	"github.com/dlock-go/dlock/internal/redistest"
)

// An unauthenticated request decides what it sends: a 1 MB lock name, a
// 1 MB Origin. The audit line it causes stays bounded: each value is cut at
// dlock.MaxNameLength bytes, with a marker saying how long it was, so a
// valid name is always logged whole and no request writes more than a few
// KB into the operator's log.
func TestAuditLogBounded(t *testing.T) {
	e := setup(t, dlockadmin.WithForceUnlock(adminSecret))
	huge := strings.Repeat("n", 900<<10) // under httptest's 1 MB header bound
	e.unlock(t, huge, huge[:4000], bearerHeader("wrong-token-"+huge[:100]))
	e.unlock(t, huge, "1", nil)
	e.do(t, "POST", "/api/locks/x/unlock", nil, http.Header{"Origin": {"https://" + huge}, "Sec-Fetch-Site": {"cross-site"}})
	form := url.Values{"name": {huge[:15000]}, "fence": {"2"}, "admin_token": {adminSecret}}
	e.do(t, "POST", "/unlock", strings.NewReader(form.Encode()), http.Header{"Content-Type": {"application/x-www-form-urlencoded"}})

	entries := e.audit.entries(t)
	if len(entries) != 4 {
		t.Fatalf("%d audit lines, want 4:\n%.2000s", len(entries), e.audit.String())
	}
	for line := range strings.Lines(e.audit.String()) {
		if len(line) > 4096 {
			t.Errorf("audit line of %d bytes, want at most 4096: %.300s…", len(line), line)
		}
	}
	if lock, _ := entries[0]["lock"].(string); !strings.HasPrefix(lock, huge[:dlock.MaxNameLength]) ||
		!strings.Contains(lock, "truncated") || !strings.Contains(lock, strconv.Itoa(len(huge))) {
		t.Errorf("a long name is logged as %.600q; want its first %d bytes and a marker with its length", lock, dlock.MaxNameLength)
	}

	// A valid name, at the bound, is logged whole.
	e.audit.b.Reset()
	name := strings.Repeat("m", dlock.MaxNameLength)
	e.unlock(t, name, "1", bearerHeader(adminSecret))
	if entries := e.audit.entries(t); len(entries) != 1 || entries[0]["lock"] != name {
		t.Errorf("a name of %d bytes is not logged whole: %v", len(name), entries)
	}
}

// The admin token is all that stands between whoever reaches the handler
// and every lock's mutual exclusion: one a person can guess ("x") is
// refused when the handler is made.
func TestShortAdminTokenRefused(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	for _, tok := range []string{"x", "short-7Zq", "fifteen-bytes7Z"} {
		h, err := dlockadmin.NewHandler(c, dlockadmin.WithForceUnlock(tok))
		if h != nil || !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "WithForceUnlock") ||
			!strings.Contains(err.Error(), strconv.Itoa(dlockadmin.MinAdminTokenLength)) {
			t.Errorf("WithForceUnlock(%d bytes): %v; want ErrInvalidOption naming the option and the bound %d", len(tok), err, dlockadmin.MinAdminTokenLength)
		}
		if err != nil && len(tok) > 1 && strings.Contains(err.Error(), tok) {
			t.Errorf("the error repeats the token: %v", err)
		}
	}
	if _, err := dlockadmin.NewHandler(c, dlockadmin.WithForceUnlock(strings.Repeat("k", dlockadmin.MinAdminTokenLength))); err != nil {
		t.Errorf("a token of %d bytes: %v", dlockadmin.MinAdminTokenLength, err)
	}
	if _, err := dlockadmin.NewHandler(c, dlockadmin.WithForceUnlock("")); err != nil {
		t.Errorf("an empty token (force unlock off): %v", err)
	}
}

// Wrong admin tokens from one address are limited: past a small burst the
// answer is 429 with Retry-After, the right token included (else guessing
// would go on at full speed), other addresses are not affected, and the
// address may try again after Retry-After. Only the first refusal of a
// lockout is logged.
func TestWrongTokenRateLimited(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	audit := &syncBuffer{}
	h := dlockadmin.MustNewHandler(c, dlockadmin.WithForceUnlock(adminSecret), dlockadmin.WithLogger(slog.New(slog.NewJSONHandler(audit, nil))))
	l := acquire(t, c, "orders")
	fence := strconv.FormatInt(l.Fence(), 10)
	send := func(remote, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/api/locks/orders/unlock?fence="+fence, nil)
		req.RemoteAddr = remote
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	const attacker = "192.0.2.7:40000"
	var limited *httptest.ResponseRecorder
	for i := range 50 {
		rec := send(attacker, "guess-"+strconv.Itoa(i))
		if rec.Code == http.StatusTooManyRequests {
			limited = rec
			if i < 3 {
				t.Errorf("limited after %d wrong tokens: too eager for an operator's typo", i)
			}
			break
		}
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if limited == nil {
		t.Fatal("50 wrong tokens in a row from one address, none refused with 429")
	}
	retry, err := strconv.Atoi(limited.Header().Get("Retry-After"))
	if err != nil || retry < 1 || retry > 60 {
		t.Fatalf("429 with Retry-After %q, want whole seconds from 1 to 60", limited.Header().Get("Retry-After"))
	}
	for range 20 {
		send(attacker, "guess-more")
	}
	// The right token is refused too while the address is locked out, and
	// the lock is untouched.
	if rec := send(attacker, adminSecret); rec.Code != http.StatusTooManyRequests {
		t.Errorf("right token during the lockout: %d, want 429", rec.Code)
	}
	// Another address is not locked out (same /64 for IPv6 would be).
	if rec := send("198.51.100.9:5000", "fence-check-only"); rec.Code != http.StatusUnauthorized {
		t.Errorf("another address: %d, want 401", rec.Code)
	}
	// The page's form meets the same limit, answered after its redirect.
	form := url.Values{"name": {"orders"}, "fence": {fence}, "admin_token": {adminSecret}}
	req := httptest.NewRequest("POST", "/unlock", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = attacker
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusSeeOther {
		t.Fatalf("form during the lockout: %d, want 303", rec.Code)
	}
	page := httptest.NewRecorder()
	h.ServeHTTP(page, httptest.NewRequest("GET", "/"+strings.TrimPrefix(rec.Header().Get("Location"), "./"), nil))
	if body := page.Body.String(); !strings.Contains(body, "too many wrong admin tokens") || strings.Contains(body, `id="notice" data-token-refused`) {
		t.Errorf("the page after a limited form: want the refusal, and the token kept (it may be right):\n%.3000s", body)
	}
	var limitedLines int
	for _, m := range audit.entries(t) {
		if m["status"] == float64(http.StatusTooManyRequests) {
			limitedLines++
		}
	}
	if limitedLines != 1 {
		t.Errorf("%d audit lines for 429s, want 1 (the first refusal of the lockout)", limitedLines)
	}
	time.Sleep(time.Duration(retry)*time.Second + 100*time.Millisecond)
	if rec := send(attacker, adminSecret); rec.Code != http.StatusOK {
		t.Errorf("right token after Retry-After: %d %s, want 200", rec.Code, rec.Body)
	}
}

// What went wrong inside (Redis' address, a dial error) is for the log;
// clients, who need not be authenticated, get a generic message. The
// addresses of the operator's network are not the public's business.
func TestErrorsHideRedisDetails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close() // nobody listens there now
	// No retries: go-redis would retry the refused dial until the deadline
	// and report only that; the first error names the address, as a
	// server whose Redis is down says it.
	rdb := redis.NewClient(&redis.Options{Addr: dead, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := dlock.MustNew(rdb)
	t.Cleanup(func() { _ = c.Close(bg) })
	log := &syncBuffer{}
	mux, err := dlockadmin.NewServeMux(c, nil, dlockadmin.WithForceUnlock(adminSecret), dlockadmin.WithTimeout(time.Second),
		dlockadmin.WithLogger(slog.New(slog.NewJSONHandler(log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(dead)
	// A client that hung up is no Redis failure: nothing logged.
	gone, cancel := context.WithCancel(bg)
	cancel()
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/api/locks", nil).WithContext(gone))
	if logged := log.String(); logged != "" {
		t.Errorf("a request whose client left was logged as a failure:\n%s", logged)
	}
	for _, tc := range []struct {
		method, path string
		header       http.Header
	}{
		{"GET", "/api/locks", nil},
		{"GET", "/api/locks/orders", nil},
		{"GET", "/", nil},
		{"GET", "/readyz", nil},
		{"POST", "/api/locks/orders/unlock?fence=3", bearerHeader(adminSecret)},
	} {
		req := httptest.NewRequest(tc.method, tc.path, nil)
		for k, v := range tc.header {
			req.Header[k] = v
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		body := rec.Body.String()
		if rec.Code != http.StatusServiceUnavailable {
			t.Errorf("%s %s with Redis down: %d, want 503", tc.method, tc.path, rec.Code)
		}
		if strings.Contains(body, port) || strings.Contains(body, "dial") || strings.Contains(body, "127.0.0.1") {
			t.Errorf("%s %s: the answer shows Redis' address or the dial error:\n%.1500s", tc.method, tc.path, body)
		}
		if !strings.Contains(body, "unavailable") && !strings.Contains(body, "not ready") {
			t.Errorf("%s %s: the answer does not say the lock service is unavailable:\n%.1500s", tc.method, tc.path, body)
		}
	}
	if logged := log.String(); !strings.Contains(logged, dead) {
		t.Errorf("the log lacks the details kept from clients (%s):\n%s", dead, logged)
	}
}
