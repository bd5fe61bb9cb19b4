package dlockadmin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dlock-go/dlock/inspect"
	"github.com/dlock-go/dlock/internal/flightcache"
)

// Bounds of what listing requests cost Redis. Each can be changed with an
// Option.
const (
	// DefaultCacheTTL is how long one listing answers the page and the API
	// for the same filter: an operator's refreshes, a few open tabs and a
	// script polling the API cost one walk of the keyspace per period, not
	// one each. A few seconds keep the page current enough for people, and
	// a force unlock made through this handler is shown at once (it clears
	// the cache).
	DefaultCacheTTL = 2 * time.Second
	// DefaultScanMaxKeys bounds the keys one listing asks SCAN to look at,
	// dlock's or not (about 100 SCAN calls of 1000): a few tens of
	// milliseconds of Redis time, whatever else the Redis holds. A listing
	// that reaches it shows what it found and says it is truncated.
	DefaultScanMaxKeys = 100_000
)

// listingConfig is what WithCacheTTL and WithScanBudget set.
type listingConfig struct {
	cacheTTL    time.Duration
	scanMaxKeys int
}

// cacheKeep is how many filters keep a listing: a client that makes up a
// new filter on every request gets no more than this many kept, and still
// one walk at a time.
const cacheKeep = 16

// WithCacheTTL sets how long one listing answers the requests with the
// same filter and limit (default DefaultCacheTTL). 0 lists on every
// request, though requests at the same moment still share one listing. d
// must not be negative (NewHandler refuses it).
func WithCacheTTL(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 0 {
			c.fail(fmt.Errorf("dlockadmin: WithCacheTTL(%v): the cache period must not be negative", d))
			return
		}
		c.listing.cacheTTL = d
	})
}

// WithScanBudget bounds the keys one listing asks SCAN to look at, all
// primaries together, whether they are locks or other data (default
// DefaultScanMaxKeys). A listing that reaches it answers with the locks it
// found, marked truncated (the API's "scan_truncated", a notice on the
// page). n must be positive (NewHandler refuses others): an unbounded walk
// of a big keyspace on an unauthenticated request is a denial of service.
func WithScanBudget(n int) Option {
	return optionFunc(func(c *config) {
		if n <= 0 {
			c.fail(fmt.Errorf("dlockadmin: WithScanBudget(%d): the budget must be positive", n))
			return
		}
		c.listing.scanMaxKeys = n
	})
}

// newListingCache is the handler's cache of listings, one per query.
func newListingCache(cfg config) *flightcache.Cache[query, snapshot] {
	return flightcache.New[query, snapshot](cfg.listing.cacheTTL, cacheKeep)
}

// snapshot returns the listing of q: kept from a listing of the cache
// period, shared with a request that is listing it now, or listed here once
// no other listing runs. Whatever the number of requests, Redis sees one
// walk at a time from this handler. The wait for a turn counts in the
// request's timeout.
func (h *handler) snapshot(ctx context.Context, q query) (snapshot, error) {
	// WithTimeout bounds the wait for the turn and, from the turn on, the
	// listing itself: a listing that waited behind others gets its whole
	// timeout for Redis, so a Redis that answers in time is never reported
	// as failing because of the queue (the queue's own give-up is
	// flightcache.ErrNoTurn, answered busy and not logged).
	wctx, cancel := context.WithTimeout(ctx, h.cfg.timeout)
	defer cancel()
	s, _, err := h.cache.Get(wctx, q, func(context.Context) (snapshot, error) {
		rctx, cancel := context.WithTimeout(ctx, h.cfg.timeout)
		defer cancel()
		return h.listing(rctx, q)
	})
	return s, err
}

// errEnough stops a walk that found more locks than the listing shows.
var errEnough = errors.New("dlockadmin: limit reached")

// listing walks the keyspace for q, within the scan budget, and stops once
// it has one lock more than q's limit (which tells the listing was cut).
func (h *handler) listing(ctx context.Context, q query) (snapshot, error) {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var locks []inspect.LockInfo
	st, err := h.c.Scan(ctx, inspect.ScanOptions{Match: q.match, MaxKeys: h.cfg.listing.scanMaxKeys}, func(batch []inspect.LockInfo) {
		locks = append(locks, batch...)
		if len(locks) > q.limit {
			stop(errEnough)
		}
	})
	limited := len(locks) > q.limit
	if err != nil && !(limited && errors.Is(context.Cause(ctx), errEnough)) {
		return snapshot{}, err
	}
	s := snapshot{Match: q.match, Limit: q.limit, GeneratedAt: h.now(), Examined: st.Examined}
	// Sorted before the cut, so that a cut listing keeps the same names
	// from one listing to the next rather than whichever SCAN met first.
	slices.SortFunc(locks, func(a, b inspect.LockInfo) int { return cmp.Compare(a.Name, b.Name) })
	if limited {
		locks = locks[:q.limit]
	}
	s.ScanTruncated = st.Truncated && !limited
	s.Truncated = limited || s.ScanTruncated
	s.Locks = locks
	s.Hottest, s.Longest = rank(locks)
	return s, nil
}
