package dlock

import (
	"context"
	"errors"
	"math/rand/v2"
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
	// unsubs counts, per channel, the UNSUBSCRIBEs sent on ps whose reply
	// is still to come, under notifier.mu: any other unsubscribe read is
	// Redis dropping the channel on its own (a slot that left the node).
	unsubs map[string]int
}

// unsubscribe drops channel from the session's connection. Under
// notifier.mu.
func (sess *session) unsubscribe(chans channels, channel string) {
	// A fresh bound: the write must not hold mu up for long on a
	// connection that go-redis has to dial again.
	ctx, cancel := context.WithTimeout(context.Background(), healthPeriod)
	defer cancel()
	if chans.unsubscribe(ctx, sess.ps, channel) == nil {
		sess.unsubs[channel]++
	}
}

// The health check of a session's connection: after healthPeriod with
// nothing read the reader sends a PING, and when nothing at all arrives in
// the pongPeriods periods after it, the connection counts as dead (hung:
// blackholed, or a server that stopped answering on it) and is replaced. A
// broken connection needs no check: it fails the read (see broken).
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
//
// A connection that answers can still listen in the wrong place: on the old
// primary after a Sentinel failover (go-redis moves its command connections
// to the new one, not a pub/sub connection that still works), on a node
// that lost a slot, or with subscriptions Redis refused. So every
// auditPeriod, messages flowing or not, the reader asks on a command
// connection how many subscribers one confirmed channel of the session
// has where releases publish to it (PUBSUB NUMSUB or SHARDNUMSUB): none
// means the session lost it, and the reader subscribes it again there. One
// command a second per session while anyone waits, like the PING.
const (
	healthPeriod = time.Second
	pongPeriods  = 2
	auditPeriod  = time.Second
)

// read delivers messages and confirmations until the session stops, checks
// that the connection is alive (see healthPeriod) and that it serves its
// channels where releases publish (auditPeriod), and repairs the session
// when not. Messages lost meanwhile cost waiters only latency, because
// every waiter also wakes on a timer. Every wait here is bounded: a read by
// the health check and the audit, a PING, an audit and a replacement by a
// few periods, and close() ends a read at once by closing the connection.
func (n *notifier) read(sess *session) {
	defer n.wg.Done()
	var backoff time.Duration
	var lastErr time.Time
	var pinged time.Time // when the unanswered PING went out; zero if none
	heard := time.Now()  // when the connection last delivered anything
	audit := time.Now().Add(auditPeriod)
	for sess.ctx.Err() == nil {
		now := time.Now()
		if !now.Before(audit) {
			n.audit(sess)
			audit = time.Now().Add(auditPeriod)
			continue
		}
		deadline := heard.Add(healthPeriod)
		if !pinged.IsZero() {
			deadline = pinged.Add(pongPeriods * healthPeriod)
		}
		if !now.Before(deadline) {
			if pinged.IsZero() && n.ping(sess) {
				pinged = now
			} else {
				n.replace(sess)
				pinged, heard = time.Time{}, time.Now()
			}
			continue
		}
		if audit.Before(deadline) {
			deadline = audit
		}
		msg, err := sess.ps.ReceiveTimeout(sess.ctx, deadline.Sub(now))
		if sess.ctx.Err() != nil {
			return
		}
		if isTimeout(err) {
			continue
		}
		// Anything else proves the connection alive, or broken loudly.
		pinged, heard = time.Time{}, time.Now()
		if err != nil {
			// Errors close together back off, up to a second; an
			// error after a calm spell is repaired at once.
			if time.Since(lastErr) > 2*time.Second {
				backoff = 10 * time.Millisecond
			}
			lastErr = time.Now()
			select {
			case <-sess.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			n.broken(sess)
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				n.markReady(sess, m.Channel)
			case "unsubscribe", "sunsubscribe":
				n.dropped(sess, m.Channel)
			}
		case *redis.Message:
			n.deliver(m.Channel, m.Payload)
		}
	}
}

// broken repairs a session after an error read from its connection. go-redis
// reconnects a broken connection and subscribes again on the next read:
// enough for plain channels, which one SUBSCRIBE can list together. Not for
// shard channels: the SSUBSCRIBE that go-redis sends for all of them is
// refused (CROSSSLOT) as soon as they span slots, and an SSUBSCRIBE sent to
// a node that no longer serves the slot is answered MOVED. So in a Cluster
// the channels whose slot another node serves now move to that node's
// session, and the rest get a new connection with one SSUBSCRIBE each.
func (n *notifier) broken(sess *session) {
	if !n.channels.sharded() {
		return
	}
	if n.follow(sess, false) {
		n.replace(sess)
	}
}

// dropped handles an unsubscribe read from the session's connection: the
// reply to one the notifier sent, or Redis dropping a channel on its own,
// as a node does with the shard channels of a slot it gave to another node
// (and sends sunsubscribe for each). A channel still wanted is then
// subscribed again where its slot is served now.
func (n *notifier) dropped(sess *session, channel string) {
	n.mu.Lock()
	if sess.unsubs[channel] > 0 {
		sess.unsubs[channel]--
		if sess.unsubs[channel] == 0 {
			delete(sess.unsubs, channel)
		}
		n.mu.Unlock()
		return
	}
	s := n.subs[channel]
	wanted := s != nil && s.session == sess.key
	if wanted {
		s.live = false
	}
	n.mu.Unlock()
	if wanted {
		n.lost(sess, channel)
	}
}

// audit checks one live channel of the session at random (see auditPeriod).
func (n *notifier) audit(sess *session) {
	n.mu.Lock()
	var live []string
	for ch, s := range n.subs {
		if s.session == sess.key && s.live {
			live = append(live, ch)
		}
	}
	n.mu.Unlock()
	if len(live) == 0 {
		return
	}
	channel := live[rand.IntN(len(live))]
	ctx, cancel := context.WithTimeout(sess.ctx, healthPeriod)
	count, err := n.channels.subscribers(ctx, channel)
	cancel()
	if err != nil || count > 0 {
		// An error is the command side's to report; waiters see it.
		return
	}
	// Confirmed before the count was asked, so no SUBSCRIBE was still on
	// its way; and still live, so it was not dropped or moved meanwhile.
	n.mu.Lock()
	s := n.subs[channel]
	lost := s != nil && s.session == sess.key && s.live
	if lost {
		s.live = false
	}
	n.mu.Unlock()
	if lost {
		n.lost(sess, channel)
	}
}

// lost subscribes channel again where releases publish to it. Outside a
// Cluster that is a new connection: go-redis dials the primary it knows now
// (after a Sentinel failover, the new one). In a Cluster the channel moves
// if its slot did, or is subscribed again on the session; an SSUBSCRIBE
// sent where the slot is not served is answered MOVED, which broken
// repairs once the slot map is reloaded.
func (n *notifier) lost(sess *session, channel string) {
	if !n.channels.sharded() {
		n.replace(sess)
		return
	}
	if !n.follow(sess, true) {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if s := n.subs[channel]; s != nil && s.session == sess.key && sess.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(sess.ctx, healthPeriod)
		defer cancel()
		_ = n.channels.subscribe(ctx, sess.ps, channel)
	}
}

// follow moves the channels of sess whose slot another node serves now, as
// far as the Client's slot map knows (follow asks for a reload first; one
// that is not in yet is caught by the next MOVED, sunsubscribe or audit),
// to that node's session. A session left without channels ends. With tidy,
// the moved channels are unsubscribed on sess's connection, so that go-redis
// does not subscribe them there again when it reconnects; without, the
// caller replaces that connection, which may be dead: no write waits on it.
// follow reports whether sess still serves channels.
func (n *notifier) follow(sess *session, tidy bool) bool {
	ctx, cancel := context.WithTimeout(sess.ctx, healthPeriod)
	defer cancel()
	n.channels.reload(ctx)
	n.mu.Lock()
	if n.closed || sess.ctx.Err() != nil {
		n.mu.Unlock()
		return false
	}
	var moved []*subscription
	remain := 0
	for ch, s := range n.subs {
		if s.session != sess.key {
			continue
		}
		if key, err := n.channels.sessionOf(ctx, ch); err == nil && key != sess.key {
			s.session, s.live = key, false
			moved = append(moved, s)
		} else {
			remain++
		}
	}
	// Channels whose node has a session go there now; the others wait
	// for a connection to their node, dialled without mu (see subscribe).
	dial := map[string][]string{}
	for _, s := range moved {
		if to := n.sessions[s.session]; to != nil {
			// An error leaves the channel with its new session all the
			// same: go-redis keeps it on that connection and subscribes
			// it again when it reconnects; the audit finds it if not.
			_ = n.channels.subscribe(ctx, to.ps, s.channel)
		} else {
			dial[s.session] = append(dial[s.session], s.channel)
		}
	}
	if len(dial) > 0 {
		n.mu.Unlock()
		opened := map[string]*redis.PubSub{}
		for key, chans := range dial {
			opened[key] = n.channels.open(ctx, chans)
		}
		n.mu.Lock()
		for key, ps := range opened {
			n.settle(ctx, key, ps, dial[key])
		}
		if n.closed || sess.ctx.Err() != nil {
			n.mu.Unlock()
			return false
		}
		// A waiter may have subscribed a channel of sess's node while the
		// lock was let go for the dial: counted again, so that sess is
		// not ended under it.
		remain = 0
		for _, s := range n.subs {
			if s.session == sess.key {
				remain++
			}
		}
	}
	if tidy && remain > 0 {
		for _, s := range moved {
			sess.unsubscribe(n.channels, s.channel)
		}
	}
	if remain > 0 {
		n.mu.Unlock()
		return true
	}
	delete(n.sessions, sess.key)
	sess.stop()
	ps := sess.ps
	n.mu.Unlock()
	_ = ps.Close()
	return false
}

// settle makes ps, opened without mu for chans of the session key, that
// session, unless the notifier closed or another waiter started the
// session meanwhile (then chans are subscribed there and ps is closed), or
// none of chans is wanted any more. The caller holds mu.
func (n *notifier) settle(ctx context.Context, key string, ps *redis.PubSub, chans []string) {
	wanted := false
	for _, ch := range chans {
		if s := n.subs[ch]; s != nil && s.session == key {
			wanted = true
		}
	}
	if n.closed || !wanted {
		// Closed, or the channels were dropped meanwhile: a session
		// serving none would never end.
		_ = ps.Close()
		return
	}
	if to := n.sessions[key]; to != nil {
		for _, ch := range chans {
			_ = n.channels.subscribe(ctx, to.ps, ch)
		}
		_ = ps.Close()
		return
	}
	n.start(key, ps)
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
		return // the session is ending: expire or follow closes it
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
	// Nothing is confirmed on the new connection yet, and the old one's
	// unsubscribe replies will never be read.
	clear(sess.unsubs)
	for _, s := range n.subs {
		if s.session == sess.key {
			s.live = false
		}
	}
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
		if n.channels.unsubscribe(wctx, sess.ps, ch) == nil {
			sess.unsubs[ch]++
		}
	}
	n.mu.Unlock()
	_ = old.Close()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
