// Package flightcache keeps the result of an expensive read (a walk of the
// keyspace) for a while, and lets one read run at a time: what an
// unauthenticated page or a metrics scrape needs so that its callers cannot
// make Redis work on demand. dlockadmin keeps its listings in one, keyed by
// filter; dlockprom's FleetCollector its figures, under one key.
package flightcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Cache keeps the value read for each key for its TTL, runs at most one read
// at a time across all keys, and lets the callers that ask for a key while
// its read is under way share that read. It starts no goroutine: a read
// runs in the goroutine of the caller that found nothing fresh.
type Cache[K comparable, V any] struct {
	ttl  time.Duration
	max  int
	turn chan struct{} // holds a token while a read runs

	mu      sync.Mutex
	entries map[K]*entry[V]
}

var errPanicked = errors.New("flightcache: the read panicked")

// entry is a read under way (done open) or finished (done closed).
type entry[V any] struct {
	done chan struct{}
	val  V
	err  error
	at   time.Time // when the read ended
	// abandoned: the read's own caller gave up (its context ended) before
	// or during the read; its result is not the others', who try again.
	abandoned bool
}

// ErrNoTurn is the error, beside ctx's, of a Get whose context ended while
// it waited for its turn to read: the other reads took the time, not the
// read's source, which was never asked.
var ErrNoTurn = errors.New("flightcache: gave up waiting for a turn to read")

// New returns a Cache that keeps a value for ttl (0: never kept, but
// callers at the same moment still share one read) and at most keep keys
// (at least 1): a caller who varies the key gets no more than keep values
// kept, and still no more than one read at a time.
func New[K comparable, V any](ttl time.Duration, keep int) *Cache[K, V] {
	return &Cache[K, V]{ttl: ttl, max: max(keep, 1), turn: make(chan struct{}, 1), entries: map[K]*entry[V]{}}
}

// Get returns the value of key: kept from a read that ended less than the
// TTL ago, the result of the read of key under way, or read(ctx) called here
// once no other read runs. fresh is false when the value comes from the
// cache or from another caller's read. A failed read is returned to the
// callers that shared it and not kept. Get gives up when ctx ends, with
// ctx's error, also while it waits for its turn.
func (c *Cache[K, V]) Get(ctx context.Context, key K, read func(ctx context.Context) (V, error)) (v V, fresh bool, err error) {
	for {
		c.mu.Lock()
		e := c.entries[key]
		if e != nil {
			select {
			case <-e.done:
				if time.Since(e.at) < c.ttl {
					c.mu.Unlock()
					return e.val, false, nil
				}
				e = nil // stale: read again
			default:
			}
		}
		if e != nil {
			c.mu.Unlock()
			select {
			case <-e.done:
			case <-ctx.Done():
				return v, false, ctx.Err()
			}
			if e.abandoned {
				continue // its caller left; this one may still read
			}
			return e.val, false, e.err
		}
		e = &entry[V]{done: make(chan struct{})}
		c.entries[key] = e
		c.evict()
		c.mu.Unlock()
		return c.lead(ctx, key, e, read)
	}
}

// lead waits for the turn and reads for key, and hands the result to those
// who wait on e.
func (c *Cache[K, V]) lead(ctx context.Context, key K, e *entry[V], read func(ctx context.Context) (V, error)) (V, bool, error) {
	finish := func() {
		c.mu.Lock()
		e.at = time.Now()
		if e.err != nil || e.abandoned || c.ttl <= 0 {
			if c.entries[key] == e {
				delete(c.entries, key)
			}
		}
		c.mu.Unlock()
		close(e.done)
	}
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		e.err, e.abandoned = fmt.Errorf("%w: %w", ErrNoTurn, ctx.Err()), true
		finish()
		return e.val, false, e.err
	}
	// Deferred, so that a panic in read frees the turn and the waiters
	// (who then read themselves) and goes on with its own stack.
	returned := false
	defer func() {
		<-c.turn
		if !returned {
			e.err, e.abandoned = errPanicked, true
		}
		finish()
	}()
	e.val, e.err = read(ctx)
	returned = true
	if e.err != nil && ctx.Err() != nil {
		e.abandoned = true // cut short by this caller leaving, not by Redis
	}
	return e.val, true, e.err
}

// evict drops values past their TTL, then the oldest kept values while more
// than max keys are kept. Reads under way stay. c.mu must be held.
func (c *Cache[K, V]) evict() {
	var oldestKey K
	for len(c.entries) > c.max {
		var oldest *entry[V]
		for k, e := range c.entries {
			select {
			case <-e.done:
			default:
				continue
			}
			if time.Since(e.at) >= c.ttl {
				delete(c.entries, k)
				continue
			}
			if oldest == nil || e.at.Before(oldest.at) {
				oldest, oldestKey = e, k
			}
		}
		if oldest == nil {
			return // only reads under way
		}
		if len(c.entries) > c.max {
			delete(c.entries, oldestKey)
		}
	}
}

// Forget drops every kept value, so that the next Get reads: after a write
// that the values no longer show. A read under way when Forget is called
// still answers those who wait for it, but is not kept.
func (c *Cache[K, V]) Forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
}
