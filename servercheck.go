package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/serverreq"
)

// What dlock needs of a server lives in serverreq, which dlock doctor
// reports from too.
var (
	minClusterVersion = serverreq.MinCluster
	parseVersion      = serverreq.Parse
	older             = serverreq.Older
	evictionRisk      = serverreq.EvictionRisk
)

// evictionFix is the command that makes Redis keep every lock until its TTL.
const evictionFix = serverreq.EvictionFix

// serverCheck is the state of checkServer; its zero value is ready. verdict
// is the fast path that every acquisition reads; mu guards running only.
type serverCheck struct {
	verdict atomic.Pointer[serverVerdict] // nil until a server answered
	mu      sync.Mutex
	running chan struct{} // closed when the check under way ends; nil if none
	probing atomic.Bool   // a background check (serverVerdictNow) is under way
}

// serverCheckTimeout bounds a background check.
const serverCheckTimeout = 5 * time.Second

// serverVerdictNow is what acquisitions call: the stored verdict, without
// waiting. While there is none, it starts one check in the background,
// bounded by serverCheckTimeout and cancelled by Close, which waits for it.
// No acquisition waits for the check: in a Cluster with one primary hung it
// would wait for that primary, and hand out a lock already past its
// deadline. The first acquisitions on an
// unsupported server get Redis' own error instead of ErrUnsupportedServer.
func (c *Client) serverVerdictNow() error {
	if v := c.server.verdict.Load(); v != nil {
		return v.err
	}
	if !c.server.probing.CompareAndSwap(false, true) {
		return nil
	}
	if !c.own.Go(func() {
		defer c.server.probing.Store(false)
		ctx, cancel := context.WithTimeout(c.closing, serverCheckTimeout)
		defer cancel()
		_ = c.checkServer(ctx)
	}) {
		c.server.probing.Store(false)
	}
	return nil
}

// serverVerdict is what acquisitions are told once the server answered:
// nil, or an error wrapping ErrUnsupportedServer.
type serverVerdict struct {
	err error
	// server names the server checked ("Valkey 8.0.1 …"; the first
	// primary of a Cluster), for messages; "" when it did not say.
	server string
	// durable is why WithDurableGrant cannot be kept on the servers
	// (durableVerdict), or nil when it can.
	durable error
}

// checkServer checks, once per Client, that the Redis server can run dlock:
// its version (an error wrapping ErrUnsupportedServer, returned by this and
// every later call) and its maxmemory-policy (a warning, logged once, when
// Redis may evict held locks). In a Cluster every primary is checked.
//
// The check is best effort. A check that could not run (network, the
// caller's context) returns nil and runs again on a later call, since the
// acquisition that follows reports the same failure better; a server that
// answered is not asked again, also when it refused INFO or CONFIG, which
// managed Redis often does. After that, checkServer is one atomic load.
func (c *Client) checkServer(ctx context.Context) error {
	if v := c.server.verdict.Load(); v != nil {
		return v.err
	}
	return c.checkServerOnce(ctx)
}

// checkServerOnce runs the check unless another call is running it; then it
// waits for that call's result, or for ctx. Only the call that ran the check
// logs, and a verdict is stored once, so the warning is logged once.
func (c *Client) checkServerOnce(ctx context.Context) error {
	for {
		v, running := c.server.claim()
		switch {
		case v != nil:
			return v.err
		case running == nil:
			return c.runServerCheck(ctx)
		}
		select {
		case <-running:
			// Checked (loop to read the verdict) or not heard (loop to try
			// again, with this caller's context).
		case <-ctx.Done():
			return nil
		}
	}
}

// claim returns the verdict if there is one, else the channel of the check
// under way, else nil for both: the caller runs the check and must call done.
func (s *serverCheck) claim() (*serverVerdict, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.verdict.Load(); v != nil {
		return v, nil
	}
	if s.running != nil {
		return nil, s.running
	}
	s.running = make(chan struct{})
	return nil, nil
}

// done stores v, unless nil (the server was not heard), and wakes the calls
// waiting for the check.
func (s *serverCheck) done(v *serverVerdict) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v != nil {
		s.verdict.Store(v)
	}
	close(s.running)
	s.running = nil
}

// runServerCheck asks the server, stores the verdict and logs the warning.
// The deferred done also frees the waiters if the probe panics.
func (c *Client) runServerCheck(ctx context.Context) error {
	var v *serverVerdict
	defer func() { c.server.done(v) }()
	facts, err := c.probeServer(ctx)
	if err != nil {
		return nil
	}
	v = &serverVerdict{err: versionVerdict(facts, c.isCluster())}
	if len(facts) > 0 {
		v.server = facts[0].server.String()
	}
	v.durable = durableVerdict(facts)
	c.warnEviction(ctx, facts)
	return v.err
}

func (c *Client) isCluster() bool {
	_, ok := c.rdb.(*redis.ClusterClient)
	return ok
}

// serverFacts is what one server said about itself; a field is empty when
// the server refused to say.
type serverFacts struct {
	addr   string           // the primary's address, in a Cluster only
	server serverreq.Server // which server, and its own version, from INFO server
	policy string           // maxmemory-policy from CONFIG GET, else from INFO memory
	// shard is whether COMMAND INFO knows SPUBLISH (the shard channels a
	// Cluster's hand-offs use); nil when the server refused to say.
	shard *bool
	// waitAOF is whether COMMAND INFO knows WAITAOF (WithDurableGrant);
	// nil when the server refused to say.
	waitAOF *bool
	fsync   string // appendfsync from CONFIG GET; "" when refused
	aof     string // appendonly from CONFIG GET; "" when refused
}

// probeServer asks the server, or every primary of a Cluster in parallel.
// An error means some server did not answer at all.
func (c *Client) probeServer(ctx context.Context) ([]serverFacts, error) {
	cc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		f, err := probe(ctx, c.rdb)
		return []serverFacts{f}, err
	}
	var mu sync.Mutex // ForEachMaster runs fn for all primaries at once
	var facts []serverFacts
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		f, err := probe(ctx, node)
		f.addr = node.Options().Addr
		mu.Lock()
		facts = append(facts, f)
		mu.Unlock()
		return err
	})
	// Sorted, so messages and tests do not depend on who answered first.
	slices.SortFunc(facts, func(a, b serverFacts) int { return strings.Compare(a.addr, b.addr) })
	return facts, err
}

// probe asks one server in one round trip. INFO memory backs CONFIG GET up:
// managed Redis often refuses CONFIG but shows maxmemory_policy in INFO, and
// managed Redis is where volatile-lru is a common default.
func probe(ctx context.Context, rdb redis.Cmdable) (serverFacts, error) {
	pipe := rdb.Pipeline()
	server := pipe.Info(ctx, "server")
	memory := pipe.Info(ctx, "memory")
	config := pipe.ConfigGet(ctx, "maxmemory-policy")
	// Apart: Redis before 7.0 takes one pattern per CONFIG GET.
	fsync := pipe.ConfigGet(ctx, "appendfsync")
	aof := pipe.ConfigGet(ctx, "appendonly")
	// What the server can do is asked of it, not read from its version:
	// forks and builds report versions that say little.
	commands := pipe.Do(ctx, serverreq.CommandsQuery...)
	_, _ = pipe.Exec(ctx) // errors are read per command
	for _, err := range []error{server.Err(), memory.Err(), config.Err(), fsync.Err(), aof.Err(), commands.Err()} {
		// A refusal (unknown command, NOPERM) is an answer; anything else
		// (network, context) means the server was not heard.
		var answer redis.Error
		if err != nil && !errors.As(err, &answer) {
			return serverFacts{}, err
		}
	}
	f := serverFacts{
		server: serverreq.Identify(func(k string) string { return infoField(server.Val(), k) }),
		policy: config.Val()["maxmemory-policy"],
		fsync:  fsync.Val()["appendfsync"],
		aof:    aof.Val()["appendonly"],
	}
	known := serverreq.Commands(commands.Val(), commands.Err())
	f.shard, f.waitAOF = known.ShardChannels, known.WaitAOF
	if f.policy == "" {
		f.policy = infoField(memory.Val(), "maxmemory_policy")
	}
	return f, nil
}

// infoField returns one field of an INFO reply, or "".
func infoField(info, key string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// versionVerdict returns the first unsupported server of facts, or nil.
func versionVerdict(facts []serverFacts, cluster bool) error {
	for _, f := range facts {
		if err := checkVersion(f, cluster); err != nil {
			return err
		}
	}
	return nil
}

// checkVersion refuses a server older than dlock needs (each kind of
// server has its own minimum: serverreq.Server.Need), and, in a Cluster,
// one without the shard channels: by COMMAND INFO, or, when the server
// refused to say, by Redis' version. f.addr names the server in the
// message when not empty. A version it cannot parse passes: a fork's odd
// version string is no reason to refuse a server that may well work.
func checkVersion(f serverFacts, cluster bool) error {
	s, need := f.server, f.server.Need()
	v, ok := parseVersion(s.Version)
	at := ""
	if f.addr != "" {
		at = " at " + f.addr
	}
	switch {
	case ok && older(v, need.Min):
		return fmt.Errorf("%w: %s%s; %s (%s)", ErrUnsupportedServer, s, at, need.Text(s), need.Why)
	case !cluster:
		return nil
	case f.shard != nil && !*f.shard:
		return fmt.Errorf("%w: %s%s has no SPUBLISH (COMMAND INFO); a Cluster needs it: %s (Redis %d.%d or newer, any Valkey)",
			ErrUnsupportedServer, s, at, serverreq.WhyMinCluster, minClusterVersion[0], minClusterVersion[1])
	case f.shard == nil && ok && s.Name == "Redis" && older(v, minClusterVersion):
		return fmt.Errorf("%w: %s%s; a Redis Cluster needs Redis %d.%d or newer (%s)",
			ErrUnsupportedServer, s, at, minClusterVersion[0], minClusterVersion[1], serverreq.WhyMinCluster)
	}
	return nil
}

// warnEviction logs, through the client's logger, one warning for all the
// servers whose policy may evict held locks.
func (c *Client) warnEviction(ctx context.Context, facts []serverFacts) {
	var policies, nodes []string
	var why string
	for _, f := range facts {
		risk, ok := evictionRisk(f.policy)
		if !ok {
			continue
		}
		if why == "" {
			why = risk
		}
		if !slices.Contains(policies, f.policy) {
			policies = append(policies, f.policy)
		}
		if f.addr != "" {
			nodes = append(nodes, f.addr)
		}
	}
	if why == "" {
		return
	}
	logger := c.cfg.logger
	if logger == nil {
		logger = slog.Default()
	}
	attrs := []slog.Attr{slog.String("policy", strings.Join(policies, ",")), slog.String("fix", evictionFix)}
	if len(nodes) > 0 {
		attrs = append(attrs, slog.String("primaries", strings.Join(nodes, ",")))
	}
	attrs = append(attrs, slog.String("why", why))
	logger.LogAttrs(ctx, slog.LevelWarn, "dlock: redis may evict held locks", attrs...)
}

// durableVerdict is why WithDurableGrant cannot be kept on the servers of
// facts, or nil: it confirms grants with WAITAOF's numlocal, which only
// stands for an fsync on a server with WAITAOF whose appendfsync is always,
// or everysec on a server that waits for the fsync (serverreq.EarlyWaitAOF).
// Anything it cannot read refuses: the option exists to be trusted.
func durableVerdict(facts []serverFacts) error {
	for _, f := range facts {
		at := ""
		if f.addr != "" {
			at = " at " + f.addr
		}
		switch {
		case f.waitAOF == nil:
			return fmt.Errorf("%w: WithDurableGrant needs WAITAOF, and %s%s refused to say whether it has it (COMMAND INFO)", ErrUnsupportedServer, f.server, at)
		case !*f.waitAOF:
			return fmt.Errorf("%w: WithDurableGrant needs WAITAOF, which %s%s does not have (Redis 7.2 or newer, or Valkey, has it)", ErrUnsupportedServer, f.server, at)
		case f.aof == "no":
			return fmt.Errorf("%w: WithDurableGrant needs appendonly yes, and %s%s has AOF off: CONFIG SET appendonly yes (and in its config file)", ErrUnsupportedServer, f.server, at)
		case f.fsync == "always" && f.aof == "yes":
		case f.fsync == "" || f.aof == "":
			return fmt.Errorf("%w: WithDurableGrant: cannot read appendonly and appendfsync on %s%s (CONFIG GET refused), and WAITAOF confirms an fsync only with appendfsync always, or everysec on Redis 8.0 or newer", ErrUnsupportedServer, f.server, at)
		case f.fsync == "no":
			return fmt.Errorf("%w: WithDurableGrant with appendfsync no on %s%s: the server never fsyncs on its own schedule, so WAITAOF cannot confirm a grant; set appendfsync always or everysec", ErrUnsupportedServer, f.server, at)
		case serverreq.EarlyWaitAOF(f.server):
			return fmt.Errorf("%w: WithDurableGrant with appendfsync %s on %s%s: it answers WAITAOF before the fsync under everysec (the bug Redis 8.0 fixed, redis/redis#13793), so a crash could still lose a grant it confirmed; set appendfsync always, which keeps every grant without the option, or run Redis 8.0 or newer",
				ErrUnsupportedServer, f.fsync, f.server, at)
		}
	}
	return nil
}
