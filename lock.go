package dlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
)

// Lock is one acquisition of a named lock. It is safe for concurrent use.
//
// Its token identifies this acquisition only: Release, Refresh and TTL act
// in Redis only while the stored token is still this one, so a holder whose
// lease ran out can never free or extend the next holder's lock.
type Lock struct {
	c     *Client
	name  string
	keys  keys
	token string
	fence int64

	mu       sync.Mutex
	ttl      time.Duration
	leased   time.Time // send time of the last confirmed acquire or refresh
	released bool      // Release succeeded or found the lock gone
}

func (c *Client) newLock(name string, k keys, token string, fence int64, ttl time.Duration, sent time.Time) *Lock {
	return &Lock{c: c, name: name, keys: k, token: token, fence: fence, ttl: ttl, leased: sent}
}

// Name returns the lock's name as given to Acquire.
func (l *Lock) Name() string { return l.name }

// Token returns this acquisition's random token (128 bits, hex). It is a
// secret of the holder: whoever knows it can release the lock, so do not log
// it in full.
func (l *Lock) Token() string { return l.token }

// Fence returns this acquisition's fencing token. Fences of one name grow
// with every acquisition, also across expiry and a Redis restarted empty. A
// resource that remembers the largest fence it has seen, and refuses writes
// with a smaller one, is safe from a holder whose lease ran out unnoticed.
func (l *Lock) Fence() int64 { return l.fence }

// TTL returns the remaining lease as Redis sees it. It returns ErrNotHeld when
// the lock is no longer ours.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if l.isReleased() {
		return 0, opError("ttl", l.name, ErrNotHeld)
	}
	left, err := scripts.PTTL.Run(ctx, l.c.rdb, []string{l.keys.lock}, l.token).Int64()
	if err != nil {
		return 0, opError("ttl", l.name, redisError(err))
	}
	if left < 0 {
		return 0, opError("ttl", l.name, ErrNotHeld)
	}
	return time.Duration(left) * time.Millisecond, nil
}

// Refresh sets the lease to ttl from now, if the lock is still ours; else it
// returns ErrNotHeld and changes nothing. ttl must lie within the client's
// bounds.
func (l *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := l.c.cfg.checkTTL(ttl); err != nil {
		return opError("refresh", l.name, err)
	}
	ttl = ttl.Truncate(time.Millisecond)
	if l.isReleased() {
		return opError("refresh", l.name, ErrNotHeld)
	}
	sent := time.Now()
	ok, err := scripts.Refresh.Run(ctx, l.c.rdb, []string{l.keys.lock}, l.token, ms(ttl)).Int64()
	if err != nil {
		return opError("refresh", l.name, redisError(err))
	}
	if ok != 1 {
		return opError("refresh", l.name, ErrNotHeld)
	}
	l.mu.Lock()
	l.ttl, l.leased = ttl, sent
	l.mu.Unlock()
	return nil
}

// Release lets the lock go and wakes its waiters. It returns ErrNotHeld when
// the lock was not ours any more (released before, expired, or taken by
// another holder); then nothing in Redis is changed.
//
// Release runs on a context of its own, bounded by the client's release
// timeout, so a deferred Release works even when ctx is already cancelled.
// Values of ctx (trace ids) are kept.
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return opError("release", l.name, ErrNotHeld)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.c.cfg.releaseTimeout)
	defer cancel()
	res, err := l.c.runRelease(rctx, l.keys, l.token, "")
	if err != nil {
		// State unknown: the caller may try again, and a re-sent release
		// that finds its own tombstone still reports success.
		return opError("release", l.name, redisError(err))
	}
	l.released = true
	switch res {
	case 1, 2: // 2: this token's release had already run (a re-sent command)
		return nil
	case 0:
		return opError("release", l.name, ErrNotHeld)
	}
	return opError("release", l.name, fmt.Errorf("unexpected reply %d", res))
}

// runRelease runs the release script: it frees the lock if token still holds
// it and hands it to the first live waiter. waiter, when set, is this
// client's waiter id, whose entry is dropped if it still carries token.
func (c *Client) runRelease(ctx context.Context, k keys, token, waiter string) (int64, error) {
	return scripts.Release.Run(ctx, c.rdb, []string{k.lock, k.fence, k.queue, k.qdata, k.last},
		token, k.channel, ms(tombstoneTTL), waiter, k.handoff).Int64()
}

// tombstoneTTL is how long Redis remembers the token of a release, so that
// the same release sent again (go-redis re-sends a command after a read
// timeout) reports success rather than a false ErrNotHeld. It covers
// go-redis' default retries with their timeouts several times over.
const tombstoneTTL = 30 * time.Second

func (l *Lock) isReleased() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released
}
