package dlockadmin_test

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/dlockadmin"
)

// A form unlock answers with a redirect to the page (Post/Redirect/Get): a
// reload of the result repeats the GET, never the unlock, so it cannot
// remove the holder that came next.
func TestFormUnlockRedirectsThenReloadIsHarmless(t *testing.T) {
	e := setup(t, dlockadmin.WithForceUnlock(adminSecret))
	l := acquire(t, e.c, "job:7")
	noFollow := *e.ts.Client()
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	form := url.Values{"name": {"job:7"}, "fence": {strconv.FormatInt(l.Fence(), 10)}, "admin_token": {adminSecret},
		"match": {"job:*"}, "limit": {"50"}}
	req, _ := http.NewRequest("POST", e.ts.URL+"/unlock", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", e.ts.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "./?") {
		t.Fatalf("form unlock: %d, Location %q; want 303 to ./?...", resp.StatusCode, loc)
	}
	target, err := url.Parse(e.ts.URL + "/unlock")
	if err != nil {
		t.Fatal(err)
	}
	target, _ = target.Parse(loc) // as a browser resolves it
	q := target.Query()
	if target.Path != "/" || q.Get("match") != "job:*" || q.Get("limit") != "50" || q.Get("notice") == "" || strings.Contains(loc, adminSecret) {
		t.Fatalf("redirect to %s: want / with the filter and a notice id, and never the token", target)
	}

	// The next holder takes the lock; the operator reloads the result page.
	next := acquire(t, e.c, "job:7")
	for range 2 {
		status, body, _ := e.do(t, "GET", target.RequestURI(), nil, nil)
		if status != http.StatusOK || !strings.Contains(body, `class="box ok"`) || !strings.Contains(body, `lock &#34;job:7&#34; taken from`) {
			t.Errorf("result page: %d, want the result on top:\n%s", status, body)
		}
	}
	if info, err := e.c.Inspect(bg, "job:7"); err != nil || info.Fence != next.Fence() {
		t.Fatalf("after reloads of the result: %+v, %v; want the next holder (fence %d) untouched", info, err, next.Fence())
	}
	// A notice id nobody was given shows nothing: a link cannot put words
	// on the page.
	if _, body, _ := e.do(t, "GET", "/?notice=0123456789abcdef01234567", nil, nil); strings.Contains(body, `role="status"`) {
		t.Errorf("a made-up notice id shows a notice")
	}
}

// The page's one script runs under a CSP that allows it by hash and no
// other; the refresh interval and the token field are there for it.
func TestPageScriptAllowedByHash(t *testing.T) {
	e := setup(t, dlockadmin.WithForceUnlock(adminSecret))
	_, body, h := e.do(t, "GET", "/", nil, nil)
	i, j := strings.Index(body, "<script>"), strings.Index(body, "</script>")
	if i < 0 || j < i || strings.Count(body, "<script") != 1 {
		t.Fatalf("page has no single inline script:\n%s", body)
	}
	sum := sha256.Sum256([]byte(body[i+len("<script>") : j]))
	csp := h.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'") || strings.Contains(csp, "unsafe-inline'; connect") ||
		!strings.Contains(csp, "connect-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q does not allow exactly the page's script", csp)
	}
	for _, want := range []string{`data-refresh="10"`, `id="admin-token"`, `<div id="live">`, "sessionStorage", "servers' clocks"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(strings.ToLower(body), "document.cookie") || h.Get("Set-Cookie") != "" {
		t.Errorf("the page keeps something in a cookie")
	}
}
