// Package faultproxy provides a loopback TCP proxy that tests put between a
// Redis client and a real redis-server to simulate network faults: latency,
// partitions (including one-sided ones, where a command reaches Redis but its
// reply is lost) and connection resets.
//
// A lock library is only as correct as its behaviour when the network
// misbehaves, and those paths cannot be exercised by stopping redis-server:
// a stopped server refuses connections, whereas a partitioned one leaves
// clients hanging on half-dead sockets. The proxy reproduces the latter
// deterministically and in-process, without root privileges or iptables.
//
// The mode is global to a Proxy and applies immediately to every current and
// future connection. Each mode method replaces the previous mode entirely;
// modes do not combine.
package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Directions, used as array indices.
const (
	up   = 0 // client → server
	down = 1 // server → client
)

// queueLen bounds how many chunks may wait in a delayed direction, so that a
// long delay applies back-pressure to the sender instead of buffering
// without limit.
const queueLen = 64

// Stats is a snapshot of the proxy's counters, so tests can assert that
// traffic really did (or did not) cross the proxy instead of inferring it from
// timeouts. "Upstream" is client → server, "Downstream" is server → client.
type Stats struct {
	// Accepted counts client connections accepted, including those reset
	// immediately in Reset mode.
	Accepted int64
	// Upstream and Downstream count bytes delivered to the far side.
	Upstream, Downstream int64
	// DroppedUpstream and DroppedDownstream count bytes read from one side
	// but never delivered, because the direction was blackholed or the
	// connection died first. Waiting for these to grow lets a test know a
	// command has been swallowed rather than merely not yet sent.
	DroppedUpstream, DroppedDownstream int64
}

// mode is the proxy-wide fault setting. The zero value means pass.
type mode struct {
	delay time.Duration
	drop  [2]bool
	reset bool
}

// Proxy forwards connections accepted on a loopback address to a target
// address, injecting the currently selected fault. All methods are safe for
// concurrent use.
type Proxy struct {
	target string
	ln     *net.TCPListener
	ctx    context.Context // cancelled by Close; aborts accept backoff and dials
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the proxy starts

	mu      sync.Mutex
	m       mode
	changed chan struct{} // closed and replaced on every mode change
	pairs   map[*pair]struct{}

	accepted  atomic.Int64
	forwarded [2]atomic.Int64
	dropped   [2]atomic.Int64

	closeOnce sync.Once
	closeErr  error
}

// New starts a proxy in Pass mode that forwards to target. It listens on
// 127.0.0.1 only, so a test never exposes a port beyond the machine. The
// target is dialled once per accepted connection, not here, so New succeeds
// even if the target is not up yet.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target:  target,
		ln:      ln.(*net.TCPListener),
		ctx:     ctx,
		cancel:  cancel,
		changed: make(chan struct{}),
		pairs:   make(map[*pair]struct{}),
	}
	p.wg.Go(p.acceptLoop)
	return p, nil
}

// Addr returns the address clients should dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Stats returns the current counters. Fields are read independently, so a
// snapshot taken while traffic flows may be slightly inconsistent.
func (p *Proxy) Stats() Stats {
	return Stats{
		Accepted:          p.accepted.Load(),
		Upstream:          p.forwarded[up].Load(),
		Downstream:        p.forwarded[down].Load(),
		DroppedUpstream:   p.dropped[up].Load(),
		DroppedDownstream: p.dropped[down].Load(),
	}
}

// Pass restores normal forwarding, so a test can heal a fault and check that
// the client recovers. Data swallowed while blackholed stays lost.
func (p *Proxy) Pass() { p.set(mode{}) }

// Delay holds every chunk, in both directions, for at least d after it was
// read, preserving order. It simulates a slow network, e.g. to push a lock
// operation past its deadline without losing it. Chunks already waiting are
// re-timed against the new setting whenever the mode changes.
func (p *Proxy) Delay(d time.Duration) { p.set(mode{delay: d}) }

// Blackhole simulates a full partition: connections, including new ones, stay
// open and the proxy keeps reading (so senders never block on a full socket
// buffer), but nothing is delivered in either direction, not even a FIN.
// Data read while blackholed is discarded rather than replayed on Pass,
// because a real partition loses packets and TCP's retransmission is beyond
// what a test needs; replaying could also deliver a stale command long after
// the client gave up on it. The upstream dial for a new connection still
// happens; Redis sends nothing unprompted, so this is invisible to it.
func (p *Proxy) Blackhole() { p.set(mode{drop: [2]bool{up: true, down: true}}) }

// BlackholeUpstream discards only client → server data, so requests are lost
// while anything the server sends still arrives.
func (p *Proxy) BlackholeUpstream() { p.set(mode{drop: [2]bool{up: true}}) }

// BlackholeDownstream discards only server → client data: commands reach
// Redis and take effect but their replies are lost, the nastiest case for a
// lock client, which cannot tell whether it holds the lock.
func (p *Proxy) BlackholeDownstream() { p.set(mode{drop: [2]bool{down: true}}) }

// Reset aborts every current connection with an RST on both sides, as a
// crashed peer or a middlebox would, and keeps resetting new connections
// right after accepting them until another mode is selected.
func (p *Proxy) Reset() {
	for _, pr := range p.set(mode{reset: true}) {
		pr.kill(true)
	}
}

// Close stops listening, closes all connections and waits for every goroutine
// the proxy started, so goleak-based tests stay clean. It is idempotent.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.cancel() // under mu, so register never adds a pair after this
		pairs := slices.Collect(maps.Keys(p.pairs))
		p.mu.Unlock()
		p.closeErr = p.ln.Close()
		for _, pr := range pairs {
			pr.kill(false)
		}
	})
	p.wg.Wait()
	return p.closeErr
}

// set installs m, wakes every waiting writer and, for reset, returns the
// connections to abort.
func (p *Proxy) set(m mode) []*pair {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m = m
	close(p.changed)
	p.changed = make(chan struct{})
	if m.reset {
		return slices.Collect(maps.Keys(p.pairs))
	}
	return nil
}

func (p *Proxy) mode() (mode, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m, p.changed
}

func (p *Proxy) acceptLoop() {
	for {
		c, err := p.ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient failure such as EMFILE: back off instead of spinning.
			t := time.NewTimer(50 * time.Millisecond)
			select {
			case <-t.C:
			case <-p.ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		p.accepted.Add(1)
		if m, _ := p.mode(); m.reset {
			_ = c.SetLinger(0)
			_ = c.Close()
			continue
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// pair is one proxied connection. Its serve goroutine owns the four pump
// goroutines; kill makes all of them exit promptly.
type pair struct {
	client, server *net.TCPConn
	dead           chan struct{}
	once           sync.Once
}

// kill closes both sides, with an RST if rst is set. Only the first call acts.
func (pr *pair) kill(rst bool) {
	pr.once.Do(func() {
		if rst {
			_ = pr.client.SetLinger(0)
			_ = pr.server.SetLinger(0)
		}
		_ = pr.client.Close()
		_ = pr.server.Close()
		close(pr.dead)
	})
}

// chunk is data read from one side; b == nil stands for the EOF, so that a
// FIN is delayed and blackholed exactly like data.
type chunk struct {
	b  []byte
	at time.Time
}

func (p *Proxy) serve(client *net.TCPConn) {
	var d net.Dialer
	sc, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		_ = client.SetLinger(0) // the closest thing to "connection refused"
		_ = client.Close()
		return
	}
	pr := &pair{client: client, server: sc.(*net.TCPConn), dead: make(chan struct{})}
	if !p.register(pr) {
		return
	}
	defer p.unregister(pr)

	var wg sync.WaitGroup
	pump := func(dir int, src, dst *net.TCPConn) {
		q := make(chan chunk, queueLen)
		wg.Go(func() { p.read(pr, dir, src, q) })
		wg.Go(func() { p.write(pr, dir, dst, q) })
	}
	pump(up, pr.client, pr.server)
	pump(down, pr.server, pr.client)
	wg.Wait() // both directions saw EOF (or the pair was killed)
	pr.kill(false)
}

// register tracks pr unless the proxy is closed or resetting, in which case
// it kills pr; the check and insertion are atomic with Close and Reset.
func (p *Proxy) register(pr *pair) bool {
	p.mu.Lock()
	closed, reset := p.ctx.Err() != nil, p.m.reset
	if !closed && !reset {
		p.pairs[pr] = struct{}{}
	}
	p.mu.Unlock()
	if closed || reset {
		pr.kill(reset)
		return false
	}
	return true
}

func (p *Proxy) unregister(pr *pair) {
	p.mu.Lock()
	delete(p.pairs, pr)
	p.mu.Unlock()
}

// read drains src into q until EOF or error. It never stops reading because
// of the mode, so a blackholed sender is not blocked by a full socket buffer.
func (p *Proxy) read(pr *pair, dir int, src *net.TCPConn, q chan<- chunk) {
	defer close(q)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.enqueue(pr, dir, q, chunk{b: bytes.Clone(buf[:n]), at: time.Now()}) {
			return
		}
		if err == io.EOF {
			p.enqueue(pr, dir, q, chunk{at: time.Now()})
			return
		}
		if err != nil {
			pr.kill(true) // propagate an abort from one peer to the other
			return
		}
	}
}

// enqueue queues c, or discards it if dir is blackholed. It reports false if
// the pair died.
func (p *Proxy) enqueue(pr *pair, dir int, q chan<- chunk, c chunk) bool {
	if m, _ := p.mode(); m.drop[dir] {
		p.dropped[dir].Add(int64(len(c.b)))
		return true
	}
	select {
	case q <- c:
		return true
	case <-pr.dead:
		return false
	}
}

// write delivers queued chunks to dst in order. It consumes q until read
// closes it, so read can never block on a full queue.
func (p *Proxy) write(pr *pair, dir int, dst *net.TCPConn, q <-chan chunk) {
	for c := range q {
		if !p.hold(pr, dir, c.at) {
			p.dropped[dir].Add(int64(len(c.b)))
			continue
		}
		if c.b == nil {
			_ = dst.CloseWrite()
			continue
		}
		n, err := dst.Write(c.b)
		p.forwarded[dir].Add(int64(n))
		if err != nil {
			p.dropped[dir].Add(int64(len(c.b) - n))
			pr.kill(true)
		}
	}
}

// hold blocks until a chunk read at time at may be delivered under the
// current mode, re-evaluating on every mode change. It reports false if the
// chunk must be dropped instead.
func (p *Proxy) hold(pr *pair, dir int, at time.Time) bool {
	for {
		m, changed := p.mode()
		select {
		case <-pr.dead:
			return false
		default:
		}
		if m.drop[dir] {
			return false
		}
		wait := time.Until(at.Add(m.delay))
		if wait <= 0 {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-changed:
		case <-pr.dead:
		}
		t.Stop()
	}
}
