package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// tlsMismatchError is a server that does not speak the protocol the flags
// asked for: TLS to a plaintext port, or the reverse. It is neither a
// net.Error nor io.EOF on purpose: go-redis retries those, and a port does
// not learn TLS between two attempts, so the retries only multiplied the
// wait (25 s for one --tls inspect against a plaintext server).
type tlsMismatchError struct {
	addr string
	msg  string
	err  error
	sure bool // the server was seen speaking the other protocol
}

func (e *tlsMismatchError) Error() string {
	return e.addr + ": " + e.msg
}
func (e *tlsMismatchError) Unwrap() error { return e.err }

const plainHint = "this looks like a TLS handshake against a plaintext Redis port: drop --tls, or use redis:// instead of rediss://"

// tlsDialer dials addr and completes the TLS handshake within timeout, so a
// plaintext server fails the first call at once instead of at every retry.
// A plaintext Redis never answers a ClientHello (it waits for the end of an
// inline command that never comes), so a handshake that times out is
// checked against the same port in plain RESP: a server that answers PING
// in clear is told as such.
//
// A mismatch found is remembered per address for the client's life: the
// pool re-dials five times per command and go-redis re-sends a command
// three times, and a port does not switch protocols between two attempts.
func tlsDialer(cfg *tls.Config, timeout time.Duration) func(context.Context, string, string) (net.Conn, error) {
	var (
		mu       sync.Mutex
		mismatch = map[string]error{}
	)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		known := mismatch[addr]
		mu.Unlock()
		if known != nil {
			return nil, known
		}
		conn, err := dialTLS(ctx, cfg, timeout, network, addr)
		// Only a mismatch seen is remembered: a handshake that merely timed
		// out may be a slow link, which the next attempt may cross.
		var me *tlsMismatchError
		if errors.As(err, &me) && me.sure {
			mu.Lock()
			mismatch[addr] = err
			mu.Unlock()
		}
		return conn, err
	}
}

func dialTLS(ctx context.Context, cfg *tls.Config, timeout time.Duration, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c := cfg.Clone()
	if c.ServerName == "" {
		// As tls.Dial: the name the certificate must have.
		if host, _, err := net.SplitHostPort(addr); err == nil {
			c.ServerName = host
		}
	}
	// Three quarters of the budget for the handshake, the rest for the
	// plaintext probe: the whole dial stays within --timeout.
	deadline, _ := ctx.Deadline()
	hctx, hcancel := context.WithDeadline(ctx, time.Now().Add(time.Until(deadline)*3/4))
	tc := tls.Client(raw, c)
	err = tc.HandshakeContext(hctx)
	// Only a handshake that ran out of time may be a plaintext port: read
	// before hcancel, which would make every failure look like one (a bad
	// certificate too, and then a plaintext PONG would advise dropping TLS).
	timedOut := errors.Is(hctx.Err(), context.DeadlineExceeded)
	hcancel()
	if err == nil {
		return tc, nil
	}
	_ = raw.Close()
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &rh):
		// Something answered, and not in TLS.
		return nil, &tlsMismatchError{addr: addr, err: err, sure: true,
			msg: fmt.Sprintf("it answered %q, which is not TLS; %s", rh.RecordHeader[:], plainHint)}
	case timedOut && ctx.Err() == nil:
		if reply, ok := speaksPlainRESP(ctx, network, addr); ok {
			return nil, &tlsMismatchError{addr: addr, err: err, sure: true,
				msg: fmt.Sprintf("no TLS answer within %v, but PING in plain text got %q; %s", timeout*3/4, reply, plainHint)}
		}
		return nil, &tlsMismatchError{addr: addr, err: err,
			msg: fmt.Sprintf("no TLS answer within %v (%v): is it a plaintext port, or a slow link (raise --timeout)?", timeout*3/4, err)}
	}
	return nil, err
}

// speaksPlainRESP sends PING in clear to addr and returns the first reply
// line when it looks like RESP (+PONG, or an error such as -NOAUTH).
func speaksPlainRESP(ctx context.Context, network, addr string) (string, bool) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return "", false
	}
	defer c.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(deadline)
	}
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return "", false
	}
	line, err := bufio.NewReader(io.LimitReader(c, 512)).ReadString('\n')
	line = strings.TrimRight(line, "\r\n")
	if err != nil || line == "" || !strings.ContainsRune("+-", rune(line[0])) {
		return "", false
	}
	return line, true
}

// tlsHintHook explains the reverse mistake: plaintext to a TLS port. A TLS
// server drops a connection that does not start with a ClientHello, which
// go-redis reports as EOF or a reset; on those errors, once per client, the
// hook tries a TLS handshake on the same address and, when the server
// answers it, says so.
type tlsHintHook struct {
	addr    string
	timeout time.Duration
	once    sync.Once // the probe runs once per client, on the first such error
	hint    string    // written in once, read after it
}

func newTLSHintHook(addr string, timeout time.Duration) *tlsHintHook {
	return &tlsHintHook{addr: addr, timeout: timeout}
}

func (h *tlsHintHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *tlsHintHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.explain(next(ctx, cmd))
	}
}

func (h *tlsHintHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.explain(next(ctx, cmds))
	}
}

func (h *tlsHintHook) explain(err error) error {
	if err == nil || !(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)) {
		return err
	}
	h.once.Do(func() {
		if speaksTLS(h.addr, h.timeout) {
			h.hint = "the server at " + h.addr + " speaks TLS: add --tls, or use rediss:// instead of redis://"
		}
	})
	if h.hint == "" {
		return err
	}
	return fmt.Errorf("%w (%s)", err, h.hint)
}

// speaksTLS reports whether addr completes a TLS handshake, certificate
// unchecked: only the protocol matters here.
func speaksTLS(addr string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // a probe of the protocol, no data sent
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
