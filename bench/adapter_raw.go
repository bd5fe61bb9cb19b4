package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The raw baseline is the smallest correct single-instance Redis lock: SET
// name token NX PX ttl to take it, a compare-and-delete script to release it
// (so a holder whose lock expired cannot delete the next holder's lock).
// Every library is reported as a ratio to it.
//
// Waiting: by default it retries at once after a failed SET (cfg.rawRetry =
// 0). That is the cheapest possible wake-up latency a polling lock can have
// and the most expensive one for Redis, so it bounds the libraries from
// both sides: their throughput ratio shows what their waiting strategy
// costs in latency, the per-acquisition Redis CPU and command columns show
// what it saves. -raw-retry sets a fixed sleep between attempts instead.

func init() {
	register(library{
		name:  "raw",
		order: 0,
		settings: func(cfg *config) string {
			wait := "retry at once after a failed SET"
			if cfg.rawRetry > 0 {
				wait = fmt.Sprintf("sleep %v between attempts", cfg.rawRetry)
			}
			return fmt.Sprintf("go-redis `SET NX PX %v` + compare-and-delete Lua; %s", cfg.ttl, wait)
		},
		open: func(e *cellEnv, lay layout, n int) ([]locker, func(), error) {
			return openGoRedis(e, lay, n, func(rdb *redis.Client) locker {
				return &rawLocker{rdb: rdb, cfg: e.cfg}
			})
		},
	})
}

var rawRelease = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

type rawLocker struct {
	rdb *redis.Client
	cfg *config
}

func (l *rawLocker) TryAcquire(ctx context.Context, name string) (releaseFunc, error) {
	token := randomToken()
	err := l.rdb.Do(ctx, "SET", name, token, "NX", "PX", l.cfg.ttl.Milliseconds()).Err()
	if errors.Is(err, redis.Nil) {
		return nil, errNotObtained
	}
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		n, err := rawRelease.Run(ctx, l.rdb, []string{name}, token).Int64()
		if err != nil {
			return err
		}
		if n != 1 {
			return errLost
		}
		return nil
	}, nil
}

func (l *rawLocker) Acquire(ctx context.Context, name string) (releaseFunc, error) {
	for {
		release, err := l.TryAcquire(ctx, name)
		if !errors.Is(err, errNotObtained) {
			return release, err
		}
		if err := sleepCtx(ctx, l.cfg.rawRetry); err != nil {
			return nil, err
		}
	}
}
