package dlock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier owns the Client's one pub/sub connection. Waiters of this process
// share it: each channel is subscribed once, reference-counted, and kept for
// a while after its last waiter left, so a process that waits on the same
// name again and again does not pay a SUBSCRIBE round trip every time.
//
// The connection and its reading goroutine exist only while some channel is
// subscribed: an idle Client runs no goroutine.
//
// In a Cluster the hand-off channels are shard channels (SSUBSCRIBE and
// SPUBLISH, Redis 7): a message then stays on the shard of its lock instead
// of being broadcast over the cluster bus to every node. A shard channel can
// only be subscribed on the node that serves its slot, so there is one
// session per primary that has waiters of this process.
type notifier struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // nil outside a Cluster
	linger  time.Duration

	mu       sync.Mutex
	closed   bool
	subs     map[string]*subscription
	sessions map[string]*session // by primary address ("" outside a Cluster)
	wg       sync.WaitGroup
}

// session is one pub/sub connection and the goroutine that reads it.
type session struct {
	node string
	ps   *redis.PubSub
	stop context.CancelFunc
	ctx  context.Context
}

// subscription is one channel that waiters listen to.
type subscription struct {
	channel string
	node    string // the session's key
	refs    int
	ready   chan struct{} // closed when Redis confirmed the subscription
	isReady bool
	msgs    chan string // payloads; a slow reader loses the oldest, never blocks the reader
	linger  *time.Timer
}

func newNotifier(rdb redis.UniversalClient) *notifier {
	n := &notifier{rdb: rdb, linger: subscriptionLinger, subs: map[string]*subscription{}, sessions: map[string]*session{}}
	n.cluster, _ = rdb.(*redis.ClusterClient)
	return n
}

// sharded reports whether hand-off messages use shard channels.
func (n *notifier) sharded() bool { return n.cluster != nil }

// subscriptionLinger is how long a channel stays subscribed after its last
// waiter left.
const subscriptionLinger = 3 * time.Second

// subscribe returns the subscription of channel, subscribing if needed. The
// caller must wait for ready before it relies on messages, and call
// unsubscribe when done.
func (n *notifier) subscribe(ctx context.Context, channel string) (*subscription, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	if s := n.subs[channel]; s != nil {
		s.refs++
		if s.linger != nil {
			s.linger.Stop()
			s.linger = nil
		}
		return s, nil
	}
	node := ""
	if n.cluster != nil {
		primary, err := n.cluster.MasterForKey(ctx, channel)
		if err != nil {
			return nil, err
		}
		node = primary.Options().Addr
	}
	s := &subscription{channel: channel, node: node, refs: 1, ready: make(chan struct{}), msgs: make(chan string, 4)}
	// The SUBSCRIBE is written under mu, so it cannot overtake the
	// UNSUBSCRIBE of an earlier subscription of the same channel.
	if sess := n.sessions[node]; sess == nil {
		sctx, stop := context.WithCancel(context.Background())
		var ps *redis.PubSub
		if n.cluster != nil {
			ps = n.cluster.SSubscribe(ctx, channel)
		} else {
			ps = n.rdb.Subscribe(ctx, channel)
		}
		sess = &session{node: node, ps: ps, stop: stop, ctx: sctx}
		n.sessions[node] = sess
		n.wg.Add(1)
		go n.read(sess)
	} else if err := n.subscribeMore(ctx, sess, channel); err != nil {
		return nil, err
	}
	n.subs[channel] = s
	return s, nil
}

func (n *notifier) subscribeMore(ctx context.Context, sess *session, channel string) error {
	if n.cluster != nil {
		return sess.ps.SSubscribe(ctx, channel)
	}
	return sess.ps.Subscribe(ctx, channel)
}

// unsubscribe drops one reference; the channel is unsubscribed after the
// linger time unless a waiter comes back.
func (n *notifier) unsubscribe(s *subscription) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s.refs--
	if s.refs > 0 {
		return
	}
	s.linger = time.AfterFunc(n.linger, func() { n.expire(s) })
}

func (n *notifier) expire(s *subscription) {
	n.mu.Lock()
	if s.refs > 0 || n.subs[s.channel] != s {
		n.mu.Unlock()
		return
	}
	delete(n.subs, s.channel)
	sess := n.sessions[s.node]
	if sess == nil {
		n.mu.Unlock()
		return
	}
	for _, other := range n.subs {
		if other.node == s.node {
			// The session still serves others: drop only this channel.
			if n.cluster != nil {
				_ = sess.ps.SUnsubscribe(context.Background(), s.channel)
			} else {
				_ = sess.ps.Unsubscribe(context.Background(), s.channel)
			}
			n.mu.Unlock()
			return
		}
	}
	delete(n.sessions, s.node)
	n.mu.Unlock()
	sess.stop()
	_ = sess.ps.Close()
}

// close ends the session at once and waits for its goroutine.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	for ch, s := range n.subs {
		if s.linger != nil {
			s.linger.Stop()
		}
		delete(n.subs, ch)
	}
	sessions := n.sessions
	n.sessions = map[string]*session{}
	n.mu.Unlock()
	for _, sess := range sessions {
		sess.stop()
		_ = sess.ps.Close()
	}
	n.wg.Wait()
}

// read delivers messages and confirmations until the session stops. After a
// broken connection go-redis reconnects and subscribes again on the next
// Receive; messages lost meanwhile cost waiters only latency, because every
// waiter also wakes on a timer.
func (n *notifier) read(sess *session) {
	defer n.wg.Done()
	backoff := 10 * time.Millisecond
	for {
		msg, err := sess.ps.Receive(sess.ctx)
		if sess.ctx.Err() != nil {
			return
		}
		if err != nil {
			select {
			case <-sess.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				n.markReady(m.Channel)
			}
		case *redis.Message:
			n.deliver(m.Channel, m.Payload)
		}
	}
}

func (n *notifier) markReady(channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s := n.subs[channel]; s != nil && !s.isReady {
		s.isReady = true
		close(s.ready)
	}
}

func (n *notifier) deliver(channel, payload string) {
	n.mu.Lock()
	s := n.subs[channel]
	n.mu.Unlock()
	if s == nil {
		return
	}
	for {
		select {
		case s.msgs <- payload:
			return
		default:
		}
		// Full: drop the oldest. Waiters re-check Redis on a timer, so a
		// lost message costs latency, never correctness.
		select {
		case <-s.msgs:
		default:
		}
	}
}

// active reports whether channel is subscribed and confirmed, without
// taking a reference.
func (n *notifier) active(channel string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.subs[channel]
	return s != nil && s.isReady
}

// confirmed reports whether the subscription is known to be active.
func (n *notifier) confirmed(s *subscription) bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}
