package dlock

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier owns the Client's pub/sub connections, one per session (see
// channels). Waiters of this process share them: each channel is subscribed
// once, reference-counted, and kept for a while after its last waiter left,
// so a process that waits on the same name again and again does not pay a
// SUBSCRIBE round trip every time.
//
// A session's connection and its reading goroutine exist only while some
// channel of the session is subscribed: an idle Client runs no goroutine.
// The reader also keeps its channels subscribed where releases publish
// through reconnects, slot migrations and failovers (see read).
type notifier struct {
	channels channels

	mu       sync.Mutex
	closed   bool
	subs     map[string]*subscription
	sessions map[string]*session // by session key (channels.sessionOf)
	wg       sync.WaitGroup
}

// subscription is one channel that waiters listen to.
type subscription struct {
	channel string
	session string // the key of the session that serves it
	refs    int
	ready   chan struct{} // closed when Redis confirmed the subscription
	isReady bool
	// live: confirmed on the connection that serves the channel now. A
	// replaced connection or a move to another session clears it; the
	// audit (see audit) checks only live channels, whose absence on the
	// server then means a subscription lost, not one still on its way.
	live bool
	// outs has a channel per waiter listening (see listen), each given
	// every payload; a slow one loses its oldest, never blocks the reader.
	outs   []chan string
	linger *time.Timer
}

func newNotifier(rdb redis.UniversalClient) *notifier {
	return &notifier{channels: channelsOf(rdb), subs: map[string]*subscription{}, sessions: map[string]*session{}}
}

// subscriptionLinger is how long a channel stays subscribed after its last
// waiter left.
const subscriptionLinger = 3 * time.Second

// subscribe returns the subscription of channel, subscribing if needed. The
// caller must wait for ready before it relies on messages, and call
// unsubscribe when done.
//
// Finding the node that serves the channel and dialling a new session's
// connection happen without mu, which every Acquire of the process takes
// (active, listen): a waiter whose dial is slow must not stall them all
// (TestSlowPubSubDialStallsNoOtherAcquire). What was found is checked again
// under mu, and a connection another waiter opened first is used instead.
func (n *notifier) subscribe(ctx context.Context, channel string) (*subscription, error) {
	n.mu.Lock()
	s, err := n.reuse(channel)
	n.mu.Unlock()
	if s != nil || err != nil {
		return s, err
	}
	key, err := n.channels.sessionOf(ctx, channel)
	if err != nil {
		return nil, err
	}
	var ps *redis.PubSub // opened for channel, not yet a session's
	discard := func() {
		if ps != nil {
			_ = ps.Close()
		}
	}
	for {
		n.mu.Lock()
		if s, err := n.reuse(channel); s != nil || err != nil {
			n.mu.Unlock()
			discard()
			return s, err
		}
		s := &subscription{channel: channel, session: key, refs: 1, ready: make(chan struct{})}
		if sess := n.sessions[key]; sess != nil {
			// A write on a connection already up, under mu: the SUBSCRIBE
			// cannot overtake the UNSUBSCRIBE of an earlier subscription
			// of the same channel on it.
			err := n.channels.subscribe(ctx, sess.ps, channel)
			if err == nil {
				n.subs[channel] = s
			}
			n.mu.Unlock()
			discard()
			if err != nil {
				return nil, err
			}
			return s, nil
		}
		if ps != nil {
			n.start(key, ps)
			n.subs[channel] = s
			n.mu.Unlock()
			return s, nil
		}
		n.mu.Unlock()
		ps = n.channels.open(ctx, []string{channel})
	}
}

// reuse takes another reference on channel's subscription, if there is
// one. The caller holds mu.
func (n *notifier) reuse(channel string) (*subscription, error) {
	if n.closed {
		return nil, ErrClosed
	}
	s := n.subs[channel]
	if s == nil {
		return nil, nil
	}
	s.refs++
	if s.linger != nil {
		s.linger.Stop()
		s.linger = nil
	}
	return s, nil
}

// start makes ps, already subscribed to its first channel, the session
// key, and starts its reader. The caller holds mu.
func (n *notifier) start(key string, ps *redis.PubSub) {
	sctx, stop := context.WithCancel(context.Background())
	sess := &session{key: key, ps: ps, stop: stop, ctx: sctx, unsubs: map[string]int{}}
	n.sessions[key] = sess
	n.wg.Add(1)
	go n.read(sess)
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
	s.linger = time.AfterFunc(subscriptionLinger, func() { n.expire(s) })
}

func (n *notifier) expire(s *subscription) {
	n.mu.Lock()
	if s.refs > 0 || n.subs[s.channel] != s {
		n.mu.Unlock()
		return
	}
	delete(n.subs, s.channel)
	sess := n.sessions[s.session]
	if sess == nil {
		n.mu.Unlock()
		return
	}
	for _, other := range n.subs {
		if other.session == s.session {
			// The session still serves others: drop only this channel.
			sess.unsubscribe(n.channels, s.channel)
			n.mu.Unlock()
			return
		}
	}
	delete(n.sessions, s.session)
	sess.stop()
	ps := sess.ps
	n.mu.Unlock()
	_ = ps.Close()
}

// close ends every session at once and waits for their goroutines.
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

// markReady records Redis' confirmation of channel on sess's connection. A
// confirmation read on a session that no longer serves the channel (it
// moved meanwhile) says nothing about where it is served now.
func (n *notifier) markReady(sess *session, channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.subs[channel]
	if s == nil || s.session != sess.key {
		return
	}
	s.live = true
	if !s.isReady {
		s.isReady = true
		close(s.ready)
	}
}

func (n *notifier) deliver(channel, payload string) {
	n.mu.Lock()
	var outs []chan string
	if s := n.subs[channel]; s != nil {
		outs = slices.Clone(s.outs)
	}
	n.mu.Unlock()
	for _, out := range outs {
		push(out, payload)
	}
}

// push sends payload on out, dropping the oldest payload when out is full.
// Waiters re-check Redis on a timer, so a lost message costs latency, never
// correctness.
func push(out chan string, payload string) {
	for {
		select {
		case out <- payload:
			return
		default:
		}
		select {
		case <-out:
		default:
		}
	}
}

// listen gives the caller its own copy of s's payloads until stop is
// called. Several waiters of one client can listen on one channel: readers
// of a name, which a release lets in together with one message.
func (n *notifier) listen(s *subscription) (msgs <-chan string, stop func()) {
	ch := make(chan string, 4)
	n.mu.Lock()
	s.outs = append(s.outs, ch)
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		s.outs = slices.DeleteFunc(s.outs, func(c chan string) bool { return c == ch })
		n.mu.Unlock()
	}
}

// active reports whether the channel prefix+id is subscribed and confirmed,
// without taking a reference.
func (n *notifier) active(prefix, id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.subs) == 0 {
		return false // the common case: no channel name built for nothing
	}
	s := n.subs[prefix+id]
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
