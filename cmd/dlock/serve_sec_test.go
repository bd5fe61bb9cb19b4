package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// startServe starts dlock serve on a free port with env added to the
// test's environment, and returns its base URL once /healthz answers.
func startServe(t *testing.T, srv *redistest.Server, env []string, args ...string) (*background, string) {
	t.Helper()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	b := startDlockEnv(t, srv, env, append([]string{"serve", "--listen", addr}, args...)...)
	waitFor(t, "serve answering", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return b, addr
}

// startDlockEnv is startDlock with variables added to the environment.
func startDlockEnv(t *testing.T, srv *redistest.Server, env []string, args ...string) *background {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	b := &background{cmd: command(ctx, srv, args...), done: make(chan struct{})}
	b.cmd.Env = append(b.cmd.Env, env...)
	b.cmd.Stderr = &b.stderr
	if err := b.cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start dlock %v: %v", args, err)
	}
	go func() {
		_ = b.cmd.Wait()
		b.code = b.cmd.ProcessState.ExitCode()
		close(b.done)
	}()
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-b.done
		cancel()
	})
	return b
}

// stop ends a serve with SIGTERM and returns what it wrote on stderr.
func (b *background) stop(t *testing.T) string {
	t.Helper()
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	b.wait(t, 15*time.Second)
	return b.stderr.String()
}

// closedWithin sends what send writes on a raw connection to addr and
// returns how long after the start the server closed the connection, or
// fails after limit.
func closedWithin(addr string, limit time.Duration, send func(net.Conn)) (time.Duration, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	closed := make(chan time.Duration, 1)
	go func() {
		_ = c.SetReadDeadline(start.Add(limit))
		_, err := io.Copy(io.Discard, c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			closed <- -1
			return
		}
		closed <- time.Since(start)
	}()
	send(c)
	d := <-closed
	if d < 0 {
		return 0, fmt.Errorf("still open after %v", limit)
	}
	return d, nil
}

// An idle keep-alive, a client sending its headers one byte at a time and
// one sending its body one byte at a time are each closed within the
// server's bounds; before, only the headers were bounded.
func TestServeClosesIdleAndSlowConnections(t *testing.T) {
	srv := redistest.Start(t)
	serve, addr := startServe(t, srv, nil)
	const margin = 3 * time.Second
	dribble := func(c net.Conn, prefix string, d time.Duration) {
		if _, err := io.WriteString(c, prefix); err != nil {
			return
		}
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
			if _, err := c.Write([]byte("a")); err != nil {
				return // closed by the server
			}
		}
	}
	type probe struct {
		what  string
		bound time.Duration
		send  func(net.Conn)
	}
	probes := []probe{
		{"idle keep-alive", serveIdleTimeout, func(c net.Conn) {
			_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}},
		{"slow headers", serveReadHeaderTimeout, func(c net.Conn) {
			dribble(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ", serveReadHeaderTimeout+2*margin)
		}},
		{"slow body", serveReadTimeout, func(c net.Conn) {
			dribble(c, "POST /api/locks/x/unlock HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 10000\r\n\r\nfence=",
				serveReadTimeout+2*margin)
		}},
	}
	errs := make(chan string, len(probes))
	for _, p := range probes {
		go func() {
			d, err := closedWithin(addr, p.bound+margin, p.send)
			switch {
			case err != nil:
				errs <- fmt.Sprintf("%s: %v; want closed within %v", p.what, err, p.bound+margin)
			default:
				t.Logf("%s: closed after %v (bound %v)", p.what, d.Round(time.Millisecond), p.bound)
				errs <- ""
			}
		}()
	}
	for range probes {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
	serve.stop(t)
}

// A request's lock name ends up in the audit log; one of 1 MB wrote a 1 MB
// line. Headers are bounded now (431), and what reaches the handler is
// logged clipped. Wrong tokens from one address meet 429 after a few.
func TestServeAuditLogBoundedAndGuessesLimited(t *testing.T) {
	srv := redistest.Start(t)
	serve, addr := startServe(t, srv, []string{adminTokenEnv + "=" + strings.Repeat("t", 40)})
	post := func(name, token string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+addr+"/api/locks/"+name+"/unlock?fence=1", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST with a %d-byte name: %v", len(name), err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := post(strings.Repeat("n", 1_000_000), "wrong"); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 1 MB name: %d, want 431 (beyond --listen's header bound)", resp.StatusCode)
	}
	post(strings.Repeat("m", 30_000), "wrong")
	var limited *http.Response
	for i := 0; i < 30 && limited == nil; i++ {
		if resp := post("orders", "wrong-"+strconv.Itoa(i)); resp.StatusCode == http.StatusTooManyRequests {
			limited = resp
		}
	}
	if limited == nil {
		t.Error("30 wrong admin tokens from one address: never 429")
	} else if limited.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	log := serve.stop(t)
	if len(log) > 64<<10 {
		t.Errorf("serve logged %d bytes for a few dozen requests", len(log))
	}
	for line := range strings.Lines(log) {
		if len(line) > 4096 {
			t.Errorf("a log line of %d bytes: %.200s…", len(line), line)
		}
	}
}

// "x" was accepted as the admin token. Too short a token stops serve before
// it listens, naming the variable and the bound, and not the token.
func TestServeRefusesShortAdminToken(t *testing.T) {
	srv := redistest.Start(t)
	b := startDlockEnv(t, srv, []string{adminTokenEnv + "=x"}, "serve", "--listen", "127.0.0.1:0")
	code := b.wait(t, 15*time.Second)
	stderr := b.stderr.String()
	if code != exitUsage || !strings.Contains(stderr, adminTokenEnv) || !strings.Contains(stderr, "16") {
		t.Errorf("DLOCK_ADMIN_TOKEN=x: exit %d, want %d naming %s and 16 bytes; stderr: %s", code, exitUsage, adminTokenEnv, stderr)
	}
}

// Serve pointed at a Redis that is down answers 503 without Redis' address
// or the dial error, which go to its log.
func TestServeHidesRedisErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	_, port, _ := net.SplitHostPort(dead)
	serve, addr := startServe(t, nil, nil, "--addr", dead, "--timeout", "1s")
	for _, path := range []string{"/readyz", "/api/locks", "/api/locks/orders", "/"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("GET %s with Redis down: %d, want 503", path, resp.StatusCode)
		}
		if s := string(body); strings.Contains(s, port) || strings.Contains(s, "dial") {
			t.Errorf("GET %s shows Redis' address or the dial error:\n%.1000s", path, s)
		}
	}
	// /metrics counts the failed listing (dlock_fleet_listing_failures)
	// and says nothing of why.
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if s := string(body); strings.Contains(s, ":"+port) || strings.Contains(s, "dial tcp") {
		t.Errorf("GET /metrics shows Redis' address or the dial error")
	}
	if log := serve.stop(t); !strings.Contains(log, port) {
		t.Errorf("serve's log lacks the error kept from clients:\n%s", log)
	}
}

// serve has no authentication of its own: listening beyond loopback says
// so on stderr, where the operator who typed --listen :7482 reads it; a
// loopback address says nothing.
func TestServeWarnsOnNonLoopbackListen(t *testing.T) {
	srv := redistest.Start(t)
	for _, tt := range []struct {
		host string
		warn bool
	}{{"", true}, {"0.0.0.0", true}, {"127.0.0.1", false}, {"localhost", false}} {
		port, err := redistest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		listen := tt.host + ":" + strconv.Itoa(port)
		s := startDlock(t, srv, "serve", "--listen", listen)
		waitFor(t, "serve on "+listen, func() bool {
			resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/healthz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		s.wait(t, 10*time.Second)
		warned := strings.Contains(s.stderr.String(), "warning: --listen "+listen+" is reachable from other machines")
		if warned != tt.warn || (warned && !strings.Contains(s.stderr.String(), "authentication")) {
			t.Errorf("serve --listen %s: warned %v, want %v; stderr:\n%s", listen, warned, tt.warn, s.stderr.String())
		}
	}
}
