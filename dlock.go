package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/lease"
	"github.com/dlock-go/dlock/internal/node"
)

// Client hands out locks on one Redis deployment. Make one per process and
// share it: it is safe for concurrent use, and it owns the background work
// that all its locks share (the renewal loop, the pub/sub sessions of
// waiters, tokens being given back).
type Client struct {
	rdb redis.UniversalClient
	cfg config
	// ownerArg is cfg.owner boxed once for the acquisitions' arguments.
	ownerArg any
	// batch sends the lock calls (acquire, release, refresh, TTL): calls
	// made while others are out leave together (WithBatchDepth).
	batch *node.Batcher
	// closing is cancelled by Close: it ends the waits under way and the
	// retries of the background work.
	closing    context.Context
	closeWaits context.CancelFunc

	// id names this client in the waiter queues in Redis: one entry per
	// client and name, however many goroutines wait.
	id     string
	notify *notifier

	qmu    sync.Mutex
	queues map[string]*localQueue // goroutines of this process waiting per name

	renewer *lease.Renewer
	// own is what the client owns, for Close (see lease.Owner): its held
	// locks; the acquisitions under way (TryAcquire, Acquire), which Close
	// waits for, since one whose grant is in Redis with its reply still
	// out would otherwise be released only after Close returned, or never,
	// once the process exits; and its background work (tokens given back,
	// the server check), which may start until Close has released what it
	// holds, so that a release that fails still gives its grant back.
	own *lease.Owner[*redisLock]

	server serverCheck // checkServer's verdict on the Redis server
}

// New returns a Client that keeps its locks in rdb. rdb may be a
// *redis.Client, a *redis.ClusterClient or a failover client from
// redis.NewFailoverClient; dlock never closes it.
//
// go-redis ignores context deadlines on reads unless the client was made with
// ContextTimeoutEnabled: set it, so that a call on a blackholed connection
// returns by the caller's deadline rather than after ReadTimeout.
//
// New returns an error matching ErrInvalidOption or ErrInvalidTTL, naming
// the option, when an option is invalid or rdb is nil; nothing is started
// then. Every constructor in dlock and its packages follows this rule:
// invalid configuration is an error from the constructor, never a panic
// and never an error discovered at first use. MustNew is the shorthand for
// options fixed in the program.
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if rdb == nil {
		cfg.fail(fmt.Errorf("%w: no Redis client", ErrInvalidOption))
	}
	if err := cfg.checkTTL(cfg.defaultTTL); err != nil {
		cfg.fail(fmt.Errorf("%w (WithDefaultTTL)", err))
	}
	if cfg.err != nil {
		return nil, opError("new", "", cfg.err)
	}
	c := &Client{
		rdb: rdb, cfg: cfg, ownerArg: cfg.owner, id: newToken()[:16],
		notify: newNotifier(rdb), queues: map[string]*localQueue{},
		own: lease.NewOwner[*redisLock](), batch: node.NewBatcher(rdb, cfg.batchDepth),
	}
	c.renewer = lease.NewRenewer()
	c.closing, c.closeWaits = context.WithCancel(context.Background())
	return c, nil
}

// MustNew is New for options fixed in the program: it panics where New
// returns an error, like regexp.MustCompile. Options read from
// configuration or flags belong in New.
func MustNew(rdb redis.UniversalClient, opts ...Option) *Client {
	c, err := New(rdb, opts...)
	if err != nil {
		panic(err)
	}
	return c
}

// Close releases the locks this client still holds, stops its background
// work (renewal, wake-ups) and waits for it. Waits under way end, and
// acquisitions after Close fail, with ErrClosed. An acquisition in flight
// when Close begins is waited for: a lock it obtains is released again
// before Close returns, and it reports ErrClosed. The releases keep ctx's
// values but not its cancellation or deadline, and are bounded by the
// release timeout (WithReleaseTimeout), as Release is; a lock that could
// not be released expires with its TTL. The error joins the failed
// releases.
//
// Close's own wait (for the releases and the acquisitions in flight) is
// bounded by the release timeout. The background work it then waits for
// includes tokens being given back (each try bounded by the release
// timeout) and the one-time check of the server (bounded by 5 s). With a
// Redis that stopped answering, go-redis keeps to those bounds only when
// made with ContextTimeoutEnabled; else a read waits for its ReadTimeout.
// An acquisition still waiting for Redis when the bound passes gives its
// grant back when its reply comes, or leaves it to expire with its TTL.
func (c *Client) Close(ctx context.Context) error {
	// No acquisition begins after this; those under way are waited for.
	locks, drained := c.own.Shut()
	c.closeWaits()
	rctx, cancel := c.cleanupContext(ctx)
	defer cancel()
	// The locks held now are released while the acquisitions in flight
	// finish; one that obtains a lock releases it itself (afterClose).
	var errs []error
	for _, l := range locks {
		if err := l.release(rctx, errClosedRelease); err != nil && !errors.Is(err, ErrNotHeld) {
			errs = append(errs, err)
		}
	}
	lease.Drained(rctx, drained)
	c.renewer.Close()
	c.own.WaitBackground()
	c.notify.close()
	return errors.Join(errs...)
}

// keys returns the keys of the lock name under the client's prefix.
func (c *Client) keys(name string) node.Keys { return node.KeysOf(c.cfg.prefix, name) }

// newToken returns a fresh token (see lease.NewToken).
func newToken() string { return lease.NewToken() }

// ms converts a duration to whole milliseconds for PX/PEXPIRE.
func ms(d time.Duration) int64 { return d.Milliseconds() }

// errClosedRelease is the cause of a lock Close released: released, and not
// by its holder, so Run reports that the work may not have been exclusive
// to its end. Every Locker's Close gives it (lockerkit.ErrReleasedByClose):
// one text, matching both ErrReleased and ErrClosed.
var errClosedRelease error = closedRelease{}

type closedRelease struct{}

func (closedRelease) Error() string { return "dlock: released by the Locker's Close" }

func (closedRelease) Is(target error) bool { return target == ErrReleased || target == ErrClosed }

// cleanupContext is the context of a release (Release, Close, the release
// of a lock nobody may keep): ctx's values (trace ids) under the release
// timeout, but not ctx's cancellation or deadline. Cleanup after
// cancellation is the usual case (a deferred Release at the end of a
// cancelled request), and a release cut short would leave the lock in Redis,
// no longer renewed, blocking everyone for the rest of its TTL.
func (c *Client) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	// context.Background (a common release context) has nothing to drop:
	// WithoutCancel would cost an allocation for nothing.
	if _, has := ctx.Deadline(); has || ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	return context.WithTimeout(ctx, c.cfg.releaseTimeout)
}

// checkUsable reports why no call may run now: a closed client, or a
// context that has already ended.
func (c *Client) checkUsable(ctx context.Context) error {
	if c.own.Closed() {
		return ErrClosed
	}
	return ctx.Err()
}
