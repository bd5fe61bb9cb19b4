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
// session (connection) per primary that has waiters of this process, and
// moves a channel to another session when its slot moves (see follow).
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
	// subscribers counts the subscribers of channel on the server that a
	// release publishes to, asked on a command connection: where the
	// Client's commands go now, which after a failover or a migration is not
	// always where a session's connection went.
	subscribers(ctx context.Context, channel string) (int64, error)
	// reload has the Client learn anew which node serves which slot; it
	// returns before the answer is in. Nothing to learn outside a Cluster.
	reload(ctx context.Context)
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
	return forgetFailed(ps.Subscribe(ctx, channel), func() error { return ps.Unsubscribe(ctx, channel) })
}

// forgetFailed undoes, in go-redis' own record, a subscription whose write
// failed: go-redis records the channel whatever the outcome, and would
// subscribe it again when its connection comes back, for a subscription
// dlock knows nothing of. The unsubscribe drops the record first; its own
// write fails as harmlessly.
func forgetFailed(err error, unsubscribe func() error) error {
	if err != nil {
		_ = unsubscribe()
	}
	return err
}

func (plainChannels) unsubscribe(ctx context.Context, ps *redis.PubSub, channel string) error {
	return ps.Unsubscribe(ctx, channel)
}

func (p plainChannels) subscribers(ctx context.Context, channel string) (int64, error) {
	m, err := p.rdb.PubSubNumSub(ctx, channel).Result()
	return m[channel], err
}

func (plainChannels) reload(context.Context) {}

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
	return forgetFailed(ps.SSubscribe(ctx, channel), func() error { return ps.SUnsubscribe(ctx, channel) })
}

func (shardChannels) unsubscribe(ctx context.Context, ps *redis.PubSub, channel string) error {
	return ps.SUnsubscribe(ctx, channel)
}

func (s shardChannels) subscribers(ctx context.Context, channel string) (int64, error) {
	primary, err := s.cluster.MasterForKey(ctx, channel)
	if err != nil {
		return 0, err
	}
	m, err := primary.PubSubShardNumSub(ctx, channel).Result()
	return m[channel], err
}

// reload starts a reload of the slot map in the background (go-redis runs
// at most one at a time, and one more after a 200 ms pause when asked
// meanwhile).
func (s shardChannels) reload(ctx context.Context) { s.cluster.ReloadState(ctx) }
