package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// bsm/redislock retries on a client-side timer; without a RetryStrategy it
// makes one attempt only. Two variants are registered:
//
//   - "redislock": LinearBackoff(10 ms), a poll every 10 ms (the interval is
//     measured by a ticker, so it includes the round trip of the attempt).
//   - "redislock-exp" (optional, -libs to enable): ExponentialBackoff(16 ms,
//     256 ms), the library's suggested minimum; its state counts attempts,
//     so a fresh strategy is built per Acquire.
//
// Its obtain script is SET NX PX plus a GETRANGE branch that lets a caller
// re-obtain with a known token; Obtain without a ctx deadline caps its
// retries at the TTL (the scenarios always pass a deadline). Release is a
// compare-and-delete script, like the raw baseline.

const redislockLinear = 10 * time.Millisecond

func init() {
	register(library{
		name:  "redislock",
		order: 20,
		settings: func(cfg *config) string {
			return fmt.Sprintf("bsm/redislock; ttl %v; RetryStrategy LinearBackoff(%v)", cfg.ttl, redislockLinear)
		},
		open: func(e *cellEnv, lay layout, n int) ([]locker, func(), error) {
			return openGoRedis(e, lay, n, func(rdb *redis.Client) locker {
				return &redislockLocker{c: redislock.New(rdb), cfg: e.cfg,
					retry: func() redislock.RetryStrategy { return redislock.LinearBackoff(redislockLinear) }}
			})
		},
	})
	register(library{
		name:     "redislock-exp",
		order:    21,
		optional: true,
		settings: func(cfg *config) string {
			return fmt.Sprintf("bsm/redislock; ttl %v; RetryStrategy ExponentialBackoff(16ms, 256ms)", cfg.ttl)
		},
		open: func(e *cellEnv, lay layout, n int) ([]locker, func(), error) {
			return openGoRedis(e, lay, n, func(rdb *redis.Client) locker {
				return &redislockLocker{c: redislock.New(rdb), cfg: e.cfg,
					retry: func() redislock.RetryStrategy {
						return redislock.ExponentialBackoff(16*time.Millisecond, 256*time.Millisecond)
					}}
			})
		},
	})
}

type redislockLocker struct {
	c     *redislock.Client
	cfg   *config
	retry func() redislock.RetryStrategy
}

func (l *redislockLocker) Acquire(ctx context.Context, name string) (releaseFunc, error) {
	return l.obtain(ctx, name, &redislock.Options{RetryStrategy: l.retry()})
}

func (l *redislockLocker) TryAcquire(ctx context.Context, name string) (releaseFunc, error) {
	return l.obtain(ctx, name, nil) // nil options: redislock.NoRetry
}

func (l *redislockLocker) obtain(ctx context.Context, name string, opt *redislock.Options) (releaseFunc, error) {
	lock, err := l.c.Obtain(ctx, name, l.cfg.ttl, opt)
	if errors.Is(err, redislock.ErrNotObtained) {
		return nil, errNotObtained
	}
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		err := lock.Release(ctx)
		if errors.Is(err, redislock.ErrLockNotHeld) {
			return errLost
		}
		return err
	}, nil
}
