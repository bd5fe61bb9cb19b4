package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
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
	host       string // -h/--host, as redis-cli
	port       int    // -p/--port, as redis-cli; 0: not given
	db         dbFlag // --db; run's -n is flock's no-wait, so no -n here
	pass       string // -a/--pass, refused: see refusePass
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
	warned   bool // warnURLPassword has spoken
	// source says where the server's address came from, for a message
	// about a server that does not answer: "--addr", "from $DLOCK_URL"...
	source string
}

// warnURLPassword warns, once per process, that a password in -u/--url shows
// in ps and the shell's history. A warning and not a refusal, as redis-cli
// does for -u: scripts that pass redis://:pw@host today keep working, and
// hear how to stop exposing it; -a, which redis-cli also takes, was never
// accepted, so refusing it broke nobody. The password itself is not
// repeated.
func (f *connFlags) warnURLPassword(w io.Writer) {
	if f.warned || !strings.Contains(f.url, "@") {
		return
	}
	u, err := url.Parse(f.url)
	if err != nil || u.User == nil {
		return
	}
	if _, has := u.User.Password(); !has {
		return
	}
	f.warned = true
	fmt.Fprintln(w, "dlock: warning: the password in --url shows in ps and the shell's history; "+
		"put the URL in $DLOCK_URL, or the password in $DLOCK_PASSWORD, instead")
}

func (f *connFlags) register(fs *pflag.FlagSet) {
	fs.StringVarP(&f.url, "url", "u", "", "Redis URL, redis:// or rediss://, or host[:port] (default $DLOCK_URL, then $REDIS_URL); a password in it shows in ps: keep that one in $DLOCK_URL")
	fs.StringVarP(&f.host, "host", "h", "", "Redis host, as redis-cli -h (default 127.0.0.1; help is --help)")
	fs.IntVarP(&f.port, "port", "p", 0, "Redis port, as redis-cli -p (default 6379)")
	fs.Var(&f.db, "db", "Redis database number (as redis-cli -n; also the /N of a URL)")
	fs.StringVarP(&f.pass, "pass", "a", "", "refused: a password on the command line shows in ps and shell history")
	_ = fs.MarkHidden("pass")
	// Help keeps --help only: -h is the host, as in redis-cli. A "help" flag
	// defined here stops cobra from adding its own -h to every command.
	fs.Bool("help", false, "help for the command")
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
	durationFlag(fs, &f.timeout, "timeout", "", 5*time.Second, "timeout of each Redis call: dial, read, write; run and lock keep it at most a third of --ttl (without --timeout: min(5s, ttl/3))")
}

// options resolves the flags and the environment into client options,
// without connecting. prompt asks for a password (--ask-pass).
func (f *connFlags) options(getenv func(string) string, prompt func() (string, error)) (*redis.UniversalOptions, error) {
	if f.pass != "" {
		return nil, usagef("-a/--pass: dlock takes no password on the command line, where ps and the shell history show it to others; set $DLOCK_PASSWORD or $REDISCLI_AUTH, or use --ask-pass")
	}
	hostPort := f.host != "" || f.port != 0
	if n := btoi(f.url != "") + btoi(len(f.addrs) > 0) + btoi(hostPort); n > 1 {
		return nil, usagef("--url, --addr and -h/-p each name the server: give one of them")
	}
	if f.port < 0 || f.port > 65535 {
		return nil, usagef("-p/--port %d: want a TCP port, 1 to 65535", f.port)
	}
	addrs := f.addrs
	if hostPort {
		if _, _, err := net.SplitHostPort(f.host); err == nil {
			return nil, usagef("-h/--host %q has a port: give it with -p, or use --url %s", f.host, f.host)
		}
		// [::1] as redis-cli users type an IPv6 host.
		host, port := cmp.Or(strings.Trim(f.host, "[]"), "127.0.0.1"), cmp.Or(f.port, 6379)
		addrs = []string{net.JoinHostPort(host, strconv.Itoa(port))}
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
		// go-redis asks every new connection for CLIENT MAINT_NOTIFICATIONS
		// (Redis Cloud's), which Redis 7 and Valkey refuse as an unknown
		// subcommand: one wasted, refused command per connection, logged by
		// go-redis, for a feature the CLI does not use.
		MaintNotificationsConfig: noMaintNotifications(),
	}
	u := f.url
	switch {
	case f.url != "":
		f.source = "-u/--url"
	case hostPort:
		f.source = "-h/-p"
	case len(addrs) > 0:
		f.source = "--addr"
	default:
		f.source = "the default"
		for _, env := range []string{"DLOCK_URL", "REDIS_URL"} {
			if u = getenv(env); u != "" {
				f.source = "from $" + env
				break
			}
		}
	}
	switch {
	case u != "":
		if f.masterName != "" || f.cluster {
			return nil, usagef("--master-name and --cluster take their nodes from --addr, not from a URL")
		}
		if err := fromURL(o, u); err != nil {
			return nil, err
		}
	case len(addrs) > 0:
		o.Addrs, o.MasterName, o.IsClusterMode = addrs, f.masterName, f.cluster
	default:
		o.Addrs, o.MasterName, o.IsClusterMode = []string{defaultAddr}, f.masterName, f.cluster
	}
	if f.db.set {
		if o.DB != 0 && o.DB != f.db.n {
			return nil, usagef("--db %d and the URL's database %d differ: give it once", f.db.n, o.DB)
		}
		o.DB = f.db.n
	}
	if o.DB != 0 && (o.IsClusterMode || len(o.Addrs) > 1) && o.MasterName == "" {
		return nil, usagef("database %d: Redis Cluster has database 0 only", o.DB)
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

// fromURL fills o from a redis://, rediss:// or unix:// URL, or from what
// users type where redis-cli and most clients take it: host:port, a host
// alone (port 6379), or the path of a unix socket.
func fromURL(o *redis.UniversalOptions, raw string) error {
	if !strings.Contains(raw, "://") {
		addr, err := plainAddr(raw)
		if err != nil {
			return err
		}
		if strings.HasPrefix(addr, "/") {
			// The path as it is: through a unix:// URL, '#' or '%' in it
			// would be read as URL syntax and dial another socket.
			unixDialer(o, addr)
			return nil
		}
		o.Addrs = []string{addr}
		return nil
	}
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
		unixDialer(o, po.Addr)
	}
	return nil
}

// unixDialer points o at the unix socket path: UniversalOptions has no
// network, so a dialer reaches the socket.
func unixDialer(o *redis.UniversalOptions, path string) {
	o.Addrs = []string{path}
	o.Dialer = func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
}

// plainAddr checks a server given without a scheme and returns it as
// host:port (or a socket path, starting with /).
func plainAddr(raw string) (string, error) {
	if strings.HasPrefix(raw, "/") {
		return raw, nil
	}
	bad := func(why string) error {
		return usagef("Redis address %q: %s; want host:port, a host, or redis://[user@]host:port/db", raw, why)
	}
	if strings.ContainsAny(raw, "/@? ") {
		return "", bad("not a host:port (a path, user or query needs a redis:// URL)")
	}
	host, port, err := net.SplitHostPort(raw)
	if err != nil {
		// A host alone, an IPv6 address alone included.
		host, port = strings.Trim(raw, "[]"), "6379"
	}
	if host == "" {
		return "", bad("no host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", bad("the port must be a number from 1 to 65535")
	}
	return net.JoinHostPort(host, port), nil
}

// dbFlag is --db: a database number that knows whether it was given, so
// that a URL's /N and --db can be checked against each other.
type dbFlag struct {
	n   int
	set bool
}

func (d *dbFlag) String() string { return strconv.Itoa(d.n) }
func (d *dbFlag) Type() string   { return "int" }
func (d *dbFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want a database number, 0 or more")
	}
	d.n, d.set = n, true
	return nil
}

// connFlagHint explains a flag error that comes from a redis-cli habit dlock
// does not share ("" for others).
func connFlagHint(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "'h' in -h"):
		return "-h is the Redis host, as in redis-cli; help is --help"
	case strings.Contains(msg, "'n' in -n"):
		return "the database number is --db N (or the /N of a URL); -n is run's no-wait, as in flock"
	case strings.Contains(msg, "'a' in -a"):
		return "dlock takes no password on the command line; set $DLOCK_PASSWORD or $REDISCLI_AUTH, or use --ask-pass"
	}
	return ""
}

// connGiven reports whether the command line names the server (else the
// environment or the default address is used).
func connGiven(fs *pflag.FlagSet) bool {
	for _, n := range []string{"url", "addr", "host", "port"} {
		if fs.Changed(n) {
			return true
		}
	}
	return false
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (f *connFlags) applyTLS(o *redis.UniversalOptions) error {
	if f.tls && len(o.Addrs) == 1 && strings.HasPrefix(o.Addrs[0], "/") {
		// The unix dialer would connect in plain text, and --tls would
		// be silently ignored.
		return usagef("--tls with the unix socket %s: a local socket is not encrypted by dlock; drop --tls, or connect over TCP", o.Addrs[0])
	}
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
	if o.Dialer == nil {
		o.Dialer = tlsDialer(o.TLSConfig, f.timeout)
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
	a.conn.warnURLPassword(a.stderr)
	return a.newClient(o), nil
}

// newClient is the go-redis client of o, with the hint for a plaintext
// client at a TLS port where one applies.
func (a *app) newClient(o *redis.UniversalOptions) redis.UniversalClient {
	rdb := redis.NewUniversalClient(o)
	if o.TLSConfig == nil && o.Dialer == nil && len(o.Addrs) == 1 && o.MasterName == "" && !o.IsClusterMode {
		rdb.AddHook(newTLSHintHook(o.Addrs[0], a.conn.timeout))
	}
	return rdb
}

// reachHint is what a user who named no server, or the wrong one, needs.
const reachHint = "is it running? Name the server with -h/-p, -u/--url, --addr or $DLOCK_URL"

// probe sends one PING, not retried, and reports a server that cannot be
// reached or does not answer within --timeout, with the address tried, where
// it came from, and how to name another. go-redis retries a failed dial
// five times per attempt and an attempt four times: a wrong port took 1.7 to
// 3.4 s to be told, a run or lock its whole --wait (told as "busy"), and
// watch stayed silent. A server that answers, even with an error (NOAUTH,
// LOADING), is left to the command, which says what it means for it.
func (a *app) probe(o *redis.UniversalOptions) error {
	po := *o
	po.MaxRetries, po.DialerRetries, po.PoolSize, po.MinIdleConns = -1, 1, 1, 0
	rdb := a.newClient(&po)
	defer rdb.Close()
	// A dial and a read, each bounded by --timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 2*a.conn.timeout)
	defer cancel()
	err := rdb.Ping(ctx).Err()
	if err == nil {
		return nil
	}
	var re redis.Error
	if errors.As(err, &re) {
		return nil
	}
	where := fmt.Sprintf("Redis at %s (%s)", strings.Join(o.Addrs, ","), a.conn.source)
	var oe *net.OpError
	var ne net.Error
	var de *net.DNSError
	var me *tlsMismatchError
	switch {
	case errors.As(err, &me):
		return err // it names the address and the fix
	case errors.As(err, &de), errors.As(err, &oe) && oe.Op == "dial" && !oe.Timeout():
		return fmt.Errorf("cannot reach %s: %s; %s", where, netReason(err), reachHint)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("no answer from %s within %v (--timeout): %s; %s", where, a.conn.timeout, netReason(err), reachHint)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// netReason is the end of a network error, "connection refused", without
// the "dial tcp 127.0.0.1:1: connect:" that repeats the address.
func netReason(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}

// locker returns a dlock client on the flags' Redis, and a function that
// closes it and its connections (bounded: Close releases what is held).
func (a *app) locker(opts ...dlock.Option) (*dlock.Client, redis.UniversalClient, func(), error) {
	if err := checkPrefix(a.conn.prefix); err != nil {
		return nil, nil, nil, err
	}
	o, err := a.conn.options(a.getenv, a.promptPassword)
	if err != nil {
		return nil, nil, nil, err
	}
	a.conn.warnURLPassword(a.stderr)
	if !a.noProbe {
		if err := a.probe(o); err != nil {
			return nil, nil, nil, err
		}
	}
	rdb := a.newClient(o)
	c, err := dlock.New(rdb, append([]dlock.Option{dlock.WithPrefix(a.conn.prefix)}, opts...)...)
	if err != nil {
		_ = rdb.Close()
		// The prefix is the only option from the user, checked above.
		return nil, nil, nil, usagef("--prefix %q: %s", a.conn.prefix, strings.TrimPrefix(err.Error(), "dlock: new: "))
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

// noMaintNotifications turns off go-redis' CLIENT MAINT_NOTIFICATIONS
// handshake for the CLI's own clients (see options).
func noMaintNotifications() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}
