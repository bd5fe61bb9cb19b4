package main

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// roundTrips counts client round trips: one per request the library hands
// to its Redis client and waits for, that is one command or one pipeline
// (MULTI/EXEC or DoMulti batch) however many commands it carries. A script
// call is one round trip, and two when the client falls back from EVALSHA to
// EVAL on NOSCRIPT (both clients do this transparently). Retries a client
// makes inside one call after a network error are not counted again; none
// happen on loopback.
//
// Counting happens on the client side, by wrapping the client, because the
// server cannot tell which library a command came from and because a
// library's own chattiness (e.g. redsync releasing after every failed try)
// is exactly what we want to see.
//
// Messages Redis pushes without being asked are not round trips and are not
// counted: pub/sub messages (and the SUBSCRIBE on a go-redis PubSub
// connection, which bypasses the hooks) and client-side-caching
// invalidations. Their cost shows in the server columns.
//
// rueidis pipelines concurrent calls automatically, so several counted
// round trips may share one TCP write; they are still separate requests the
// caller waits for, so they are counted separately, as with go-redis.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) add()        { r.n.Add(1) }
func (r *roundTrips) load() int64 { return r.n.Load() }
func (r *roundTrips) reset()      { r.n.Store(0) }

// goRedisCounter is a redis.Hook counting one round trip per Process call
// and one per ProcessPipeline call (pipelines and transactions).
type goRedisCounter struct{ rt *roundTrips }

var _ redis.Hook = goRedisCounter{}

func (h goRedisCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

func (h goRedisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.rt.add()
		return next(ctx, cmd)
	}
}

func (h goRedisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.rt.add()
		return next(ctx, cmds)
	}
}

// rueidisCounter wraps a rueidis.Client and counts one round trip per Do,
// DoCache, DoStream call and one per DoMulti, DoMultiCache, DoMultiStream
// batch. It plays the role of the rueidishook package, which the Go module
// proxy does not serve as a module of its own (checked: 404 for
// github.com/redis/rueidis/rueidishook), and it is installed through
// rueidislock.LockerOption.ClientBuilder. Receive and Dedicated(e) are not
// counted: rueidislock does not use them (its waiting relies on
// client-side-caching invalidations pushed on the normal connection).
type rueidisCounter struct {
	rueidis.Client
	rt *roundTrips
}

func (c rueidisCounter) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.rt.add()
	return c.Client.Do(ctx, cmd)
}

func (c rueidisCounter) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.rt.add()
	return c.Client.DoMulti(ctx, multi...)
}

func (c rueidisCounter) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c.rt.add()
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c rueidisCounter) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	c.rt.add()
	return c.Client.DoMultiCache(ctx, multi...)
}

func (c rueidisCounter) DoStream(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResultStream {
	c.rt.add()
	return c.Client.DoStream(ctx, cmd)
}

func (c rueidisCounter) DoMultiStream(ctx context.Context, multi ...rueidis.Completed) rueidis.MultiRedisResultStream {
	c.rt.add()
	return c.Client.DoMultiStream(ctx, multi...)
}
