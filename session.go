package dlock

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// session is one pub/sub connection and the goroutine that reads it.
type session struct {
	key string // in notifier.sessions
	// ps is written only by the session's reader when it replaces a dead
	// connection, under notifier.mu; everyone else reads it under mu.
	ps *redis.PubSub
	// stop is called under notifier.mu, so a reader that replaces ps either
	// swaps before the session ends (and the new ps is closed with it) or
	// sees that it ended (and closes the new ps itself).
	stop context.CancelFunc
	ctx  context.Context
}

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
		wait := healthPeriod
		if !pinged.IsZero() {
			wait = time.Until(pinged.Add(pongPeriods * healthPeriod))
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
	ctx, cancel := context.WithTimeout(sess.ctx, healthPeriod)
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
		if s.session == sess.key {
			channels = append(channels, ch)
		}
	}
	n.mu.Unlock()
	if len(channels) == 0 {
		return // the session is ending: expire closes it
	}
	// Opened without mu: a dial must not stall every Acquire of the process.
	ctx, cancel := context.WithTimeout(sess.ctx, pongPeriods*healthPeriod)
	defer cancel()
	ps := n.channels.open(ctx, channels)

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
	wctx, wcancel := context.WithTimeout(context.Background(), healthPeriod)
	defer wcancel()
	opened := make(map[string]bool, len(channels))
	for _, ch := range channels {
		opened[ch] = true
	}
	for ch, s := range n.subs {
		if s.session != sess.key {
			continue
		}
		if opened[ch] {
			delete(opened, ch)
		} else {
			_ = n.channels.subscribe(wctx, sess.ps, ch)
		}
	}
	for ch := range opened {
		_ = n.channels.unsubscribe(wctx, sess.ps, ch)
	}
	n.mu.Unlock()
	_ = old.Close()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
