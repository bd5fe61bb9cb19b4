package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// rueidislock waits without polling: its acquire script also GETs the key,
// which, with client-side caching (RESP3 CLIENT TRACKING, on by default in
// rueidis) makes Redis push an invalidation to the waiter when the key
// changes, and the waiter retries then. Settings and quirks:
//
//   - KeyMajority 1. The default is 2, i.e. three keys
//     (rueidislock:0:name … :2:name) on the one server, two of which must be
//     won — three times the work for no safety gain on a single instance;
//     its README recommends 1 there.
//   - NoLoopTracking true (CLIENT TRACKING … NOLOOP, needs Redis ≥ 7.0.5):
//     a connection is not told about its own writes. In the shared layout
//     all goroutines share one connection, so the in-process waiter is
//     woken by the locker itself on release (a per-name "gate"), not by
//     Redis.
//   - KeyValidity = -ttl (default 5 s); ExtendInterval default = validity/2:
//     a held lock is extended in the background, which a 1 ms hold never
//     reaches. TryNextAfter (default 20 ms) is only a per-key attempt timeout
//     here, and a re-poll period when caching is disabled. In the
//     instruction mode (a Redis under valgrind, a round trip of tens of
//     milliseconds) every attempt would time out: it is -wait there.
//   - PipelineMultiplex is forced to -1 by NewLocker: one connection per
//     Locker, so tracking and commands share it.
//   - The lock *is* a context: it is released by calling the returned
//     CancelFunc, which waits for the delete script to finish, and it is
//     also released if the parent context of WithContext ends. So the
//     adapter gives WithContext a context that the caller's ctx cancels only
//     while still waiting (context.AfterFunc), never once the lock is held.
//   - Release reports no error; a lock lost before release shows as the
//     lock context already being done.

func init() {
	register(library{
		name:  "rueidislock",
		order: 30,
		settings: func(cfg *config) string {
			return fmt.Sprintf("rueidis/rueidislock; KeyMajority 1, NoLoopTracking, KeyValidity %v, ExtendInterval %v (default), waits on client-side-caching invalidations", cfg.ttl, cfg.ttl/2)
		},
		open: openRueidislock,
	})
}

func openRueidislock(e *cellEnv, lay layout, n int) ([]locker, func(), error) {
	count := 1
	if lay == separate {
		count = n
	}
	var made []rueidislock.Locker
	closeAll := func() {
		for _, l := range made {
			l.Close()
		}
	}
	for range count {
		l, err := rueidislock.NewLocker(rueidislock.LockerOption{
			ClientOption: rueidis.ClientOption{
				InitAddress:   []string{e.addr},
				ClientSetInfo: rueidis.DisableClientSetInfo,
			},
			ClientBuilder: func(opt rueidis.ClientOption) (rueidis.Client, error) {
				c, err := rueidis.NewClient(opt)
				if err != nil {
					return nil, err
				}
				return rueidisCounter{Client: c, rt: e.rt}, nil
			},
			KeyMajority:    1,
			NoLoopTracking: true,
			KeyValidity:    e.cfg.ttl,
			TryNextAfter:   slowServerTimeout(e.cfg),
		})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		made = append(made, l)
	}
	lockers := make([]locker, n)
	for i := range lockers {
		lockers[i] = rueidisLocker{made[i%len(made)]}
	}
	return lockers, closeAll, nil
}

type rueidisLocker struct{ l rueidislock.Locker }

func (r rueidisLocker) Acquire(ctx context.Context, name string) (releaseFunc, error) {
	return r.lock(ctx, name, r.l.WithContext)
}

func (r rueidisLocker) TryAcquire(ctx context.Context, name string) (releaseFunc, error) {
	return r.lock(ctx, name, r.l.TryWithContext)
}

func (r rueidisLocker) lock(ctx context.Context, name string,
	fn func(context.Context, string) (context.Context, context.CancelFunc, error)) (releaseFunc, error) {
	// parent outlives ctx: ctx bounds the wait only.
	parent, cancelParent := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancelParent)
	lockCtx, unlock, err := fn(parent, name)
	if err != nil {
		stop()
		cancelParent()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, rueidislock.ErrNotLocked) {
			return nil, errNotObtained
		}
		return nil, err
	}
	if !stop() {
		// ctx ended while the lock was being won; the AfterFunc has
		// cancelled it already. Finish the release and report the wait as
		// cut short.
		unlock()
		cancelParent()
		return nil, ctx.Err()
	}
	return func(context.Context) error {
		lost := lockCtx.Err() != nil
		unlock() // cancels and waits for the delete script
		cancelParent()
		if lost {
			return errLost
		}
		return nil
	}, nil
}
