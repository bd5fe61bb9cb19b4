package dlock

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier owns the Client's pub/sub connections, one per session. Waiters
// of this process share them: each channel is subscribed once,
// reference-counted, and kept for a while after its last waiter left, so a
// process that waits on the same name again and again does not pay a
// SUBSCRIBE round trip every time.
//
// A session's connection and its reading goroutine exist only while some
// channel of the session is subscribed: an idle Client runs no goroutine.
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
	period  time.Duration // of the health check, healthPeriod; tests may shorten it

	mu       sync.Mutex
	closed   bool
	subs     map[string]*subscription
	sessions map[string]*session // by primary address ("" outside a Cluster)
	wg       sync.WaitGroup
}

// session is one pub/sub connection and the goroutine that reads it.
type session struct {
	node string
	// ps is written only by the session's reader when it replaces a dead
	// connection, under notifier.mu; everyone else reads it under mu.
	ps *redis.PubSub
	// stop is called under notifier.mu, so a reader that replaces ps either
	// swaps before the session ends (and the new ps is closed with it) or
	// sees that it ended (and closes the new ps itself).
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
	n := &notifier{rdb: rdb, linger: subscriptionLinger, period: healthPeriod,
		subs: map[string]*subscription{}, sessions: map[string]*session{}}
	n.cluster, _ = rdb.(*redis.ClusterClient)
	return n
}

// sharded reports whether hand-off messages use shard channels.
func (n *notifier) sharded() bool { return n.cluster != nil }

// subscriptionLinger is how long a channel stays subscribed after its last
// waiter left.
const subscriptionLinger = 3 * time.Second

// The health check of a session's connection: after healthPeriod with
// nothing read the reader sends a PING, and when nothing at all arrives in
// the pongPeriods periods after it, the connection counts as dead (hung:
// blackholed, or a server that stopped answering on it) and is replaced. A
// broken connection needs no check: go-redis reconnects it on the next read.
//
// Why these values. A silent session costs one PING a second, nothing while
// messages flow; a waiter already runs a script in Redis about once a
// second to renew its place in line, and a session serves all waiters of
// its node, so the PING is the smaller cost. A dead connection is replaced
// after about 3 s of silence. That bound matters more than hand-off latency
// (waiters wake on their timer anyway): a waiter on a channel that a hung
// connection never confirms is stuck until the replacement, so it must come
// well inside DefaultWait (10 s). Two seconds without a PONG is far above a
// LAN round trip and the tens of ms of scheduling jitter of a loaded host,
// and below go-redis' 3 s ReadTimeout that would condemn a command
// connection. A false alarm (a server stalled for 2 s) costs one reconnect
// and a SUBSCRIBE per channel, and messages lost on the switch only latency.
const (
	healthPeriod = time.Second
	pongPeriods  = 2
)

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
		sess = &session{node: node, ps: n.open(ctx, []string{channel}), stop: stop, ctx: sctx}
		n.sessions[node] = sess
		n.wg.Add(1)
		go n.read(sess)
	} else if err := n.subscribeMore(ctx, sess, channel); err != nil {
		return nil, err
	}
	n.subs[channel] = s
	return s, nil
}

// open returns a new pub/sub connection subscribed to channels, all of one
// session. go-redis does not report a failed SUBSCRIBE here: it subscribes
// again when the connection is next read. In a Cluster, the connection goes
// to the node that serves the first channel's slot, and each channel has
// an SSUBSCRIBE of its own: one may not span slots, and a session serves
// the channels of several slots of its node.
func (n *notifier) open(ctx context.Context, channels []string) *redis.PubSub {
	if n.cluster == nil {
		return n.rdb.Subscribe(ctx, channels...)
	}
	ps := n.cluster.SSubscribe(ctx, channels[0])
	for _, ch := range channels[1:] {
		_ = ps.SSubscribe(ctx, ch)
	}
	return ps
}

// subscribeMore and unsubscribeOne write on the session's connection, under
// mu, so the SUBSCRIBE and UNSUBSCRIBE of one channel stay in order.
func (n *notifier) subscribeMore(ctx context.Context, sess *session, channel string) error {
	if n.cluster != nil {
		return sess.ps.SSubscribe(ctx, channel)
	}
	return sess.ps.Subscribe(ctx, channel)
}

func (n *notifier) unsubscribeOne(ctx context.Context, sess *session, channel string) error {
	if n.cluster != nil {
		return sess.ps.SUnsubscribe(ctx, channel)
	}
	return sess.ps.Unsubscribe(ctx, channel)
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
			_ = n.unsubscribeOne(context.Background(), sess, s.channel)
			n.mu.Unlock()
			return
		}
	}
	delete(n.sessions, s.node)
	sess.stop()
	ps := sess.ps
	n.mu.Unlock()
	_ = ps.Close()
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
	var conns []*redis.PubSub
	for _, sess := range n.sessions {
		sess.stop()
		conns = append(conns, sess.ps)
	}
	n.sessions = map[string]*session{}
	n.mu.Unlock()
	for _, ps := range conns {
		_ = ps.Close()
	}
	n.wg.Wait()
}

// read delivers messages and confirmations until the session stops, and
// checks that the connection is alive (see healthPeriod). After a broken
// connection go-redis reconnects and subscribes again on the next read; a
// hung connection breaks nothing, so read replaces it itself. Messages lost
// meanwhile cost waiters only latency, because every waiter also wakes on a
// timer. Every wait here is bounded: a read by the health check, a PING and
// a replacement by a few periods, and close() ends a read at once by
// closing the connection.
func (n *notifier) read(sess *session) {
	defer n.wg.Done()
	backoff := 10 * time.Millisecond
	var pinged time.Time // when the unanswered PING went out; zero if none
	for {
		wait := n.period
		if !pinged.IsZero() {
			wait = time.Until(pinged.Add(pongPeriods * n.period))
			if wait <= 0 {
				n.replace(sess)
				pinged = time.Time{}
				continue
			}
		}
		msg, err := sess.ps.ReceiveTimeout(sess.ctx, wait)
		if sess.ctx.Err() != nil {
			return
		}
		if isTimeout(err) {
			if pinged.IsZero() {
				pinged = time.Now()
				if !n.ping(sess) {
					n.replace(sess)
					pinged = time.Time{}
				}
			}
			continue
		}
		// Anything else proves the connection alive, or broken loudly,
		// which is go-redis' to repair.
		pinged = time.Time{}
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

// ping asks the session's connection for an answer; false if the PING could
// not even be written.
func (n *notifier) ping(sess *session) bool {
	ctx, cancel := context.WithTimeout(sess.ctx, n.period)
	defer cancel()
	return sess.ps.Ping(ctx) == nil
}

// replace moves the session to a new connection subscribed to every channel
// the session serves, and closes the old one. Confirmations come on the new
// connection as for any SUBSCRIBE: channels not yet confirmed are marked
// ready when they arrive, those already ready stay so.
func (n *notifier) replace(sess *session) {
	n.mu.Lock()
	var channels []string
	for ch, s := range n.subs {
		if s.node == sess.node {
			channels = append(channels, ch)
		}
	}
	n.mu.Unlock()
	if len(channels) == 0 {
		return // the session is ending: expire closes it
	}
	// Opened without mu: a dial must not stall every Acquire of the process.
	ctx, cancel := context.WithTimeout(sess.ctx, pongPeriods*n.period)
	defer cancel()
	ps := n.open(ctx, channels)

	n.mu.Lock()
	if sess.ctx.Err() != nil {
		n.mu.Unlock()
		_ = ps.Close() // the session ended meanwhile, and its old ps with it
		return
	}
	old := sess.ps
	sess.ps = ps
	// Channels subscribed or dropped while the new connection opened went
	// to the old one: repeat that here. A fresh bound: the dial may have
	// used up ctx, and a write that fails would have go-redis resubscribe
	// all channels in one command, which a Cluster refuses across slots.
	wctx, wcancel := context.WithTimeout(context.Background(), n.period)
	defer wcancel()
	opened := make(map[string]bool, len(channels))
	for _, ch := range channels {
		opened[ch] = true
	}
	for ch, s := range n.subs {
		if s.node != sess.node {
			continue
		}
		if opened[ch] {
			delete(opened, ch)
		} else {
			_ = n.subscribeMore(wctx, sess, ch)
		}
	}
	for ch := range opened {
		_ = n.unsubscribeOne(wctx, sess, ch)
	}
	n.mu.Unlock()
	_ = old.Close()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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
