package redlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/lease"
	"github.com/dlock-go/dlock/lockerkit"
)

// ErrNoQuorum: fewer than a majority of the Redlock's nodes granted or
// confirmed the lock, for a reason other than another holder (nodes down or
// failing, or the attempt took longer than the lease).
var ErrNoQuorum = errors.New("redlock: no quorum")

// ErrReleasedLate is part of Release's error, beside dlock.ErrNotHeld, when
// the nodes that said "not ours" within the lock's validity were too few to
// make a majority, and the rest said so only after the validity ran out:
// their leases may have ended while the release waited for them (nodes
// stopped or slow from just before the release until past the TTL). The
// hold, up to the call of Release, was covered by the validity; nothing is
// held any more.
var ErrReleasedLate = errors.New("redlock: the nodes answered the release after the validity ran out")

// Redlock takes locks on a majority of independent Redis primaries (the
// Redlock algorithm), so a lock survives the loss of a minority of them. It
// is a dlock.Locker: code written against dlock.Locker and dlock.Lock runs
// on it unchanged.
//
// It is a trade-off, not a cure: see the package documentation.
type Redlock struct {
	nodes  []nodeClient
	quorum int
	cfg    config

	// closing ends, when Close is called, the waits under way, the
	// attempts still out and the retries of giving grants back.
	closing     context.Context
	stopClosing context.CancelFunc

	// own is what the Redlock owns, for Close (see lease.Owner): its held
	// locks; the acquisition attempts under way on callers' goroutines,
	// which Close waits for, so that an attempt racing it has given back
	// its grants (or released its lock) before Close returns and the
	// process may exit; and the goroutines it starts besides the
	// renewer's (node attempts, the collection of their late replies,
	// re-takes, the nodes a release left to the background, grants being
	// given back), none of which starts once Close has begun.
	own *lease.Owner[*Lock]
	// renewer renews every held lock, a lane per node (see
	// lease.Renewer): no goroutine per lock.
	renewer *lease.Renewer
}

// nodeClient is one of the independent primaries.
type nodeClient struct {
	rdb  redis.Scripter
	conn redis.Cmdable // the same client, for the renewals' pipelines
	lane string        // the node's lane in the renewer
	// sharded: a Cluster client, whose releases tell a waiting Client of
	// the same keys on a shard channel (SPUBLISH), as that Client listens.
	sharded bool
}

var (
	_ dlock.Locker = (*Redlock)(nil)
	_ dlock.Lock   = (*Lock)(nil)
)

// New returns a Redlock over rdbs, each an independent Redis primary (not
// replicas of each other, not one Cluster; a Cluster client counts as one
// node). The quorum is len(rdbs)/2 + 1. Redlock never closes the clients.
//
// Invalid configuration is an error from New, never a panic or an error at
// first use: an *dlock.Error of Op "new" matching dlock.ErrInvalidOption (no
// clients, a nil client, the same client twice, a bad option) or
// dlock.ErrInvalidTTL. Two different client values that reach the same
// server cannot be told apart here: they would count twice towards the
// quorum, so do not pass them.
//
// As for dlock.New, make the clients with ContextTimeoutEnabled, so that a
// call on a node that stopped answering returns by its context's deadline.
func New(rdbs []redis.UniversalClient, opts ...Option) (*Redlock, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if len(rdbs) == 0 {
		cfg.fail(fmt.Errorf("%w: no Redis clients", dlock.ErrInvalidOption))
	}
	seen := map[any]int{}
	for i, rdb := range rdbs {
		if isNil(rdb) {
			cfg.fail(fmt.Errorf("%w: Redis client %d is nil", dlock.ErrInvalidOption, i))
			continue
		}
		if !reflect.TypeOf(rdb).Comparable() {
			continue
		}
		if j, dup := seen[rdb]; dup {
			cfg.fail(fmt.Errorf("%w: Redis clients %d and %d are the same: one node would count twice towards the quorum", dlock.ErrInvalidOption, j, i))
		}
		seen[rdb] = i
	}
	if err := cfg.bounds.Check(cfg.bounds.Default); err != nil {
		cfg.fail(fmt.Errorf("%w (WithDefaultTTL)", err))
	}
	if cfg.err != nil {
		return nil, &dlock.Error{Op: "new", Err: cfg.err}
	}
	r := &Redlock{quorum: len(rdbs)/2 + 1, cfg: cfg, own: lease.NewOwner[*Lock](), renewer: lease.NewRenewer()}
	for i, rdb := range rdbs {
		_, sharded := rdb.(*redis.ClusterClient)
		r.nodes = append(r.nodes, nodeClient{rdb: rdb, conn: rdb, lane: strconv.Itoa(i), sharded: sharded})
	}
	r.closing, r.stopClosing = context.WithCancel(context.Background())
	return r, nil
}

// Do runs fn while holding the lock name: it acquires as Acquire does, then
// runs fn under the lock with dlock.Run (fn's context ends when the lock is
// lost and carries the lock for dlock.FromContext; the lock is released when
// fn returns or panics; a loss while fn ran is reported as an error matching
// dlock.ErrLockLost).
func (r *Redlock) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...dlock.AcquireOption) error {
	l, err := r.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	return dlock.Run(ctx, l, fn)
}

// errClosedRelease is the cause of the context of a lock released by Close.
var errClosedRelease = lockerkit.ErrReleasedByClose

// Close ends the contexts of the locks the Redlock still holds (with a
// cause matching both dlock.ErrReleased and dlock.ErrClosed, as a
// dlock.Client's Close does; a lock whose validity had run out ends as
// lost), each before its release is sent, releases them, ends the waits
// under way (they fail with dlock.ErrClosed, as every acquisition after
// Close does; a lock obtained while Close ran is released again), and stops
// and waits for every goroutine the Redlock started: attempts still out,
// renewals, grants being given back.
//
// The releases keep ctx's values but not its cancellation or deadline, and
// are bounded by the release timeout, as Release is. A lock that could not
// be released on some node expires there with its TTL. The error joins the
// failed releases. The wait for the goroutines is bounded by the release
// timeout and by the lock TTLs, as long as go-redis keeps to context
// deadlines (ContextTimeoutEnabled).
func (r *Redlock) Close(ctx context.Context) error {
	locks, drained := r.own.Shut()
	r.own.StopBackground()
	r.stopClosing()

	rctx, cancel := r.cleanupContext(ctx)
	defer cancel()
	errs := make([]error, len(locks))
	var wg sync.WaitGroup
	for i, l := range locks {
		wg.Go(func() {
			if err := l.release(rctx, errClosedRelease); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	// The attempts are bounded by their validity (and cancelled by
	// closing), not by the release timeout.
	lease.Drained(context.Background(), drained)
	r.renewer.Close()
	r.own.WaitBackground()
	return errors.Join(errs...)
}

// start runs fn on a goroutine of the Redlock's, which Close waits for. It
// reports false, and runs nothing, once Close has begun.
func (r *Redlock) start(fn func()) bool { return r.own.Go(fn) }

func (r *Redlock) isClosed() bool { return r.own.Closed() }

// cleanupContext is the context of a release (Release, Close, the release
// of a lock nobody may keep), by the core's rule: ctx's values (trace ids)
// under the release timeout, but not ctx's cancellation or deadline. Cleanup
// after cancellation is the usual case (a deferred Release at the end of a
// cancelled request), and a release cut short would leave the lock on the
// nodes, no longer renewed, blocking everyone for the rest of its TTL.
func (r *Redlock) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), r.cfg.releaseTimeout)
}

// isNil reports whether rdb is nil or a nil pointer in the interface.
func isNil(rdb redis.UniversalClient) bool {
	if rdb == nil {
		return true
	}
	v := reflect.ValueOf(rdb)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// newToken returns a fresh token, as the core's (see lease.NewToken).
func newToken() string { return lease.NewToken() }
