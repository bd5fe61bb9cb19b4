package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

func init() {
	register(dlockLibrary("dlock", 40, false, false))
	// dlock with its batching off (WithBatchDepth(0)), and at other depths:
	// optional, to show what batching does beside the default.
	register(dlockLibrary("dlock-nobatch", 42, true, false, dlock.WithBatchDepth(0)))
	register(dlockLibrary("dlock-depth1", 43, true, false, dlock.WithBatchDepth(1)))
	register(dlockLibrary("dlock-depth4", 44, true, false, dlock.WithBatchDepth(4)))
	register(dlockLibrary("dlock-depth8", 45, true, false, dlock.WithBatchDepth(8)))
	// The same on go-redis' (experimental) auto-pipeliner: commands of many
	// goroutines share one write and one read. Optional: run it with
	// -libs raw,dlock,dlock-autopipe.
	register(dlockLibrary("dlock-autopipe", 41, true, true))
}

func dlockLibrary(name string, order int, optional, autopipe bool, opts ...dlock.Option) library {
	return library{
		name:     name,
		order:    order,
		optional: optional,
		settings: func(cfg *config) string {
			via := "a go-redis client"
			if autopipe {
				via = "rdb.AutoPipeline() (go-redis, experimental)"
			}
			extra := ""
			if name != "dlock" && !autopipe {
				extra = " (" + name + ")"
			}
			return fmt.Sprintf("dlock (this repo) on %s%s; WithTTL(%v), WithWait(%v); its own waiting", via, extra, cfg.ttl, cfg.wait)
		},
		open: func(e *cellEnv, lay layout, n int) ([]locker, func(), error) {
			var clients []*dlock.Client
			var mkErr error
			// One dlock.Client per go-redis client, as the README asks (one
			// per process, shared): the goroutines of the shared layout share
			// its local queues and its batching, as a service's would.
			byConn := map[*redis.Client]*dlock.Client{}
			lockers, closeRedis, err := openGoRedis(e, lay, n, func(rdb *redis.Client) locker {
				c := byConn[rdb]
				if c == nil {
					c = newDlock(rdb, autopipe, &mkErr, opts)
					byConn[rdb] = c
					clients = append(clients, c)
				}
				return dlockLocker(e, c)
			})
			if err == nil {
				err = mkErr
			}
			if err != nil {
				if closeRedis != nil {
					closeRedis()
				}
				return nil, nil, err
			}
			closeAll := func() {
				closeDlockClients(clients)
				closeRedis()
			}
			return lockers, closeAll, nil
		},
	}
}

// funcLocker adapts a pair of closures to the locker interface.
type funcLocker struct {
	acquire, try func(ctx context.Context, name string) (releaseFunc, error)
}

func (f funcLocker) Acquire(ctx context.Context, name string) (releaseFunc, error) {
	return f.acquire(ctx, name)
}

func (f funcLocker) TryAcquire(ctx context.Context, name string) (releaseFunc, error) {
	return f.try(ctx, name)
}

// closeDlockClients stops each client's background work (renewal loop,
// wake-up subscription), which would otherwise outlive the cell.
func closeDlockClients(clients []*dlock.Client) {
	for _, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		_ = c.Close(ctx)
		cancel()
	}
}

func wrapDlock[L interface{ Release(context.Context) error }](ctx context.Context, lock L, err error) (releaseFunc, error) {
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, dlock.ErrNotObtained) {
			return nil, errNotObtained
		}
		return nil, err
	}
	return lock.Release, nil
}

// newDlock makes the dlock.Client of one go-redis client: on the client
// itself, or on its auto-pipeliner (a failure to make one lands in *mkErr).
func newDlock(rdb *redis.Client, autopipe bool, mkErr *error, opts []dlock.Option) *dlock.Client {
	var conn redis.UniversalClient = rdb
	if autopipe {
		ap, err := rdb.AutoPipeline()
		if err != nil {
			*mkErr = err
		} else {
			conn = ap
		}
	}
	return dlock.MustNew(conn, opts...)
}

// dlockLocker is one goroutine's view of c.
func dlockLocker(e *cellEnv, c *dlock.Client) locker {
	ttl, wait := e.cfg.ttl, e.cfg.wait
	return funcLocker{
		acquire: func(ctx context.Context, name string) (releaseFunc, error) {
			lock, err := c.Acquire(ctx, name, dlock.WithTTL(ttl), dlock.WithWait(wait))
			return wrapDlock(ctx, lock, err)
		},
		try: func(ctx context.Context, name string) (releaseFunc, error) {
			lock, err := c.TryAcquire(ctx, name, dlock.WithTTL(ttl))
			return wrapDlock(ctx, lock, err)
		},
	}
}
