package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// The demo's protected resource is a shop in the same Redis as the locks,
// under the demo's own prefix: a stock count and the orders per user. Its
// reads and writes are scripts so that it can check fencing tokens
// atomically; the business logic between them is not atomic on purpose.
var (
	//go:embed shop_read.lua
	shopReadSrc string
	//go:embed shop_write.lua
	shopWriteSrc string

	shopRead  = redis.NewScript(shopReadSrc)
	shopWrite = redis.NewScript(shopWriteSrc)
)

type shop struct {
	rdb redis.UniversalClient
	// stock, orders and the highest fence seen share the hash tag {shop},
	// so the scripts also run on a Cluster.
	keys []string
}

func newShop(rdb redis.UniversalClient, prefix string) *shop {
	return &shop{rdb: rdb, keys: []string{prefix + "{shop}:stock", prefix + "{shop}:orders", prefix + "{shop}:fence"}}
}

// reset stocks the shop with n items and no orders.
func (s *shop) reset(ctx context.Context, n int) error {
	pipe := s.rdb.TxPipeline()
	pipe.Del(ctx, s.keys...)
	pipe.Set(ctx, s.keys[0], n, 0)
	_, err := pipe.Exec(ctx)
	return err
}

// read returns the stock and the user's orders; ok is false when fence is
// stale. fence is "" for a caller without fencing tokens.
func (s *shop) read(ctx context.Context, fence string, user int) (stock, orders int64, ok bool, err error) {
	r, err := shopRead.Run(ctx, s.rdb, s.keys, fence, user).Int64Slice()
	if err != nil || len(r) != 3 {
		return 0, 0, false, fmt.Errorf("shop read: %v %w", r, err)
	}
	return r[1], r[2], r[0] == 1, nil
}

// write stores the new stock and one order for user, unless fence is stale.
func (s *shop) write(ctx context.Context, fence string, user int, stock int64) (bool, error) {
	n, err := shopWrite.Run(ctx, s.rdb, s.keys, fence, user, stock).Int64()
	return n == 1, err
}

// tally reads the outcome: orders in all, users with an order, orders
// beyond one per user and the users who have them, and the stock left.
func (s *shop) tally(ctx context.Context) (t tally, err error) {
	orders, err := s.rdb.HGetAll(ctx, s.keys[1]).Result()
	if err != nil {
		return t, err
	}
	for _, v := range orders {
		n, _ := strconv.ParseInt(v, 10, 64)
		t.Orders += n
		if n > 1 {
			t.Duplicates += n - 1
			t.DupUsers++
		}
	}
	t.Stock, err = s.rdb.Get(ctx, s.keys[0]).Int64()
	return t, err
}

type tally struct {
	Orders, Duplicates, DupUsers, Stock int64
}

// errGaveUp: the worker could not get the lock in time; it skips the order.
var errGaveUp = errors.New("gave up waiting for the lock")

// demoLock is the lock a worker takes around one order, naive or dlock.
type demoLock interface {
	// acquire returns the fencing token to pass to the shop, or "".
	acquire(ctx context.Context) (fence string, err error)
	// release lets the lock go and counts what it finds in res.
	release(ctx context.Context, res *workerResult) error
}

// naiveLock is the lock of the articles that warn against it: SETNX, then
// a separate PEXPIRE, a value that does not say whose lock it is, and a
// plain DEL that deletes whatever lock is there.
type naiveLock struct {
	rdb    redis.UniversalClient
	key    string
	audit  string // the demo's own record of the holder; the lock cannot tell
	ttl    time.Duration
	worker int
	me     string
	seq    int
}

func (n *naiveLock) acquire(ctx context.Context) (string, error) {
	deadline := time.Now().Add(demoAcquireWait)
	for time.Now().Before(deadline) {
		ok, err := n.rdb.SetNX(ctx, n.key, "locked", 0).Result()
		if err != nil {
			return "", err
		}
		if ok {
			// A crash between these two commands leaves a lock that never
			// expires; the demo does not crash, so this flaw stays unseen.
			if err := n.rdb.PExpire(ctx, n.key, n.ttl).Err(); err != nil {
				return "", err
			}
			n.seq++
			n.me = fmt.Sprintf("w%d/%d", n.worker, n.seq)
			return "", n.rdb.Set(ctx, n.audit, n.me, 0).Err()
		}
		time.Sleep(2 * time.Millisecond)
	}
	return "", errGaveUp
}

func (n *naiveLock) release(ctx context.Context, res *workerResult) error {
	// GET before DEL, to count: the lock's value is "locked" whoever holds
	// it, so the audit key tells whose lock the DEL is about to delete. A
	// holder that took the lock a moment ago may not have written the audit
	// key yet, so the count is a lower bound.
	pipe := n.rdb.Pipeline()
	lockVal := pipe.Get(ctx, n.key)
	holder := pipe.Get(ctx, n.audit)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	if lockVal.Err() == nil && holder.Val() != n.me {
		res.ForeignDeletes++
	}
	return n.rdb.Del(ctx, n.key).Err()
}

// dlockLock is the same lock taken with dlock: one atomic acquire with a
// TTL, renewal, a fencing token, and a release that checks the token.
type dlockLock struct {
	c    *dlock.Client
	ttl  time.Duration
	held dlock.Lock
}

func (d *dlockLock) acquire(ctx context.Context) (string, error) {
	l, err := d.c.Acquire(ctx, "shop", dlock.WithTTL(d.ttl), dlock.WithWait(demoAcquireWait))
	if errors.Is(err, dlock.ErrNotObtained) {
		return "", errGaveUp
	}
	if err != nil {
		return "", err
	}
	d.held = l
	return strconv.FormatInt(l.Fence(), 10), nil
}

func (d *dlockLock) release(ctx context.Context, res *workerResult) error {
	err := d.held.Release(ctx)
	if errors.Is(err, dlock.ErrNotHeld) {
		// The naive DEL would have deleted whoever holds it now.
		res.ReleaseRefused++
		return nil
	}
	return err
}
