package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// fakeTLSAndPlain serves TLS with cert/key to a ClientHello and "+PONG" to
// anything else: what an on-path attacker without the server's certificate
// does, and (for the TLS half) what a real TLS Redis does to a client
// missing --cacert.
func fakeTLSAndPlain(t *testing.T, certFile, keyFile string, answerPlain bool) string {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				br := bufio.NewReader(c)
				b, err := br.Peek(1)
				if err != nil {
					return
				}
				if b[0] == 0x16 {
					tc := tls.Server(&peeked{c, br}, &tls.Config{Certificates: []tls.Certificate{pair}})
					_ = tc.Handshake()
					return
				}
				if answerPlain {
					_, _ = br.ReadString('\n')
					_, _ = c.Write([]byte("+PONG\r\n"))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

type peeked struct {
	net.Conn
	r *bufio.Reader
}

func (p *peeked) Read(b []byte) (int, error) { return p.r.Read(b) }

// A certificate that does not verify is a certificate error, said at once:
// not "no TLS answer within ..., a plaintext port or a slow link?", and
// never "drop --tls" because something on the port then answered PING in
// clear: a handshake error that is not a RecordHeaderError must not be
// taken for the handshake's timeout, which sends the plaintext probe.
func TestTLSCertErrorIsNotAMismatch(t *testing.T) {
	cert, key := selfSigned(t, t.TempDir())
	for _, tc := range []struct {
		name        string
		answerPlain bool
	}{
		{"real TLS server, CA not given", false},
		{"attacker without the certificate, answering PING in clear", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := fakeTLSAndPlain(t, cert, key, tc.answerPlain)
			dial := tlsDialer(&tls.Config{MinVersion: tls.VersionTLS12}, 2*time.Second)
			start := time.Now()
			c, err := dial(context.Background(), "tcp", addr)
			if c != nil {
				c.Close()
				t.Fatal("handshake passed without the CA")
			}
			msg := err.Error()
			var me *tlsMismatchError
			if errors.As(err, &me) || strings.Contains(msg, "drop --tls") || strings.Contains(msg, "no TLS answer") {
				t.Errorf("certificate not verified, reported as a TLS/plaintext mismatch after %v: %s", time.Since(start).Round(time.Millisecond), msg)
			}
			if !strings.Contains(msg, "certificate") {
				t.Errorf("error does not name the certificate: %s", msg)
			}
		})
	}
}
