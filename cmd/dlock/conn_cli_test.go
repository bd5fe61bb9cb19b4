package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// inProcess runs the CLI in the test process with env as its whole
// environment.
func inProcess(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	d := deps{stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] },
		environ: func() []string { return nil }, self: func() (string, error) { return bin, nil }}
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	code := execute(ctx, args, d)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// redis-cli's connection habits: -h/-p, host:port where a URL goes, --db for
// -n, and -a refused with the reason.
func TestRedisCLIHabits(t *testing.T) {
	srv := redistest.Start(t)
	host, port, _ := net.SplitHostPort(srv.Addr)
	// A lock in database 3 only.
	rdb3 := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 3})
	defer rdb3.Close()
	c := dlock.MustNew(rdb3, dlock.WithDefaultOwner("db3-owner"))
	defer c.Close(context.Background())
	l, err := c.Acquire(context.Background(), "in-db-3", dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())

	ok := []struct {
		env  map[string]string
		args []string
	}{
		{nil, []string{"-h", host, "-p", port, "--db", "3", "inspect", "in-db-3"}},
		{nil, []string{"--host", host, "--port", port, "--db=3", "list"}},
		{nil, []string{"--url", srv.Addr, "--db", "3", "inspect", "in-db-3"}},
		{nil, []string{"-u", "redis://" + srv.Addr + "/3", "inspect", "in-db-3"}},
		{map[string]string{"DLOCK_URL": srv.Addr}, []string{"--db", "3", "inspect", "in-db-3"}},
		{map[string]string{"REDIS_URL": srv.Addr}, []string{"--db", "3", "list"}},
	}
	for _, tt := range ok {
		r := inProcess(t, tt.env, tt.args...)
		if r.code != 0 || !strings.Contains(r.stdout, "db3-owner") {
			t.Errorf("dlock %v (env %v): exit %d, stdout %q, stderr %q; want the lock of db 3", tt.args, tt.env, r.code, r.stdout, r.stderr)
		}
	}
	// Database 0 does not have it: --db was not ignored above.
	if r := inProcess(t, nil, "-h", host, "-p", port, "inspect", "in-db-3"); r.code != exitNotFound {
		t.Errorf("inspect in db 0: exit %d, want %d; stderr %q", r.code, exitNotFound, r.stderr)
	}

	usage := []struct {
		args []string
		want string
	}{
		{[]string{"-a", "hunter2", "list"}, "$DLOCK_PASSWORD"},
		{[]string{"-h"}, "help is --help"},
		{[]string{"-n", "2", "list"}, "--db N"},
		{[]string{"-h", host, "--addr", srv.Addr, "list"}, "give one of them"},
		{[]string{"--url", "localhost:notaport", "list"}, "port must be a number"},
		{[]string{"--url", "redis://" + srv.Addr + "/2", "--db", "3", "list"}, "differ"},
	}
	for _, tt := range usage {
		r := inProcess(t, nil, tt.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("dlock %v: exit %d, stderr %q; want %d and %q", tt.args, r.code, r.stderr, exitUsage, tt.want)
		}
		if strings.Contains(r.stderr, "hunter2") {
			t.Errorf("dlock %v repeats the password: %q", tt.args, r.stderr)
		}
	}

	// Help stays on --help, for the root and the subcommands, and says
	// which habits hold.
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"help", "list"}} {
		r := inProcess(t, nil, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage:") {
			t.Errorf("dlock %v: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	r := inProcess(t, nil, "--help")
	for _, want := range []string{"-h/--host", "-p/--port", "--db N", "No -a", "host[:port]", "$REDISCLI_AUTH"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dlock --help does not say %q:\n%s", want, r.stdout)
		}
	}
}

// --tls against a plaintext Redis used to hang for 25 s (5.4 s with
// --timeout 1s) and say "context deadline exceeded". It fails within about
// --timeout now, and says what is wrong; so does the reverse mistake.
func TestTLSAgainstPlaintextServer(t *testing.T) {
	srv := redistest.Start(t)
	for _, args := range [][]string{
		{"--addr", srv.Addr, "--tls", "--timeout", "2s", "inspect", "x"},
		{"--url", "rediss://" + srv.Addr, "--timeout", "2s", "list"},
		{"--addr", srv.Addr, "--tls", "--timeout", "2s", "run", "-w", "30s", "x", "--", "true"},
	} {
		start := time.Now()
		r := dlockRun(t, nil, args...)
		took := time.Since(start)
		if r.code != exitRedis || !strings.Contains(r.stderr, "TLS handshake against a plaintext") || !strings.Contains(r.stderr, "drop --tls") {
			t.Errorf("dlock %v: exit %d, stderr %q; want %d and the plaintext hint", args, r.code, r.stderr, exitRedis)
		}
		// Generous: the old behaviour took five dial attempts (10 s and more
		// at --timeout 2s); one is about 2 s.
		if took > 9*time.Second {
			t.Errorf("dlock %v took %v with --timeout 2s", args, took.Round(time.Millisecond))
		}
	}
}

func TestPlaintextAgainstTLSServer(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	tlsPort, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", cert, "--tls-key-file", key, "--tls-auth-clients", "no")
	tlsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
	_ = srv

	r := dlockRun(t, nil, "--addr", tlsAddr, "--timeout", "2s", "list")
	if r.code != exitRedis || !strings.Contains(r.stderr, "speaks TLS: add --tls") {
		t.Errorf("plaintext to a TLS port: exit %d, stderr %q; want %d and the TLS hint", r.code, r.stderr, exitRedis)
	}
	// The dialer that now does the handshake still reaches a TLS server,
	// verifying its certificate.
	r = dlockRun(t, nil, "--addr", tlsAddr, "--tls", "--cacert", cert, "--timeout", "2s", "list")
	if r.code != 0 || !strings.Contains(r.stderr, "no locks held") {
		t.Errorf("--tls --cacert to a TLS port: exit %d, stderr %q", r.code, r.stderr)
	}
	r = dlockRun(t, nil, "--url", "rediss://"+tlsAddr, "--timeout", "2s", "list")
	if r.code != exitRedis || !strings.Contains(r.stderr, "certificate") {
		t.Errorf("rediss:// without the CA: exit %d, stderr %q; want a certificate error", r.code, r.stderr)
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dlock test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
