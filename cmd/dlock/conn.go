package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/dlock-go/dlock"
)

// defaultAddr is where dlock looks for Redis when told nothing, as redis-cli.
const defaultAddr = "127.0.0.1:6379"

// connFlags are the root's connection flags, shared by every subcommand.
type connFlags struct {
	url        string
	addrs      []string
	cluster    bool
	masterName string
	user       string
	askPass    bool
	tls        bool
	cacert     string
	cert, key  string
	insecure   bool
	prefix     string
	timeout    time.Duration

	// password as resolved by options, so that demo can hand a password
	// typed at --ask-pass to its workers through their environment.
	password string
}

func (f *connFlags) register(fs *pflag.FlagSet) {
	fs.StringVarP(&f.url, "url", "u", "", "Redis URL, redis:// or rediss:// (default $DLOCK_URL, then $REDIS_URL)")
	fs.StringArrayVar(&f.addrs, "addr", nil, "Redis host:port, repeatable: Cluster nodes, or Sentinels with --master-name (default "+defaultAddr+")")
	fs.BoolVar(&f.cluster, "cluster", false, "treat a single --addr as a seed node of a Redis Cluster")
	fs.StringVar(&f.masterName, "master-name", "", "Sentinel master name: the --addr values are Sentinels")
	fs.StringVar(&f.user, "user", "", "ACL user name")
	fs.BoolVar(&f.askPass, "ask-pass", false, "ask for the password on the terminal (else $DLOCK_PASSWORD, then $REDISCLI_AUTH)")
	fs.BoolVar(&f.tls, "tls", false, "connect with TLS (implied by rediss://)")
	fs.StringVar(&f.cacert, "cacert", "", "PEM file of the CA certificates that verify the server")
	fs.StringVar(&f.cert, "cert", "", "PEM file of the client certificate (with --key)")
	fs.StringVar(&f.key, "key", "", "PEM file of the client private key (with --cert)")
	fs.BoolVar(&f.insecure, "insecure", false, "do not verify the server's TLS certificate")
	fs.StringVar(&f.prefix, "prefix", dlock.DefaultPrefix, "key prefix of the locks: the one the programs taking them use")
	durationFlag(fs, &f.timeout, "timeout", "", 5*time.Second, "timeout of each Redis call: dial, read, write")
}

// options resolves the flags and the environment into client options,
// without connecting. prompt asks for a password (--ask-pass).
func (f *connFlags) options(getenv func(string) string, prompt func() (string, error)) (*redis.UniversalOptions, error) {
	if f.url != "" && len(f.addrs) > 0 {
		return nil, usagef("--url and --addr exclude each other")
	}
	if f.timeout <= 0 {
		return nil, usagef("--timeout %v must be positive", f.timeout)
	}
	o := &redis.UniversalOptions{
		// Without it go-redis ignores a context's deadline on reads and a
		// blackholed connection waits for ReadTimeout instead.
		ContextTimeoutEnabled: true,
		DialTimeout:           f.timeout,
		ReadTimeout:           f.timeout,
		WriteTimeout:          f.timeout,
	}
	u := f.url
	if u == "" && len(f.addrs) == 0 {
		u = firstEnv(getenv, "DLOCK_URL", "REDIS_URL")
	}
	switch {
	case u != "":
		if f.masterName != "" || f.cluster {
			return nil, usagef("--master-name and --cluster take their nodes from --addr, not from a URL")
		}
		if err := fromURL(o, u); err != nil {
			return nil, err
		}
	case len(f.addrs) > 0:
		o.Addrs, o.MasterName, o.IsClusterMode = f.addrs, f.masterName, f.cluster
	default:
		o.Addrs, o.MasterName, o.IsClusterMode = []string{defaultAddr}, f.masterName, f.cluster
	}
	if f.user != "" {
		o.Username = f.user
	}
	switch {
	case f.askPass:
		pw, err := prompt()
		if err != nil {
			return nil, err
		}
		o.Password = pw
	case o.Password == "": // a password in the URL wins over the environment
		o.Password = firstEnv(getenv, "DLOCK_PASSWORD", "REDISCLI_AUTH")
	}
	f.password = o.Password
	if err := f.applyTLS(o); err != nil {
		return nil, err
	}
	return o, nil
}

// fromURL fills o from a redis://, rediss:// or unix:// URL.
func fromURL(o *redis.UniversalOptions, raw string) error {
	po, err := redis.ParseURL(raw)
	if err != nil {
		// url.Error repeats the URL, password included: keep only the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return usagef("invalid Redis URL: %v", err)
	}
	o.Addrs, o.DB, o.Username, o.Password, o.TLSConfig = []string{po.Addr}, po.DB, po.Username, po.Password, po.TLSConfig
	if po.Network == "unix" {
		// UniversalOptions has no network; a dialer reaches the socket.
		path := po.Addr
		o.Dialer = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
	}
	return nil
}

func (f *connFlags) applyTLS(o *redis.UniversalOptions) error {
	if f.tls && o.TLSConfig == nil {
		// No ServerName: crypto/tls takes it from each address dialed,
		// which is right for every node of a Cluster.
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if o.TLSConfig == nil {
		if f.cacert != "" || f.cert != "" || f.key != "" || f.insecure {
			return usagef("--cacert, --cert, --key and --insecure need --tls or a rediss:// URL")
		}
		return nil
	}
	if (f.cert == "") != (f.key == "") {
		return usagef("--cert and --key go together")
	}
	if f.cacert != "" {
		pem, err := os.ReadFile(f.cacert)
		if err != nil {
			return usagef("--cacert: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return usagef("--cacert %s: no PEM certificate in it", f.cacert)
		}
		o.TLSConfig.RootCAs = pool
	}
	if f.cert != "" {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return usagef("--cert/--key: %v", err)
		}
		o.TLSConfig.Certificates = []tls.Certificate{pair}
	}
	if f.insecure {
		o.TLSConfig.InsecureSkipVerify = true
	}
	return nil
}

func firstEnv(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// redis returns a client for the flags: standalone, Cluster (several
// addresses, or --cluster) or Sentinel (--master-name), as
// redis.NewUniversalClient picks.
func (a *app) redis() (redis.UniversalClient, error) {
	o, err := a.conn.options(a.getenv, a.promptPassword)
	if err != nil {
		return nil, err
	}
	return redis.NewUniversalClient(o), nil
}

// locker returns a dlock client on the flags' Redis, and a function that
// closes it and its connections (bounded: Close releases what is held).
func (a *app) locker(opts ...dlock.Option) (*dlock.Client, redis.UniversalClient, func(), error) {
	rdb, err := a.redis()
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := dlock.New(rdb, append([]dlock.Option{dlock.WithPrefix(a.conn.prefix)}, opts...)...)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, nil, usagef("%v", err) // the prefix is the only option from the user
	}
	closeAll := func() {
		ctx, cancel := context.WithTimeout(context.Background(), a.conn.timeout)
		defer cancel()
		_ = c.Close(ctx)
		_ = rdb.Close()
	}
	return c, rdb, closeAll, nil
}

func (a *app) promptPassword() (string, error) {
	if !isTerminal(a.stdin) {
		return "", usagef("--ask-pass needs a terminal on stdin; set DLOCK_PASSWORD instead")
	}
	fmt.Fprint(a.stderr, "Redis password: ")
	pw, err := term.ReadPassword(int(a.stdin.Fd()))
	fmt.Fprintln(a.stderr)
	if err != nil {
		return "", usagef("--ask-pass: read the password: %v", err)
	}
	return string(pw), nil
}

func isTerminal(f *os.File) bool { return f != nil && term.IsTerminal(int(f.Fd())) }
