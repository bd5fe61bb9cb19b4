package dlock

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// channels is how hand-off channels work on the Client's deployment: the
// one place that tells a Cluster from the rest for pub/sub.
//
// Outside a Cluster (standalone, Sentinel) they are plain channels:
// SUBSCRIBE, and PUBLISH in the release script, all on one connection. In
// a Cluster they are shard channels (SSUBSCRIBE and SPUBLISH, Redis 7): a
// message then stays on the shard of its lock instead of being broadcast
// over the cluster bus to every node. A shard channel can only be
// subscribed on the node that serves its slot, so the notifier keeps one
// session (connection) per primary that has waiters of this process.
type channels interface {
	// sharded reports whether releases publish with SPUBLISH.
	sharded() bool
	// sessionOf returns the key of the session that serves channel: ""
	// outside a Cluster, the primary's address in one.
	sessionOf(ctx context.Context, channel string) (string, error)
	// open returns a new connection subscribed to chans, all of one
	// session. go-redis does not report a failed SUBSCRIBE here: it
	// subscribes again when the connection is next read.
	open(ctx context.Context, chans []string) *redis.PubSub
	// subscribe and unsubscribe change what an open connection listens to.
	subscribe(ctx context.Context, ps *redis.PubSub, channel string) error
	unsubscribe(ctx context.Context, ps *redis.PubSub, channel string) error
}

func channelsOf(rdb redis.UniversalClient) channels {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return shardChannels{cc}
	}
	return plainChannels{rdb}
}

// plainChannels: SUBSCRIBE and PUBLISH, one session.
type plainChannels struct{ rdb redis.UniversalClient }

func (plainChannels) sharded() bool { return false }

func (plainChannels) sessionOf(context.Context, string) (string, error) { return "", nil }

func (p plainChannels) open(ctx context.Context, chans []string) *redis.PubSub {
	return p.rdb.Subscribe(ctx, chans...)
}

func (plainChannels) subscribe(ctx context.Context, ps *redis.PubSub, channel string) error {
	return ps.Subscribe(ctx, channel)
}

func (plainChannels) unsubscribe(ctx context.Context, ps *redis.PubSub, channel string) error {
	return ps.Unsubscribe(ctx, channel)
}

// shardChannels: SSUBSCRIBE and SPUBLISH, one session per primary.
type shardChannels struct{ cluster *redis.ClusterClient }

func (shardChannels) sharded() bool { return true }

func (s shardChannels) sessionOf(ctx context.Context, channel string) (string, error) {
	primary, err := s.cluster.MasterForKey(ctx, channel)
	if err != nil {
		return "", err
	}
	return primary.Options().Addr, nil
}

// open connects to the node that serves the first channel's slot, and sends
// each channel an SSUBSCRIBE of its own: one may not span slots, and a
// session serves the channels of several slots of its node.
func (s shardChannels) open(ctx context.Context, chans []string) *redis.PubSub {
	ps := s.cluster.SSubscribe(ctx, chans[0])
	for _, ch := range chans[1:] {
		_ = ps.SSubscribe(ctx, ch)
	}
	return ps
}

func (shardChannels) subscribe(ctx context.Context, ps *redis.PubSub, channel string) error {
	return ps.SSubscribe(ctx, channel)
}

func (shardChannels) unsubscribe(ctx context.Context, ps *redis.PubSub, channel string) error {
	return ps.SUnsubscribe(ctx, channel)
}
