//go:build linux

package dlockadmin_test

import (
	"bytes"
	"errors"
	"fmt"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockadmin"
	"github.com/dlock-go/dlock/internal/redistest"
)

// chromiumHint is what to run when the browser is missing.
const chromiumHint = "apt-get install -y chromium (or run `make test`)"

// screenshotEnv names a file the browser test copies its screenshot to, for a
// person to look at; the test's own copy is removed with its temp directory.
const screenshotEnv = "DLOCKADMIN_SCREENSHOT"

// findChromium returns Debian's chromium, failing the test loudly when it is
// missing: a skipped browser test would pass without proving the page works.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatalf("chromium not found: install it with %s", chromiumHint)
	return ""
}

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}

// TestBrowserRendersPage opens the page in a real headless Chromium, at
// 1280 and at 480 CSS pixels wide: it shows the held locks under its real
// Content-Security-Policy (its script ran: the token field is shown), long
// names wrap instead of making the page scroll sideways, and a screenshot
// of each width is a PNG of that size.
func TestBrowserRendersPage(t *testing.T) {
	bin := findChromium(t)
	srv := redistest.Start(t)
	c := newClient(t, srv, dlock.WithDefaultOwner("billing-worker-7 (10.0.3.14/4242)"))
	const name = "invoice:2024-11:run"
	l := acquire(t, c, name)
	others := newClient(t, srv, dlock.WithDefaultOwner("search-indexer/981.eu-west-1.compute.internal/pid-4242/cron-nightly-reindex"))
	const long = "tenant:acme-corporation-international:invoices:2024-11:monthly-settlement-run:batch-000042"
	for _, n := range []string{"index:products", "index:users", "migrations", long} {
		acquire(t, others, n)
		time.Sleep(5 * time.Millisecond)
	}
	addWaiters(t, srv, name, 2)
	addWaiters(t, srv, "index:users", 1)
	waitFor(t, "3 waiters", func() bool {
		a, err1 := c.Inspect(bg, name)
		b, err2 := c.Inspect(bg, "index:users")
		return err1 == nil && err2 == nil && a.Waiters == 2 && b.Waiters == 1
	})

	ts := httptest.NewServer(dlockadmin.MustNewHandler(c, dlockadmin.WithForceUnlock(adminSecret), dlockadmin.WithTitle("dlock — staging")))
	defer ts.Close()
	if !strings.HasPrefix(ts.URL, "http://127.0.0.1:") {
		t.Fatalf("test server at %s, want loopback", ts.URL)
	}

	dir := t.TempDir()
	for _, width := range []int{1280, 480} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			b := startBrowser(t, bin, width, 800)
			b.open(ts.URL + "/")
			var text, html string
			b.eval("document.body.innerText", &text)
			b.eval("document.documentElement.outerHTML", &html)
			for _, want := range []string{name, "billing-worker-7 (10.0.3.14/4242)", "search-indexer/981", "Hottest names", "Longest holders",
				"Generated", "breaks mutual exclusion", l.Token()[:8], "servers' clocks"} {
				if !strings.Contains(text, want) {
					t.Errorf("page text lacks %q:\n%s", want, tail(text))
				}
			}
			if strings.Contains(html, l.Token()) {
				t.Errorf("page holds the full token")
			}
			var m struct {
				Inner, Scroll int
				TokenShown    bool
			}
			b.eval(`({inner: window.innerWidth, scroll: document.documentElement.scrollWidth,
				tokenShown: !!document.getElementById("token-box") && !document.getElementById("token-box").hidden})`, &m)
			if m.Inner != width {
				t.Errorf("viewport is %d px wide, want %d", m.Inner, width)
			}
			if m.Scroll > m.Inner {
				t.Errorf("at %d px the page is %d px wide: it scrolls sideways instead of wrapping", m.Inner, m.Scroll)
			}
			if !m.TokenShown {
				t.Errorf("the page's script did not run under its CSP: the token field is hidden")
			}
			shot := filepath.Join(dir, fmt.Sprintf("page-%d.png", width))
			img, err := png.Decode(bytes.NewReader(b.screenshot(shot)))
			if err != nil {
				t.Fatalf("screenshot is not a PNG: %v", err)
			}
			if bd := img.Bounds(); bd.Dx() != width || bd.Dy() != 800 {
				t.Errorf("screenshot is %dx%d, want %dx800", bd.Dx(), bd.Dy(), width)
			}
			if keep := os.Getenv(screenshotEnv); keep != "" {
				keep = strings.TrimSuffix(keep, ".png") + fmt.Sprintf("-%d.png", width)
				if err := copyFile(shot, keep); err != nil {
					t.Errorf("keep screenshot: %v", err)
				} else {
					t.Logf("screenshot kept at %s", keep)
				}
			}
		})
	}
}

// quiet keeps the audit lines of the browser tests out of the test output.
var quiet = dlockadmin.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

// recorder wraps the handler and records what the browser asked for.
type recorder struct {
	mu    sync.Mutex
	reqs  []seen
	onGet func(r *http.Request, n int) // called before the n-th GET of the page (from 1)
	gets  int
}

type seen struct {
	method, path, query string
	token               string // the admin_token of a POST
}

func (rc *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery}
		if r.Method == "POST" {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			form, _ := url.ParseQuery(string(body))
			s.token = form.Get("admin_token")
		}
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, s)
		n := 0
		if r.Method == "GET" && r.URL.Path == "/" {
			rc.gets++
			n = rc.gets
		}
		on := rc.onGet
		rc.mu.Unlock()
		if n > 0 && on != nil {
			on(r, n)
		}
		h.ServeHTTP(w, r)
	})
}

func (rc *recorder) requests() []seen {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.reqs)
}

// The page refreshes its listing by itself, from the same filtered URL, and
// keeps the filter (applied and typed) as it was.
func TestBrowserRefreshKeepsFilter(t *testing.T) {
	bin := findChromium(t)
	srv := redistest.Start(t)
	c := newClient(t, srv)
	acquire(t, c, "job:early")
	acquire(t, c, "other:not-matching")
	rc := &recorder{}
	rc.onGet = func(r *http.Request, n int) {
		if n == 2 { // the first refresh: a lock appears meanwhile
			// Not acquire: its t.Fatal must not run on the server's goroutine.
			if _, err := c.TryAcquire(bg, "job:late", dlock.WithTTL(30*time.Second)); err != nil {
				t.Errorf("acquire job:late: %v", err)
			}
		}
	}
	ts := httptest.NewServer(rc.wrap(dlockadmin.MustNewHandler(c)))
	defer ts.Close()

	b := startBrowser(t, bin, 1280, 800)
	b.open(ts.URL + "/?match=job:*")
	var before string
	b.eval("document.getElementById('live').innerText", &before)
	if !strings.Contains(before, "job:early") || strings.Contains(before, "job:late") || strings.Contains(before, "other:") {
		t.Fatalf("first load:\n%s", before)
	}
	// Typed but not submitted: the refresh must not wipe it either.
	b.eval(`document.querySelector('input[name=limit]').value = "7"`, nil)
	b.waitUntil("the listing refreshed with job:late", `document.body.dataset.refreshed >= 1 && document.getElementById("live").innerText.includes("job:late")`, 25*time.Second)
	var after struct {
		Match, Limit, Search, Live string
	}
	b.eval(`({match: document.querySelector("input[name=match]").value, limit: document.querySelector("input[name=limit]").value,
		search: location.search, live: document.getElementById("live").innerText})`, &after)
	if after.Match != "job:*" || after.Limit != "7" || after.Search != "?match=job:*" || strings.Contains(after.Live, "other:") {
		t.Errorf("after a refresh: filter %q, limit %q, URL %q, listing:\n%s", after.Match, after.Limit, after.Search, after.Live)
	}
	var refreshes int
	for _, r := range rc.requests() {
		if r.method == "GET" && r.path == "/" {
			if q, _ := url.ParseQuery(r.query); q.Get("match") != "job:*" {
				t.Errorf("the page fetched /?%s, not its filtered URL", r.query)
			}
			refreshes++
		}
	}
	if refreshes < 2 {
		t.Errorf("%d GETs of the page, want a load and a refresh", refreshes)
	}
}

// The admin token is asked once per tab: typed once, it unlocks a second
// row without being typed again, never lands in a cookie, and is forgotten
// when the server refuses it. Every unlock ends in a redirect, so a reload
// of the result sends no POST again; a fence that no longer matches reads
// "fence differs".
func TestBrowserTokenOnceAndPostRedirectGet(t *testing.T) {
	bin := findChromium(t)
	srv := redistest.Start(t)
	c := newClient(t, srv)
	for _, n := range []string{"a:one", "a:two", "a:three", "a:four"} {
		acquire(t, c, n)
	}
	rc := &recorder{}
	ts := httptest.NewServer(rc.wrap(dlockadmin.MustNewHandler(c, dlockadmin.WithForceUnlock(adminSecret), quiet)))
	defer ts.Close()
	b := startBrowser(t, bin, 1280, 800)
	b.open(ts.URL + "/?match=a:*")

	unlock := func(name string) {
		t.Helper()
		var before string
		b.eval("location.href", &before)
		b.eval(`(function(){ for (const f of document.querySelectorAll("form.unlock")) {
			if (f.querySelector("input[name=name]").value === `+strconv.Quote(name)+`) { f.querySelector("button").click(); return; } }
			throw new Error("no row for `+name+`"); })()`, nil)
		b.waitUntil("the result of unlocking "+name, `location.href !== `+strconv.Quote(before)+` && document.readyState === "complete" && document.getElementById("notice")`, 20*time.Second)
	}
	notice := func() (ok bool, text string) {
		t.Helper()
		b.eval(`document.getElementById("notice").className.includes("ok")`, &ok)
		b.eval(`document.getElementById("notice").innerText`, &text)
		return ok, text
	}

	// Without a token, the click is stopped in the page and nothing is sent.
	b.eval(`document.querySelector("form.unlock button").click()`, nil)
	time.Sleep(300 * time.Millisecond)
	for _, r := range rc.requests() {
		if r.method == "POST" {
			t.Fatalf("an unlock was sent without a token")
		}
	}
	// Typed once, as a user types.
	b.eval(`document.getElementById("admin-token").focus()`, nil)
	b.call("Input.insertText", map[string]any{"text": adminSecret}, nil)
	b.eval(`document.getElementById("admin-token").dispatchEvent(new Event("change"))`, nil)
	unlock("a:one")
	if ok, text := notice(); !ok || !strings.Contains(text, `"a:one"`) {
		t.Fatalf("first unlock: ok %v, %q", ok, text)
	}
	var state struct {
		Field, Stored, Cookie, Match string
	}
	b.eval(`({field: document.getElementById("admin-token").value, stored: sessionStorage.getItem("dlockadmin.adminToken"),
		cookie: document.cookie, match: document.querySelector("input[name=match]").value})`, &state)
	if state.Field != adminSecret || state.Stored != adminSecret || state.Cookie != "" || state.Match != "a:*" {
		t.Errorf("after the redirect: field %q, sessionStorage %q, cookie %q, filter %q; want the token kept for the tab only and the filter kept",
			state.Field, state.Stored, state.Cookie, state.Match)
	}
	// Not typed again.
	unlock("a:two")
	if ok, text := notice(); !ok || !strings.Contains(text, `"a:two"`) {
		t.Fatalf("second unlock, token not typed again: ok %v, %q", ok, text)
	}
	// A reload of the result sends a GET, not the POST again.
	posts := func() (n int) {
		for _, r := range rc.requests() {
			if r.method == "POST" {
				n++
				if r.token != adminSecret {
					t.Errorf("POST %s carried token %q", r.path, r.token)
				}
			}
		}
		return n
	}
	if n := posts(); n != 2 {
		t.Fatalf("%d POSTs, want 2", n)
	}
	b.call("Page.reload", map[string]any{}, nil)
	time.Sleep(300 * time.Millisecond)
	b.waitUntil("the reloaded result", `document.readyState === "complete" && document.getElementById("notice")`, 20*time.Second)
	if n := posts(); n != 2 {
		t.Errorf("a reload sent the unlock again: %d POSTs", n)
	}
	// A fence that is not the holder's: "fence differs".
	b.eval(`(function(){ for (const f of document.querySelectorAll("form.unlock")) {
		if (f.querySelector("input[name=name]").value === "a:three") { f.querySelector("input[name=fence]").value = "12345"; } } })()`, nil)
	unlock("a:three")
	if ok, text := notice(); ok || !strings.Contains(text, "fence differs") || strings.Contains(text, "changed hands") {
		t.Errorf("fence mismatch: ok %v, %q; want fence differs", ok, text)
	}
	if _, err := c.Inspect(bg, "a:three"); err != nil {
		t.Errorf("a:three removed on a fence mismatch: %v", err)
	}
	// A refused token is forgotten, not sent again.
	b.eval(`(function(){ const f = document.getElementById("admin-token"); f.value = "wrong"; f.dispatchEvent(new Event("change")); })()`, nil)
	unlock("a:four")
	b.eval(`({field: document.getElementById("admin-token").value, stored: sessionStorage.getItem("dlockadmin.adminToken") || ""})`, &state)
	if ok, text := notice(); ok || !strings.Contains(text, "wrong admin token") || state.Stored != "" || state.Field != "" {
		t.Errorf("wrong token: ok %v, %q, field %q, kept %q; want it refused and forgotten", ok, text, state.Field, state.Stored)
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
