package dlockadmin

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/inspect"
)

// page.html is the whole HTML view: one template, inline CSS, no external
// asset, so it renders the same offline and behind a proxy. page.js is its
// one script, inlined and allowed by its hash alone (see render): it keeps
// the admin token for the tab and refreshes the listing. The page works
// without it, the way it did before it had one.
//
//go:embed page.html
var pageHTML string

//go:embed page.js
var pageJS string

var pageTemplate = template.Must(template.New("page").Parse(pageHTML))

// pageCSP allows the page's own script by its hash, and nothing else: an
// injected script could not run, nor could the page be framed.
var pageCSP = func() string {
	sum := sha256.Sum256([]byte(pageJS))
	return "default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) +
		"'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
}()

// refreshEvery is how often the page's script refreshes the listing.
const refreshEvery = 10 * time.Second

// pageView is what the template shows; everything is formatted here, so the
// template holds layout only.
type pageView struct {
	Title       string
	Match       string
	Limit       string // "" when the default
	JSONHref    string // the same listing from the API
	MaxLimit    int
	Rows        []row
	Hottest     []row
	Longest     []row
	Count       int
	Truncated   bool
	Generated   string
	ForceUnlock bool
	// ReadOnlyHint tells how to enable force unlock (WithReadOnlyHint).
	ReadOnlyHint   string
	RefreshSeconds int
	Script         template.JS // page.js, verbatim: its hash is in the CSP
	Error          string      // the listing failed, or the query was bad
	Notice         *notice     // the result of a force unlock from this page

	// ScanTruncated: the scan budget ended the walk; Examined keys seen.
	ScanTruncated bool
	Examined      int
}

type row struct {
	Name, Href, Owner, TokenPrefix string
	Fence                          int64
	TTL, Lease, Age, Since         string
	Waiters                        int64
	Line                           string // the waiters in line, with their owners
	// A semaphore's permits and every lock's waiters, one line each.
	Permits, Queue []string
}

func toRow(i inspect.LockInfo, now time.Time) row {
	ttl := "no expiry"
	if i.TTL >= 0 {
		ttl = human(i.TTL)
	}
	r := row{
		Name: i.Name, Href: "api/locks/" + url.PathEscape(i.Name), Owner: i.Owner, TokenPrefix: i.TokenPrefix(),
		Fence: i.Fence, TTL: ttl, Lease: human(i.Lease), Age: human(age(i, now)),
		Since: i.Since.UTC().Format(time.RFC3339Nano), Waiters: i.Waiters, Line: lineText(i),
		Permits: permitLines(i), Queue: queueLines(i),
	}
	if i.Kind == dlock.KindShared {
		owners := make([]string, 0, len(i.Readers))
		for _, rd := range i.Readers {
			owners = append(owners, rd.Owner+" ("+human(rd.TTL)+" left)")
		}
		r.Owner = "read by " + strings.Join(owners, ", ")
	}
	if i.Kind != dlock.KindExclusive {
		r.TokenPrefix = "" // one per reader or permit, not the lock's
	}
	return r
}

// waiterKind is the kind a waiter waits for, in LockInfo.Kind's words.
func waiterKind(w inspect.WaiterInfo) string {
	if w.Shared {
		return dlock.KindShared
	}
	return dlock.KindExclusive
}

// lineText lists the waiters in line for a cell's title: owner and kind.
func lineText(i inspect.LockInfo) string {
	parts := make([]string, 0, len(i.Queue))
	for _, w := range i.Queue {
		parts = append(parts, w.Owner+" ("+waiterKind(w)+")")
	}
	return strings.Join(parts, ", ")
}

func permitLines(i inspect.LockInfo) []string {
	var out []string
	for _, p := range i.Holders {
		out = append(out, fmt.Sprintf("%s (fence %d, %s left)", p.Owner, p.Fence, human(p.TTL)))
	}
	return out
}

func queueLines(i inspect.LockInfo) []string {
	var out []string
	for n, w := range i.Queue {
		kind := waiterKind(w)
		if i.Kind == dlock.KindSemaphore {
			kind = "permit"
		}
		out = append(out, fmt.Sprintf("%d. %s (%s, alive %s)", n+1, w.Owner, kind, human(w.Alive)))
	}
	return out
}

// human formats d for a table cell: precise when short, coarse when long,
// since a lease of seconds is judged in tenths and a stuck holder in hours.
func human(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", d/time.Minute, d%time.Minute/time.Second)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", d/time.Hour, d%time.Hour/time.Minute)
	default:
		return fmt.Sprintf("%dd%02dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	}
}

// page serves GET /?match=PATTERN&limit=N.
func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	v, status := h.view(r.Context(), r.URL.Query().Get("match"), r.URL.Query().Get("limit"))
	if n, ok := h.notice(r.URL.Query().Get("notice")); ok {
		v.Notice = &n
	}
	h.render(w, status, v)
}

// view lists the locks for the page. A bad query (400) or a failed listing
// (503, say) is shown on the page, above the filter form, so the operator
// can fix it.
func (h *handler) view(ctx context.Context, match, limit string) (pageView, int) {
	v := pageView{Title: h.cfg.title, Match: match, Limit: limit, MaxLimit: h.cfg.limit, ForceUnlock: h.cfg.adminToken != nil,
		ReadOnlyHint: h.cfg.enableHint, RefreshSeconds: int(refreshEvery / time.Second), Script: template.JS(pageJS)}
	v.Generated = h.now().UTC().Format(time.DateTime + " MST")
	v.JSONHref = "api/locks"
	if qs := nonEmpty(url.Values{"match": {match}, "limit": {limit}}).Encode(); qs != "" {
		v.JSONHref += "?" + qs
	}
	q, err := h.parseQuery(match, limit)
	if err != nil {
		v.Error = err.Error()
		return v, http.StatusBadRequest
	}
	s, err := h.snapshot(ctx, q)
	if err != nil {
		status, msg := h.failed(ctx, "list", err)
		v.Error = msg
		return v, status
	}
	rows := func(ls []inspect.LockInfo) []row {
		out := make([]row, 0, len(ls))
		for _, l := range ls {
			out = append(out, toRow(l, s.GeneratedAt))
		}
		return out
	}
	v.Rows, v.Hottest, v.Longest = rows(s.Locks), rows(s.Hottest), rows(s.Longest)
	v.Count, v.Truncated = len(s.Locks), s.Truncated
	v.ScanTruncated, v.Examined = s.ScanTruncated, s.Examined
	v.Generated = s.GeneratedAt.UTC().Format(time.DateTime + " MST")
	return v, http.StatusOK
}

// nonEmpty drops empty parameters, so the JSON link of an unfiltered page
// is plain "api/locks".
func nonEmpty(v url.Values) url.Values {
	for k, vs := range v {
		if len(vs) == 0 || vs[0] == "" {
			delete(v, k)
		}
	}
	return v
}

// unlockForm serves POST /unlock, the target of the page's per-row forms:
// fields name, fence (of the row the operator saw), match (to come back to
// the same filter) and admin_token (the page's script copies it from the
// token field at the top; a password field of the row without script).
// Browsers cannot send an Authorization header from a plain form, so the
// admin token travels in the body; it is read from the body only, never
// from the query string, which ends up in access logs and browser history.
//
// The answer is a redirect (303 See Other) to the page, with the same
// filter and the result on top (Post/Redirect/Get): a reload of the result
// repeats the GET, never the unlock.
func (h *handler) unlockForm(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	req := unlockRequest{via: "form"}
	req.bad = r.ParseForm()
	req.name, req.fence, req.token = r.PostForm.Get("name"), r.PostForm.Get("fence"), r.PostForm.Get("admin_token")
	res := h.forceUnlock(r, req)
	// Refusals before the token was accepted (401, 403) take no slot in
	// the store: anyone can send them, and a flood of them would push an
	// operator's result out. Their texts are fixed, so a code in the URL
	// carries them.
	id, fixed := fixedNoticeID(req, res)
	if !fixed {
		id = h.notices.put(notice{OK: res.status == http.StatusOK, Msg: res.msg}, h.now())
	}
	q := nonEmpty(url.Values{"match": {r.PostForm.Get("match")}, "limit": {r.PostForm.Get("limit")}, "notice": {id}})
	// Relative, so that the redirect stays under the prefix the handler is
	// mounted at (http.Redirect would resolve it against the stripped path).
	w.Header().Set("Location", "./?"+q.Encode())
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusSeeOther)
}

func (h *handler) render(w http.ResponseWriter, status int, v pageView) {
	var b strings.Builder
	if err := pageTemplate.Execute(&b, v); err != nil {
		http.Error(w, "dlockadmin: render page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", pageCSP)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}
