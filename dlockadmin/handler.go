package dlockadmin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/inspect"
	"github.com/dlock-go/dlock/internal/flightcache"
)

// maxMatchLength bounds the match pattern: a lock name is at most
// dlock.MaxNameLength bytes, and a glob for one needs at most an escape per
// byte.
const maxMatchLength = 2 * dlock.MaxNameLength

type handler struct {
	c       *dlock.Client
	cfg     config
	notices *noticeStore     // results of form unlocks, for the page after the redirect
	fails   *failLimiter     // wrong admin tokens, per client address
	now     func() time.Time // the clock ages are measured on; tests keep it real

	cache *flightcache.Cache[query, snapshot] // listings kept and shared (cache.go)
}

// NewHandler returns the admin view of the locks held in c's Redis: a JSON
// API and an HTML page (see the package documentation for the routes). It is
// read-only unless WithForceUnlock is given.
//
// The handler uses absolute paths from its own root ("/", "/api/locks"); to
// serve it under a prefix, strip the prefix (http.StripPrefix). The HTML
// page's links and forms are relative, so they follow the prefix.
//
// It returns an error for a nil client or an invalid option, and starts
// nothing then; MustNewHandler panics instead.
func NewHandler(c *dlock.Client, opts ...Option) (http.Handler, error) {
	_, hh, err := newHandler(c, opts...)
	return hh, err
}

// newHandler is NewHandler, with the handler's state for NewServeMux.
func newHandler(c *dlock.Client, opts ...Option) (*handler, http.Handler, error) {
	if c == nil {
		return nil, nil, errors.New("dlockadmin: NewHandler needs a dlock.Client")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if cfg.err != nil {
		return nil, nil, cfg.err
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	h := &handler{c: c, cfg: cfg, now: time.Now, notices: newNoticeStore(), fails: newFailLimiter(), cache: newListingCache(cfg)}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.page)
	mux.HandleFunc("POST /unlock", h.forgetting(h.unlockForm))
	mux.HandleFunc("GET /api/locks", h.list)
	// {name...} so that a name with '/' can be typed as is; a link escapes
	// it as %2F, which the mux decodes into the same value.
	mux.HandleFunc("GET /api/locks/{name...}", h.inspect)
	mux.HandleFunc("POST /api/locks/{name}/unlock", h.forgetting(h.unlockAPI))

	// Browsers send a form POST to any origin, with the operator's network
	// position: a page elsewhere could post to a loopback admin view.
	// CrossOriginProtection refuses such requests by Sec-Fetch-Site (or
	// Origin against Host); safe methods and non-browser clients pass.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(h.crossOrigin))
	return h, cop.Handler(mux), nil
}

// MustNewHandler is NewHandler for options fixed in the program: it panics
// where NewHandler returns an error.
func MustNewHandler(c *dlock.Client, opts ...Option) http.Handler {
	h, err := NewHandler(c, opts...)
	if err != nil {
		panic(err)
	}
	return h
}

// age is how long i has been held at now, never negative: Since is on the
// holder's clock, which may run ahead of ours.
func age(i inspect.LockInfo, now time.Time) time.Duration { return max(i.Age(now), 0) }

// snapshot is one listing with its rankings, shared by the API and the page.
type snapshot struct {
	Match       string
	Limit       int
	Truncated   bool // more locks matched than Limit, or ScanTruncated
	Locks       []inspect.LockInfo
	Hottest     []inspect.LockInfo
	Longest     []inspect.LockInfo
	GeneratedAt time.Time

	// ScanTruncated: the walk stopped at the scan budget (WithScanBudget)
	// before the end of the keyspace, after looking at Examined keys.
	ScanTruncated bool
	Examined      int
}

// query is a listing request after validation.
type query struct {
	match string
	limit int
}

// parseQuery checks the match and limit parameters ("" for absent); its
// errors are for the client's eyes.
func (h *handler) parseQuery(match, limit string) (query, error) {
	q := query{match: match, limit: h.cfg.limit}
	if len(q.match) > maxMatchLength {
		return q, fmt.Errorf("match pattern is %d bytes long; the maximum is %d", len(q.match), maxMatchLength)
	}
	if limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 || n > h.cfg.limit {
			return q, fmt.Errorf("limit %q must be a whole number from 1 to %d", limit, h.cfg.limit)
		}
		q.limit = n
	}
	return q, nil
}

// forgetting clears the listings kept after an unlock, so that the page
// the operator comes back to shows it.
func (h *handler) forgetting(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		defer h.cache.Forget()
		next(w, r)
	}
}

// rank returns the TopN locks with the most waiters (only those with any:
// a lock nobody waits for is not hot) and the TopN held the longest.
func rank(locks []inspect.LockInfo) (hottest, longest []inspect.LockInfo) {
	for _, l := range locks {
		if l.Waiters > 0 {
			hottest = append(hottest, l)
		}
	}
	// Ties are broken by name so that the rankings do not flicker between
	// two refreshes of an unchanged keyspace.
	slices.SortStableFunc(hottest, func(a, b inspect.LockInfo) int {
		return cmp.Or(cmp.Compare(b.Waiters, a.Waiters), cmp.Compare(a.Name, b.Name))
	})
	longest = slices.Clone(locks)
	slices.SortStableFunc(longest, func(a, b inspect.LockInfo) int {
		return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.Name, b.Name))
	})
	return hottest[:min(len(hottest), TopN)], longest[:min(len(longest), TopN)]
}

type listJSON struct {
	Locks       []Lock    `json:"locks"`
	Hottest     []Lock    `json:"hottest"`
	Longest     []Lock    `json:"longest"`
	Match       string    `json:"match"`
	Limit       int       `json:"limit"`
	Truncated   bool      `json:"truncated"`
	GeneratedAt time.Time `json:"generated_at"`

	// ScanTruncated: truncated by the scan budget, not by the limit.
	ScanTruncated bool `json:"scan_truncated"`
	KeysExamined  int  `json:"keys_examined"`
}

// list serves GET /api/locks?match=PATTERN&limit=N.
func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	q, err := h.parseQuery(r.URL.Query().Get("match"), r.URL.Query().Get("limit"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	s, err := h.snapshot(r.Context(), q)
	if err != nil {
		status, msg := h.failed(r.Context(), "list", err)
		writeError(w, status, msg)
		return
	}
	conv := func(ls []inspect.LockInfo) []Lock {
		out := make([]Lock, 0, len(ls)) // [] rather than null in the JSON
		for _, l := range ls {
			out = append(out, LockOf(l, s.GeneratedAt))
		}
		return out
	}
	writeJSON(w, http.StatusOK, listJSON{
		Locks: conv(s.Locks), Hottest: conv(s.Hottest), Longest: conv(s.Longest),
		Match: s.Match, Limit: s.Limit, Truncated: s.Truncated, GeneratedAt: s.GeneratedAt.UTC(),
		ScanTruncated: s.ScanTruncated, KeysExamined: s.Examined,
	})
}

// inspect serves GET /api/locks/{name}.
func (h *handler) inspect(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.timeout)
	defer cancel()
	info, err := h.c.Inspect(ctx, name)
	if err != nil {
		status, msg := h.failed(ctx, "inspect", err)
		writeError(w, status, msg)
		return
	}
	writeJSON(w, http.StatusOK, LockOf(info, h.now()))
}

// statusOf maps a dlock error to the HTTP status that tells the client what
// to do about it.
func statusOf(err error) int {
	switch {
	case errors.Is(err, dlock.ErrNotHeld):
		return http.StatusNotFound
	case errors.Is(err, dlock.ErrInvalidName):
		return http.StatusBadRequest
	case errors.Is(err, dlock.ErrWrongType):
		return http.StatusInternalServerError // a misconfiguration: a foreign key under the prefix
	default:
		// Redis unreachable, slow past the timeout, or the Client closed:
		// the lock service is down, not the request wrong.
		return http.StatusServiceUnavailable
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the status is sent; a failed write means the client left
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
