package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client hands out locks on one Redis deployment. Make one per process and
// share it: it is safe for concurrent use, and later it owns the background
// work (renewal, wake-ups) that all its locks share.
type Client struct {
	rdb    redis.UniversalClient
	cfg    config
	closed atomic.Bool
	// closing ends the waits under way when Close is called.
	closing    context.Context
	closeWaits context.CancelFunc

	// id names this client in the waiter queues in Redis: one entry per
	// client and name, however many goroutines wait.
	id     string
	notify *notifier

	qmu    sync.Mutex
	queues map[string]*localQueue // goroutines of this process waiting per name

	renewer *renewer
	bg      sync.WaitGroup // grants given back after a lost reply; Add under hmu

	hmu  sync.Mutex
	held map[*Lock]struct{} // locks not yet released or lost, for Close
	// bgClosed: Close is waiting for bg, so no more may start.
	bgClosed bool

	server serverCheck // checkServer's verdict on the Redis server
}

// The clients New accepts: standalone, Cluster and Sentinel (failover).
var (
	_ redis.UniversalClient = (*redis.Client)(nil)
	_ redis.UniversalClient = (*redis.ClusterClient)(nil)
)

// New returns a Client that keeps its locks in rdb. rdb may be a
// *redis.Client, a *redis.ClusterClient or a failover client from
// redis.NewFailoverClient; dlock never closes it.
//
// go-redis ignores context deadlines on reads unless the client was made with
// ContextTimeoutEnabled: set it, so that a call on a blackholed connection
// returns by the caller's deadline rather than after ReadTimeout.
//
// An invalid option does not panic: every call on the Client returns its error.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	c := &Client{
		rdb: rdb, cfg: cfg, id: newToken()[:16],
		notify: newNotifier(rdb), queues: map[string]*localQueue{},
		held: map[*Lock]struct{}{},
	}
	c.renewer = newRenewer(c)
	c.closing, c.closeWaits = context.WithCancel(context.Background())
	return c
}

// Close releases the locks this client still holds, stops its background
// work (renewal, wake-ups) and waits for it. Waits under way end, and
// acquisitions after Close fail, with ErrClosed; a lock obtained while Close
// ran is released again. ctx bounds the releases; a lock that could not be released
// expires with its TTL. The error joins the failed releases.
//
// The background work Close waits for includes tokens being given back
// (each try bounded by the release timeout) and the one-time check of the
// server (bounded by 5 s). With a Redis that stopped answering, go-redis
// keeps to those bounds only when made with ContextTimeoutEnabled; else a
// read waits for its ReadTimeout.
func (c *Client) Close(ctx context.Context) error {
	c.closed.Store(true)
	c.closeWaits()
	c.hmu.Lock()
	locks := make([]*Lock, 0, len(c.held))
	for l := range c.held {
		locks = append(locks, l)
	}
	c.hmu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, c.cfg.releaseTimeout)
	defer cancel()
	var errs []error
	for _, l := range locks {
		if err := l.release(rctx); err != nil && !errors.Is(err, ErrNotHeld) {
			errs = append(errs, err)
		}
	}
	c.renewer.close()
	c.hmu.Lock()
	c.bgClosed = true
	c.hmu.Unlock()
	c.bg.Wait()
	c.notify.close()
	return errors.Join(errs...)
}

func (c *Client) track(l *Lock) {
	c.hmu.Lock()
	c.held[l] = struct{}{}
	c.hmu.Unlock()
}

func (c *Client) untrack(l *Lock) {
	c.hmu.Lock()
	delete(c.held, l)
	c.hmu.Unlock()
}

// keys of one lock. All share the hash tag {name}, so they live in one
// Cluster slot and one script can touch them all.
type keys struct {
	lock    string // hash: token, fence, owner, since, ttl
	fence   string // counter of fencing tokens, expires after an idle lifetime
	queue   string // zset of waiter tokens by arrival
	qdata   string // hash of waiter token -> client id, ttl, alive until, owner
	handoff string // prefix of the channels that tell a waiter it got the lock
	record  string // prefix of the release records, one per released token
}

// Key suffixes after the lock's own key.
const (
	sufFence   = ":fence"
	sufQueue   = ":q"
	sufQData   = ":qd"
	sufHandoff = ":w:"
	sufRecord  = ":r:"
)

func (c *Client) keys(name string) keys {
	// Keys are built on every acquisition, the hot path of an uncontended
	// lock: two allocations, the other keys being slices of one string.
	base := c.cfg.prefix + "{" + name + "}"
	all := base + sufFence + base + sufQueue + base + sufQData + base + sufHandoff + base + sufRecord
	off := 0
	take := func(suffix string) string {
		s := all[off : off+len(base)+len(suffix)]
		off += len(s)
		return s
	}
	return keys{lock: base, fence: take(sufFence), queue: take(sufQueue), qdata: take(sufQData),
		handoff: take(sufHandoff), record: take(sufRecord)}
}

// newToken returns 128 random bits, hex encoded. crypto/rand does not fail
// on supported platforms (it crashes the program rather than return weak
// bytes), so there is no error to handle.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ms converts a duration to whole milliseconds for PX/PEXPIRE.
func ms(d time.Duration) int64 { return d.Milliseconds() }

// redisError maps an error from Redis to dlock's sentinels where one fits.
func redisError(err error) error {
	if err != nil && strings.Contains(err.Error(), "WRONGTYPE") {
		return &wrongTypeError{err: err}
	}
	return err
}

type wrongTypeError struct{ err error }

func (e *wrongTypeError) Error() string {
	return ErrWrongType.Error() + " (" + e.err.Error() + ")"
}
func (e *wrongTypeError) Is(target error) bool { return target == ErrWrongType }
func (e *wrongTypeError) Unwrap() error        { return e.err }

// checkUsable reports why no call may run now: an invalid option, a closed
// client, or a context that has already ended.
func (c *Client) checkUsable(ctx context.Context) error {
	if c.cfg.err != nil {
		return c.cfg.err
	}
	if c.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}
