package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

func init() {
	register(library{
		name:  "dlock",
		order: 40,
		settings: func(cfg *config) string {
			return fmt.Sprintf("dlock (this repo); WithTTL(%v), WithWait(%v); its own waiting", cfg.ttl, cfg.wait)
		},
		open: func(e *cellEnv, lay layout, n int) ([]locker, func(), error) {
			var clients []*dlock.Client
			lockers, closeRedis, err := openGoRedis(e, lay, n, func(rdb *redis.Client) locker {
				c := dlock.New(rdb)
				clients = append(clients, c)
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
			})
			if err != nil {
				return nil, nil, err
			}
			closeAll := func() {
				closeDlockClients(clients)
				closeRedis()
			}
			return lockers, closeAll, nil
		},
	})
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
