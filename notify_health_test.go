package dlock_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// pubsubTap dials a client's connections and tells its pub/sub connections
// (the ones that write a SUBSCRIBE or SSUBSCRIBE) from its command
// connections, so a test can hang the former while the latter keep working,
// and count what the former carry.
type pubsubTap struct {
	dials    atomic.Int64 // pub/sub connections seen
	confirms atomic.Int64 // subscription confirmations read on live pub/sub connections
	msgs     atomic.Int64 // messages read on live pub/sub connections
	closed   atomic.Int64 // hung connections closed by the client

	mu    sync.Mutex
	conns []*tapConn
	gate  chan struct{} // while not nil, pub/sub reads wait for it: see hold
}

// hold makes the pub/sub connections keep what they read from now on until
// deliver: messages arrive late, as on a slow connection or in a process
// that reads them late.
func (p *pubsubTap) hold() {
	p.mu.Lock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
	p.mu.Unlock()
}

// deliver lets the held reads through.
func (p *pubsubTap) deliver() {
	p.mu.Lock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
	p.mu.Unlock()
}

func (p *pubsubTap) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &tapConn{Conn: c, tap: p}
	p.mu.Lock()
	p.conns = append(p.conns, tc)
	p.mu.Unlock()
	return tc, nil
}

// hang makes the pub/sub connections open now deliver nothing from here on,
// and returns how many it hung. Their writes still reach Redis.
func (p *pubsubTap) hang() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.conns {
		if c.pubsub.Load() {
			c.hung.Store(true)
			n++
		}
	}
	return n
}

func (p *pubsubTap) String() string {
	return fmt.Sprintf("%d pub/sub dials, %d hung connections closed, %d confirmations and %d messages on live ones",
		p.dials.Load(), p.closed.Load(), p.confirms.Load(), p.msgs.Load())
}

type tapConn struct {
	net.Conn
	tap    *pubsubTap
	pubsub atomic.Bool
	hung   atomic.Bool
	closed atomic.Bool
}

var (
	subscribeCmd = []byte("subscribe") // inside "subscribe" and "ssubscribe", any case
	// Reply frames, RESP2 or RESP3: only the length prefix differs from the
	// frame's name, and "$9\r\nsubscribe" is not found inside "unsubscribe".
	confirmFrames = [][]byte{[]byte("$9\r\nsubscribe\r\n"), []byte("$10\r\nssubscribe\r\n")}
	messageFrames = [][]byte{[]byte("$7\r\nmessage\r\n"), []byte("$8\r\nsmessage\r\n")}
)

func (c *tapConn) Write(b []byte) (int, error) {
	if !c.pubsub.Load() && bytes.Contains(bytes.ToLower(b), subscribeCmd) && c.pubsub.CompareAndSwap(false, true) {
		c.tap.dials.Add(1)
	}
	return c.Conn.Write(b)
}

// Read of a held connection delivers what it read once the tap delivers.
// Read of a hung connection delivers nothing until the connection is closed.
// It still ends at the read deadline, as a read on a blackholed socket does:
// a hang that ignored deadlines would ask for a health check that no client
// could have.
func (c *tapConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if !c.hung.Load() {
			if c.pubsub.Load() {
				c.tap.mu.Lock()
				gate := c.tap.gate
				c.tap.mu.Unlock()
				if gate != nil {
					<-gate
				}
				c.tap.confirms.Add(countAll(b[:n], confirmFrames))
				c.tap.msgs.Add(countAll(b[:n], messageFrames))
			}
			return n, err
		}
		if err != nil {
			return 0, err
		}
		// Hung: the bytes vanish on the way.
	}
}

func (c *tapConn) Close() error {
	if c.hung.Load() && c.closed.CompareAndSwap(false, true) {
		c.tap.closed.Add(1)
	}
	return c.Conn.Close()
}

func countAll(b []byte, frames [][]byte) int64 {
	var n int64
	for _, f := range frames {
		n += int64(bytes.Count(b, f))
	}
	return n
}

// scriptRuns counts the scripts a client ran to completion: its attempts
// at a lock (and its releases).
type scriptRuns struct{ n atomic.Int64 }

func (s *scriptRuns) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *scriptRuns) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := cmd.Name(); err == nil && (name == "evalsha" || name == "eval") {
			s.n.Add(1)
		}
		return err
	}
}
func (s *scriptRuns) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

type acquired struct {
	l   dlock.Lock
	err error
}

// acquireAsync runs Acquire in a goroutine. It reports on a buffered
// channel and never touches t, so a test that fails first leaves it to end
// when the client closes.
func acquireAsync(c *dlock.Client, name string, opts ...dlock.AcquireOption) <-chan acquired {
	res := make(chan acquired, 1)
	go func() {
		l, err := c.Acquire(bg, name, opts...)
		res <- acquired{l, err}
	}()
	return res
}

func await(t *testing.T, what string, res <-chan acquired, limit time.Duration) dlock.Lock {
	t.Helper()
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.l
	case <-time.After(limit):
		t.Fatalf("%s: no result after %v", what, limit)
		return nil
	}
}

// waitUntil polls cond for up to limit: the bound of a recovery the test
// demands, shorter than waitFor's.
func waitUntil(t *testing.T, limit time.Duration, what func() string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("after %v: %s", limit, what())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// recoverWithin bounds how long a client may take to notice a hung pub/sub
// connection and confirm its channels on a new one: a few times the ~3 s the
// health check needs, and well under the 10 s a waiter waits by default.
const recoverWithin = 7 * time.Second

// tapClient is a dlock client whose connections go through tap.
func tapClient(t *testing.T, srv *redistest.Server, tap *pubsubTap, hooks ...redis.Hook) *dlock.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, Dialer: tap.dial})
	for _, h := range hooks {
		rdb.AddHook(h)
	}
	c := dlock.MustNew(rdb)
	t.Cleanup(func() { _ = c.Close(bg); _ = rdb.Close() })
	return c
}

// subscribed makes w wait for name behind a holder of other until the
// holder's release hands it over, so w's hand-off channel is subscribed
// (and lingers) on a pub/sub connection that worked.
func subscribed(t *testing.T, w, other *dlock.Client, queue func() int64, name string, tap *pubsubTap) {
	t.Helper()
	h := mustAcquire(t, other, name, dlock.WithTTL(10*time.Second))
	res := acquireAsync(w, name, dlock.WithWait(10*time.Second))
	waitFor(t, "W queued", func() bool { return queue() == 1 })
	before := tap.msgs.Load()
	if err := h.Release(bg); err != nil {
		t.Fatal(err)
	}
	l := await(t, "W's first wait", res, 5*time.Second)
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	if tap.msgs.Load() == before || tap.dials.Load() != 1 {
		t.Fatalf("healthy connection: %v; want one dial and the hand-off message", tap)
	}
}

// A client whose pub/sub connection hangs while its command connections keep
// working opens a new one, and hand-off messages reach its waiters again.
func TestHungPubSubIsReplaced(t *testing.T) {
	srv := redistest.Start(t)
	tap := &pubsubTap{}
	var sent atomic.Int64
	w := tapClient(t, srv, tap, countHook(&sent))
	other := newClients(t, srv, 1)[0]
	rdb := srv.Client(t)
	const name = "hung"
	queue := func() int64 { return rdb.ZCard(bg, "dlock:{hung}:q").Val() }
	subscribed(t, w, other, queue, name, tap)

	if n := tap.hang(); n != 1 {
		t.Fatalf("hung %d pub/sub connections, want 1", n)
	}
	hungAt := time.Now()
	confirmed := tap.confirms.Load()
	// A long TTL spaces W's own wake-ups (its timer) about a second apart:
	// only a message makes W take a hand-off without asking Redis first.
	opts := []dlock.AcquireOption{dlock.WithWait(10 * time.Second), dlock.WithTTL(20 * time.Second)}
	h := mustAcquire(t, other, name, dlock.WithTTL(10*time.Second))
	res := acquireAsync(w, name, opts...)
	waitUntil(t, recoverWithin, func() string {
		return tap.String() + "; want a new pub/sub connection that confirmed W's channel, the hung one closed"
	}, func() bool {
		return tap.dials.Load() == 2 && tap.closed.Load() == 1 && tap.confirms.Load() > confirmed
	})
	t.Logf("replaced %v after the hang", time.Since(hungAt).Round(time.Millisecond))

	// Hand-offs through the new connection. W sends no command between the
	// release and holding the lock when the message woke it; its timer
	// would have it run an attempt first. The timer can fire in the few ms
	// between a release and its message, so a hand-off may be repeated.
	for round := 1; ; round++ {
		if round > 1 {
			h = mustAcquire(t, other, name, dlock.WithTTL(10*time.Second))
			res = acquireAsync(w, name, opts...)
		}
		waitFor(t, "W queued", func() bool { return queue() == 1 })
		cmds, msgs := sent.Load(), tap.msgs.Load()
		released := time.Now()
		if err := h.Release(bg); err != nil {
			t.Fatal(err)
		}
		l := await(t, "W's wait after the hang", res, 5*time.Second)
		took := time.Since(released)
		cmds, msgs = sent.Load()-cmds, tap.msgs.Load()-msgs
		if err := l.Release(bg); err != nil {
			t.Fatal(err)
		}
		if msgs == 0 {
			t.Fatalf("hand-off %d: no message reached W on its new connection (%v)", round, tap)
		}
		t.Logf("hand-off %d: %d message(s), %d command(s) from W, lock held %v after the release",
			round, msgs, cmds, took.Round(10*time.Microsecond))
		if cmds == 0 {
			break
		}
		if round == 3 {
			t.Fatalf("W ran an attempt before each of %d hand-offs: woken by its timer, not by the message", round)
		}
	}
	if n := tap.dials.Load(); n != 2 {
		t.Fatalf("%d pub/sub dials, want 2: one replacement only", n)
	}
}

// A channel subscribed on a hung session is confirmed by the new connection:
// a waiter that waits for that confirmation takes a freed lock in time
// instead of waiting out its whole wait limit.
func TestHungPubSubConfirmsNewChannel(t *testing.T) {
	srv := redistest.Start(t)
	tap := &pubsubTap{}
	runs := &scriptRuns{}
	w := tapClient(t, srv, tap, runs)
	other := newClients(t, srv, 1)[0]
	rdb := srv.Client(t)
	subscribed(t, w, other, func() int64 { return rdb.ZCard(bg, "dlock:{hung-a}:q").Val() }, "hung-a", tap)

	if n := tap.hang(); n != 1 {
		t.Fatalf("hung %d pub/sub connections, want 1", n)
	}
	start := time.Now()
	h := mustAcquire(t, other, "hung-b", dlock.WithTTL(10*time.Second))
	before := runs.n.Load()
	res := acquireAsync(w, "hung-b", dlock.WithWait(9*time.Second))
	// Two attempts (the plain one, then the one while the SUBSCRIBE is on
	// its way) found the lock busy: W now waits for the confirmation, and
	// tries again on its timer meanwhile.
	waitFor(t, "W's attempts", func() bool { return runs.n.Load() >= before+2 })
	if err := h.Release(bg); err != nil {
		t.Fatal(err)
	}
	l := await(t, "W's wait for a freed lock on a new channel of a hung session", res, 12*time.Second)
	t.Logf("W held the lock %v after the hang (%v)", time.Since(start).Round(time.Millisecond), tap)
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > recoverWithin {
		t.Fatalf("W took %v, want the hung connection replaced within %v", time.Since(start), recoverWithin)
	}
	// W may have taken the lock on its own timer, before the session was
	// replaced; the replacement must come all the same.
	waitFor(t, "the hung pub/sub connection to be replaced", func() bool {
		return tap.dials.Load() == 2 && tap.closed.Load() == 1
	})
}

// In a Cluster a session serves the shard channels of several slots of its
// node: the new connection subscribes each of them (one SSUBSCRIBE may not
// span slots), confirms the new one and carries hand-offs of the old one.
func TestClusterHungPubSub(t *testing.T) {
	cs := redistest.StartCluster(t)
	cc := cs.ClusterClient(t)
	tap := &pubsubTap{}
	wrdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cs.Addrs, ContextTimeoutEnabled: true,
		ClusterStateReloadInterval: redistest.ClientStateReload, Dialer: tap.dial,
	})
	runs := &scriptRuns{}
	wrdb.AddHook(runs)
	w := dlock.MustNew(wrdb)
	t.Cleanup(func() { _ = w.Close(bg); _ = wrdb.Close() })
	other := newLocker(t, cs.ClusterClient(t))

	// Two names in different slots of one primary.
	a, b := "", ""
	node := map[string]string{}
	slot := map[string]int64{}
	for i := 0; b == ""; i++ {
		if i == 1000 {
			t.Fatal("no two names on one primary")
		}
		name := fmt.Sprintf("hc-%d", i)
		m, err := cc.MasterForKey(bg, "dlock:{"+name+"}")
		if err != nil {
			t.Fatal(err)
		}
		node[name], slot[name] = m.Options().Addr, cc.ClusterKeySlot(bg, name).Val()
		switch {
		case a == "":
			a = name
		case node[name] == node[a] && slot[name] != slot[a]:
			b = name
		}
	}
	queue := func(name string) int64 { return cc.ZCard(bg, "dlock:{"+name+"}:q").Val() }

	// W waits for a: its channel is confirmed on a working connection.
	ha := mustAcquire(t, other, a, dlock.WithTTL(10*time.Second))
	resA := acquireAsync(w, a, dlock.WithWait(12*time.Second), dlock.WithTTL(20*time.Second))
	waitFor(t, "W queued for a", func() bool { return queue(a) == 1 })
	if n := tap.hang(); n != 1 {
		t.Fatalf("hung %d pub/sub connections, want 1 (%v)", n, tap)
	}
	start := time.Now()
	confirmed := tap.confirms.Load()

	// A second channel, b, on the hung session.
	hb := mustAcquire(t, other, b, dlock.WithTTL(10*time.Second))
	before := runs.n.Load()
	resB := acquireAsync(w, b, dlock.WithWait(9*time.Second))
	// W's two attempts at b found it busy: W waits for the confirmation,
	// trying again on its timer meanwhile.
	waitFor(t, "W's attempts at b", func() bool { return runs.n.Load() >= before+2 })
	if err := hb.Release(bg); err != nil {
		t.Fatal(err)
	}
	lb := await(t, "W's wait for b, a new channel on a hung session", resB, 12*time.Second)
	t.Logf("W held b %v after the hang (%v)", time.Since(start).Round(time.Millisecond), tap)
	if err := lb.Release(bg); err != nil {
		t.Fatal(err)
	}
	// W may have taken b on its own timer before the session was replaced;
	// the replacement must confirm both channels all the same.
	waitFor(t, "a new pub/sub connection that confirms both a and b", func() bool {
		return tap.dials.Load() == 2 && tap.confirms.Load()-confirmed >= 2
	})

	// a's hand-off reaches W on the new connection.
	msgs := tap.msgs.Load()
	if err := ha.Release(bg); err != nil {
		t.Fatal(err)
	}
	la := await(t, "W's wait for a", resA, 5*time.Second)
	if err := la.Release(bg); err != nil {
		t.Fatal(err)
	}
	if tap.msgs.Load() == msgs {
		t.Fatalf("a's hand-off message did not reach W (%v)", tap)
	}
}
