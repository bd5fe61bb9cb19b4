package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Generous bounds: tests must not flake on a loaded 2-core machine.
const (
	ioTimeout = 10 * time.Second       // "should have happened by now"
	quiet     = 200 * time.Millisecond // "nothing arrives within this"
)

// echoServer starts a TCP echo server on loopback and returns its address.
// Everything it starts is stopped in t.Cleanup.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// rawServer returns an address and a function that yields the server side of
// the next accepted connection, so a test can send server → client data
// unprompted.
func rawServer(t *testing.T) (string, func() net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String(), func() net.Conn {
		t.Helper()
		_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(ioTimeout))
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_ = c.SetWriteDeadline(time.Now().Add(ioTimeout))
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
}

// recv reads exactly len(want) bytes within d and returns the error, if any.
func recv(c net.Conn, want string, d time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(d))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != want {
		return errors.New("got " + string(got) + ", want " + want)
	}
	return nil
}

func mustRecv(t *testing.T, c net.Conn, want string) {
	t.Helper()
	if err := recv(c, want, ioTimeout); err != nil {
		t.Fatalf("recv %q: %v", want, err)
	}
}

func mustTimeout(t *testing.T, c net.Conn) {
	t.Helper()
	if err := recv(c, "x", quiet); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read during blackhole: got %v, want deadline exceeded", err)
	}
}

func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	send(t, c, msg)
	mustRecv(t, c, msg)
}

// waitFor polls cond; the proxy updates counters after the socket write, so
// a test may observe the data before the count.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(ioTimeout); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestPass(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	roundTrip(t, c, "PING")
	roundTrip(t, c, "hello world")
	waitFor(t, "counters", func() bool {
		s := p.Stats()
		return s == Stats{Accepted: 1, Upstream: 15, Downstream: 15}
	})
}

func TestLargeTransferIntact(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	msg := string(bytes.Repeat([]byte("0123456789abcdef"), 1<<16)) // 1 MiB
	_ = c.SetWriteDeadline(time.Now().Add(ioTimeout))              // never block the deferred Wait
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { _, _ = io.WriteString(c, msg) }) // write while reading the echo
	mustRecv(t, c, msg)
}

func TestDelay(t *testing.T) {
	const d = 150 * time.Millisecond
	p := newProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	roundTrip(t, c, "warm-up")

	p.Delay(d)
	start := time.Now()
	for _, part := range []string{"a", "bb", "ccc"} { // order must be preserved
		send(t, c, part)
	}
	mustRecv(t, c, "abbccc")
	if el := time.Since(start); el < 2*d { // held once each way
		t.Fatalf("round trip took %v, want >= %v", el, 2*d)
	}

	p.Pass()
	roundTrip(t, c, "fast again")
}

func TestBlackhole(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	roundTrip(t, c, "before")

	p.Blackhole()
	send(t, c, "lost")
	mustTimeout(t, c)
	waitFor(t, "upstream drop", func() bool { return p.Stats().DroppedUpstream == 4 })

	fresh := dial(t, p.Addr()) // new connections are accepted but get nothing
	send(t, fresh, "also lost")
	mustTimeout(t, fresh)
	waitFor(t, "upstream drop", func() bool { return p.Stats().DroppedUpstream == 13 })

	p.Pass()
	roundTrip(t, c, "after") // "lost" must not reappear
	roundTrip(t, fresh, "fresh")
}

func TestBlackholeDrainsSender(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	p.Blackhole()
	big := bytes.Repeat([]byte{'x'}, 8<<20) // far beyond socket buffers
	_ = c.SetWriteDeadline(time.Now().Add(ioTimeout))
	if _, err := c.Write(big); err != nil {
		t.Fatalf("blackholed write blocked: %v", err)
	}
	waitFor(t, "all bytes dropped", func() bool { return p.Stats().DroppedUpstream == int64(len(big)) })
}

func TestBlackholeUpstream(t *testing.T) {
	addr, accept := rawServer(t)
	p := newProxy(t, addr)
	c := dial(t, p.Addr())
	s := accept()

	p.BlackholeUpstream()
	send(t, c, "request")
	mustTimeout(t, s)
	send(t, s, "push")
	mustRecv(t, c, "push")
}

func TestBlackholeDownstream(t *testing.T) {
	addr, accept := rawServer(t)
	p := newProxy(t, addr)
	c := dial(t, p.Addr())
	s := accept()

	p.BlackholeDownstream()
	send(t, c, "SET k v")
	mustRecv(t, s, "SET k v") // the command reaches the server...
	send(t, s, "+OK")
	mustTimeout(t, c) // ...but the reply is lost
	waitFor(t, "downstream drop", func() bool { return p.Stats().DroppedDownstream == 3 })

	p.Pass()
	send(t, s, "+PONG")
	mustRecv(t, c, "+PONG")
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)
}

func TestReset(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	roundTrip(t, c, "before")

	p.Reset()
	if err := recv(c, "x", ioTimeout); !isReset(err) {
		t.Fatalf("existing conn: got %v, want ECONNRESET or EOF", err)
	}

	// The handshake completes in the kernel before the proxy resets the
	// connection, so the RST shows up either on the first read or, if it
	// wins the race with Dial's own completion check, from Dial itself.
	fresh, err := net.Dial("tcp", p.Addr())
	if err == nil {
		err = recv(fresh, "x", ioTimeout)
		_ = fresh.Close()
	}
	if !isReset(err) {
		t.Fatalf("new conn: got %v, want ECONNRESET or EOF", err)
	}

	p.Pass()
	roundTrip(t, dial(t, p.Addr()), "recovered")
	if got := p.Stats().Accepted; got != 3 {
		t.Fatalf("Accepted = %d, want 3", got)
	}
}

func TestPeerCloseIsForwarded(t *testing.T) {
	addr, accept := rawServer(t)
	p := newProxy(t, addr)
	c := dial(t, p.Addr())
	s := accept()
	_ = s.Close()
	if err := recv(c, "x", ioTimeout); !isReset(err) {
		t.Fatalf("got %v, want EOF", err)
	}
}

func TestModeSwitchUnderLoad(t *testing.T) {
	p := newProxy(t, echoServer(t))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if i%2 == 0 {
				p.Delay(time.Millisecond)
			} else {
				p.Pass()
			}
		}
	})
	for range 4 {
		c := dial(t, p.Addr())
		wg.Go(func() {
			for range 50 {
				msg := "payload-" + time.Now().String()
				if _, err := io.WriteString(c, msg); err != nil {
					t.Error(err)
					return
				}
				if err := recv(c, msg, ioTimeout); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	target := echoServer(t)
	ignore := goleak.IgnoreCurrent()

	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	a, b, d := dial(t, p.Addr()), dial(t, p.Addr()), dial(t, p.Addr())
	roundTrip(t, a, "ok")
	roundTrip(t, b, "ok")
	p.BlackholeDownstream()
	send(t, b, "dropped reply")
	_ = d.Close() // its FIN goes up, the server's FIN back is swallowed
	waitFor(t, "reply dropped", func() bool { return p.Stats().DroppedDownstream == 13 })
	p.Delay(time.Hour) // Close must not wait for held data
	send(t, a, "held")

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Fatal("proxy still accepting after Close")
	}
	if err := recv(a, "x", ioTimeout); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("client conn not closed by Close")
	}
	goleak.VerifyNone(t, ignore)
}
