package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// redsync is used with its defaults except the expiry, which is set to the
// common -ttl. Its defaults (v4.18): 32 tries, a random 50–250 ms sleep
// between tries, a per-try timeout of expiry × 0.05 (100 ms at 2 s), drift
// factor 0.01 (the lock is reported valid for expiry − 1 % − the time the
// SET took). Being a Redlock implementation it runs every try through
// goroutines, and after every *failed* try it also sends the release script
// (to undo partial acquisitions on other nodes) — so a failed try costs two
// round trips even with one node. After 32 failed tries (≈ 5 s on average)
// it gives up with ErrTaken/ErrFailed, which the scenarios count as
// "gave up". In the instruction mode the per-try timeout is -wait, at most
// 0.9 × expiry (see slowServerTimeout).

func init() {
	register(library{
		name:  "redsync",
		order: 10,
		settings: func(cfg *config) string {
			return fmt.Sprintf("redsync/v4 + goredis/v9 pool; WithExpiry(%v); defaults: 32 tries, random 50–250 ms between tries, per-try timeout expiry×0.05, drift 0.01", cfg.ttl)
		},
		open: func(e *cellEnv, lay layout, n int) ([]locker, func(), error) {
			return openGoRedis(e, lay, n, func(rdb *redis.Client) locker {
				return &redsyncLocker{rs: redsync.New(goredis.NewPool(rdb)), cfg: e.cfg}
			})
		},
	})
}

type redsyncLocker struct {
	rs  *redsync.Redsync
	cfg *config
}

func (l *redsyncLocker) Acquire(ctx context.Context, name string) (releaseFunc, error) {
	m := l.rs.NewMutex(name, l.options()...)
	return l.lock(ctx, m, m.LockContext)
}

func (l *redsyncLocker) TryAcquire(ctx context.Context, name string) (releaseFunc, error) {
	m := l.rs.NewMutex(name, l.options()...)
	return l.lock(ctx, m, m.TryLockContext)
}

func (l *redsyncLocker) options() []redsync.Option {
	opts := []redsync.Option{redsync.WithExpiry(l.cfg.ttl)}
	if t := slowServerTimeout(l.cfg); t > 0 {
		// At most 0.9 of the expiry: a try that took longer than the
		// expiry less redsync's drift counts as lost, and is released and
		// tried again, where a timeout would at least fail it.
		opts = append(opts, redsync.WithTimeoutFactor(min(float64(t)/float64(l.cfg.ttl), 0.9)))
	}
	return opts
}

// lock maps redsync's errors onto the adapter contract: it reports a done
// context as ErrFailed, and a lock held by others as ErrTaken (last try) or
// ErrFailed.
func (l *redsyncLocker) lock(ctx context.Context, m *redsync.Mutex, lockFn func(context.Context) error) (releaseFunc, error) {
	if err := lockFn(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var taken *redsync.ErrTaken
		if errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed) {
			return nil, errNotObtained
		}
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err != nil {
			if errors.Is(err, redsync.ErrLockAlreadyExpired) {
				return errLost
			}
			return err
		}
		if !ok {
			return errLost
		}
		return nil
	}, nil
}
