package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// selfCheck verifies an adapter before it is measured: a fast lock that
// does not exclude, or an adapter that maps errors wrongly, would produce
// numbers that look great and mean nothing. Two lockers with separate
// clients play two processes:
//
//  1. A takes the lock with TryAcquire;
//  2. B's TryAcquire must report errNotObtained;
//  3. B's Acquire with a 100 ms limit must not succeed;
//  4. A releases; B's Acquire must now succeed (within 2 s), and release.
func selfCheck(ctx context.Context, cfg *config, srv *redisServer, lib library) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	env := &cellEnv{addr: srv.addr, cfg: cfg, rt: &roundTrips{}}
	lockers, closeAll, err := lib.open(env, separate, 2)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer closeAll()
	a, b := lockers[0], lockers[1]
	name := "bench:check:" + lib.name

	releaseA, err := a.TryAcquire(ctx, name)
	if err != nil {
		return fmt.Errorf("first TryAcquire: %w", err)
	}
	if rel, err := b.TryAcquire(ctx, name); !errors.Is(err, errNotObtained) {
		if err == nil {
			_ = rel(ctx)
		}
		return fmt.Errorf("TryAcquire of a held lock: got %v, want errNotObtained", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	rel, err := b.Acquire(short, name)
	cancelShort()
	if err == nil {
		_ = rel(ctx)
		return errors.New("Acquire of a held lock succeeded")
	}
	if err := releaseA(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	long, cancelLong := context.WithTimeout(ctx, 2*time.Second)
	defer cancelLong()
	releaseB, err := b.Acquire(long, name)
	if err != nil {
		return fmt.Errorf("Acquire after release: %w", err)
	}
	if err := releaseB(ctx); err != nil {
		return fmt.Errorf("second release: %w", err)
	}
	return nil
}
