package torture

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/election"
	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/redlock"
)

// The locks a worker can use: dlock, and the broken locks the checker must
// catch. Each broken lock is a bug seen in Redis locks in the wild.
const (
	LockDlock = "dlock"
	// SETNX, then PEXPIRE in a second step: a holder that dies between the
	// two leaves a lock without expiry. Here the second step comes a moment
	// after the lock is in hand, as when it follows a log line or a metric.
	LockSetnxExpire = "setnx-expire"
	// SET NX PX with a fixed value, released by a bare DEL: a holder whose
	// lease ran out deletes the next holder's lock.
	LockPlainDel = "plain-del"
	// Released by GET, compare, then DEL in another round trip: the lock can
	// expire and be taken between the two.
	LockGetThenDel = "get-then-del"
	// Correct SET NX PX and compare-and-delete, but no renewal and no loss
	// signal: a critical section longer than the TTL runs on unaware.
	LockNoRenewal = "no-renewal"
	// dlock, but the worker does not give the fence to the resource.
	LockNoFence = "no-fence"
	// LockElection campaigns in a leader election (package election) for
	// each name: a hold is a term as leader, ended by Resign.
	LockElection = "election"
)

// PlantedLocks are the broken locks, for the tests that prove the checker
// bites.
var PlantedLocks = []string{LockSetnxExpire, LockPlainDel, LockGetThenDel, LockNoRenewal, LockNoFence}

// held is one acquisition.
type held interface {
	Fence() int64
	Context() context.Context
	Release(ctx context.Context) error
}

// locker takes locks of one kind.
type locker interface {
	Acquire(ctx context.Context, name string) (held, error)
	Close(ctx context.Context) error
}

// errBusy is a naive lock's "not obtained" after its wait.
var errBusy = errors.New("busy")

type dlockLocker struct {
	c    *dlock.Client
	opts []dlock.AcquireOption
}

func (d dlockLocker) Acquire(ctx context.Context, name string) (held, error) {
	l, err := d.c.Acquire(ctx, name, d.opts...)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (d dlockLocker) Close(ctx context.Context) error { return d.c.Close(ctx) }

// AcquireShared takes a read lock (dlock.WithShared).
func (d dlockLocker) AcquireShared(ctx context.Context, name string) (held, error) {
	l, err := d.c.Acquire(ctx, name, append(d.opts[:len(d.opts):len(d.opts)], dlock.WithShared())...)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// sharedLocker is a locker that also takes read locks.
type sharedLocker interface {
	AcquireShared(ctx context.Context, name string) (held, error)
}

// electionLocker campaigns for leadership, one election per name, as a
// service using package election does: Campaign waits in line until it
// leads, so the worker's wait limit is a deadline on the campaign.
type electionLocker struct {
	c         *dlock.Client
	owner     string
	ttl, wait time.Duration
}

// term is one leadership; Release is Resign.
type term struct{ *election.Leadership }

func (t term) Release(ctx context.Context) error { return t.Resign(ctx) }

func (e electionLocker) Acquire(ctx context.Context, name string) (held, error) {
	el, err := election.New(e.c, name, election.WithIdentity(e.owner), election.WithTTL(e.ttl))
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, e.wait)
	defer cancel()
	l, err := el.Campaign(cctx)
	if err != nil {
		return nil, err
	}
	return term{l}, nil
}

func (e electionLocker) Close(ctx context.Context) error { return e.c.Close(ctx) }

// naive is the broken locks: one string key per name, polled every 10 ms
// while busy, and a context that never ends (they cannot tell a loss).
type naive struct {
	rdb       redis.UniversalClient
	prefix    string
	kind      string
	ttl, wait time.Duration
}

var (
	compareDel = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	// Naive locks take fences from a counter too, so that the resource can
	// judge them; only their exclusion is broken.
	naiveFence = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end
return 0`)
	naiveSetnx = redis.NewScript(`
if redis.call('SETNX', KEYS[1], ARGV[1]) == 1 then return redis.call('INCR', KEYS[2]) end
return 0`)
)

type naiveHold struct {
	n     *naive
	key   string
	token string
	fence int64
}

func (h *naiveHold) Fence() int64             { return h.fence }
func (h *naiveHold) Context() context.Context { return context.Background() }

func (n *naive) Acquire(ctx context.Context, name string) (held, error) {
	// dlock's lock key and fence counter of the name: in its slot, so the
	// faults aimed at the name's lock hit a naive lock too.
	k := node.KeysOf(n.prefix, name)
	key := k.Lock
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	if n.kind == LockPlainDel {
		token = "locked"
	}
	deadline := time.Now().Add(n.wait)
	for {
		script, args := naiveFence, []any{token, n.ttl.Milliseconds()}
		if n.kind == LockSetnxExpire {
			script, args = naiveSetnx, []any{token}
		}
		fence, err := script.Run(ctx, n.rdb, []string{key, k.Fence}, args...).Int64()
		if err != nil {
			return nil, err
		}
		if fence > 0 {
			h := &naiveHold{n: n, key: key, token: token, fence: fence}
			if n.kind == LockSetnxExpire {
				// The bug: the expiry is a second step. A holder that
				// dies before it leaves the lock for ever.
				go func() {
					time.Sleep(20 * time.Millisecond)
					n.rdb.PExpire(context.Background(), key, n.ttl)
				}()
			}
			return h, nil
		}
		if time.Now().After(deadline) {
			return nil, errBusy
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (h *naiveHold) Release(ctx context.Context) error {
	rdb := h.n.rdb
	switch h.n.kind {
	case LockPlainDel:
		return rdb.Del(ctx, h.key).Err()
	case LockGetThenDel:
		v, err := rdb.Get(ctx, h.key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if v != h.token {
			return dlock.ErrNotHeld
		}
		// A round trip later, the key may be another's.
		time.Sleep(20 * time.Millisecond)
		return rdb.Del(ctx, h.key).Err()
	}
	n, err := compareDel.Run(ctx, rdb, []string{h.key}, h.token).Int()
	if err == nil && n == 0 {
		return dlock.ErrNotHeld
	}
	return err
}

func (n *naive) Close(context.Context) error { return nil }

// newLocker makes the locker of kind over rdb.
func newLocker(kind string, rdb redis.UniversalClient, owner, prefix string, ttl, wait time.Duration, replicas, permits int, durable time.Duration) (locker, error) {
	switch kind {
	case LockDlock, LockNoFence:
		opts := []dlock.AcquireOption{dlock.WithTTL(ttl), dlock.WithWait(wait)}
		if replicas > 0 {
			opts = append(opts, dlock.WithReplicas(replicas, ttl/4))
		}
		if durable > 0 {
			opts = append(opts, dlock.WithDurableGrant(durable))
		}
		if permits > 0 {
			opts = append(opts, dlock.WithPermits(permits))
		}
		return dlockLocker{c: dlock.MustNew(rdb, dlock.WithDefaultOwner(owner), dlock.WithPrefix(prefix)), opts: opts}, nil
	case LockElection:
		return electionLocker{c: dlock.MustNew(rdb, dlock.WithDefaultOwner(owner), dlock.WithPrefix(prefix)), owner: owner, ttl: ttl, wait: wait}, nil
	case LockSemRacy:
		return &semRacy{rdb: rdb, prefix: prefix, n: max(permits, 1), ttl: ttl, wait: wait}, nil
	case LockSetnxExpire, LockPlainDel, LockGetThenDel, LockNoRenewal:
		return &naive{rdb: rdb, prefix: prefix, kind: kind, ttl: ttl, wait: wait}, nil
	}
	return nil, fmt.Errorf("torture: unknown lock %q (want %s, %s or one of %v)", kind, LockDlock, LockElection, PlantedLocks)
}

// finalOf is a hold's Final: why the lock's context had ended when Release
// returned, or, for a Redlock, that its validity ran out before the nodes
// answered. A Redlock ends its context (ErrReleased) when Release begins,
// before it asks the nodes, and says in the error when too few of them said
// "not ours" within the validity (redlock.ErrReleasedLate): the holder's
// belief in its lease ended with the validity, as a Client's context ends
// when a lease runs out during its Release.
func finalOf(ctx context.Context, releaseErr error) string {
	if errors.Is(releaseErr, redlock.ErrReleasedLate) {
		return "expired"
	}
	return causeOf(context.Cause(ctx))
}

// causeOf names why a lock's context ended.
func causeOf(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, dlock.ErrReleased):
		return "released"
	case errors.Is(err, dlock.ErrHoldLimit):
		return "hold_limit"
	case errors.Is(err, dlock.ErrLockLost):
		if strings.Contains(err.Error(), "gone or taken over") { // issue 13 gives causes a type
			return "taken_over"
		}
		return "expired"
	case errors.Is(err, dlock.ErrClosed):
		return "closed"
	}
	return "other"
}
