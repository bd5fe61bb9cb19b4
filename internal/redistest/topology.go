package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Timing shared by the Sentinel and Cluster setups. Every wait in this file
// and its siblings polls: Sentinel and Cluster publish their state through
// periodic gossip (hello messages every 2 s, INFO every 1-10 s, cluster
// pings), so there is no event to block on, and a fixed sleep is either too
// short on a loaded 2-core machine or wastes seconds everywhere else.
const (
	// DefaultWait is the hard limit of every wait of a setup, unless
	// WithWait changes it. It is generous because a failover on a loaded
	// 2-core machine takes a few seconds and gossip rounds are seconds apart;
	// a wait that hits it is a bug to look at, not a slow machine.
	DefaultWait = 30 * time.Second

	pollEvery = 50 * time.Millisecond // short: loopback probes cost little
	// probeTime bounds each single probe of a node. A SIGSTOPped node still
	// accepts connections (the kernel completes the handshake) but never
	// answers, so without it one paused node would stall a whole wait.
	probeTime = time.Second
)

// Option configures StartSentinel and StartCluster.
type Option func(*config)

type config struct {
	replicas   int // replicas of the Sentinel primary, or per Cluster primary
	serverArgs []string
	masterName string
	wait       time.Duration
}

func newConfig(opts []Option) config {
	c := config{replicas: 1, masterName: "mymaster", wait: DefaultWait}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// WithReplicas sets how many replicas the Sentinel primary gets, or how many
// replicas each Cluster primary gets (--cluster-replicas). The default is 1:
// enough for one failover, and every extra process costs CPU on a small
// machine.
func WithReplicas(n int) Option { return func(c *config) { c.replicas = n } }

// WithServerArgs appends arguments to the command line of every data node
// (primaries and replicas, not the sentinels), for example
// WithServerArgs("--min-replicas-to-write", "1", "--min-replicas-max-lag", "1").
// They are kept for Server.Restart.
//
// With min-replicas-to-write, give the Sentinel setup WithReplicas(2): with
// one replica, the primary promoted by a failover has no replica until the
// sentinels turn the old primary into one (about 10 s after a manual
// failover, never while it stays dead), and refuses every write with
// NOREPLICAS until then.
func WithServerArgs(args ...string) Option {
	return func(c *config) { c.serverArgs = append(c.serverArgs, args...) }
}

// WithMasterName sets the name the sentinels monitor (default "mymaster").
func WithMasterName(name string) Option { return func(c *config) { c.masterName = name } }

// WithWait sets the hard limit of each wait during start-up and of the
// waits done by methods such as Failover (default DefaultWait). The
// methods' context can shorten it further.
func WithWait(d time.Duration) Option { return func(c *config) { c.wait = d } }

// waitFor calls check every pollEvery until it reports done, ctx ends or
// limit passes. check returns a short description of what it saw; the last
// one goes into the error so that a failed wait says both what it waited for
// and how far it got.
func waitFor(ctx context.Context, limit time.Duration, what string, check func(ctx context.Context) (done bool, seen string)) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	last := "nothing yet"
	for {
		done, seen := check(ctx)
		if done {
			return nil
		}
		if seen != "" {
			last = seen
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: waited %v for %s: %w (last seen: %s)",
				time.Since(start).Round(time.Millisecond), what, ctx.Err(), last)
		case <-time.After(pollEvery):
		}
	}
}

// probeClient returns a client for one admin command. Retries are off so a
// probe of a dead node fails at once instead of hiding in go-redis retries,
// and RESP2 keeps reply shapes the same for servers and sentinels.
func probeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		Protocol:              2,
		DisableIdentity:       true,
		MaxRetries:            -1,
		PoolSize:              1,
		DialTimeout:           time.Second,
		ContextTimeoutEnabled: true,
	})
}

// do runs one command on addr over a fresh connection, within probeTime.
func do(ctx context.Context, addr string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTime)
	defer cancel()
	c := probeClient(addr)
	defer c.Close()
	return c.Do(ctx, args...).Result()
}

// doString runs one command whose reply is a bulk or status string.
func doString(ctx context.Context, addr string, args ...any) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTime)
	defer cancel()
	c := probeClient(addr)
	defer c.Close()
	return c.Do(ctx, args...).Text()
}

// alive reports whether the node at addr answers PING within probeTime:
// false for a killed or paused node.
func alive(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, probeTime)
	defer cancel()
	return Ping(ctx, addr) == nil
}

// infoField returns one field of an INFO or CLUSTER INFO reply.
func infoField(info, key string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return ""
}

// role returns "master" or "slave" as the node at addr reports it.
func role(ctx context.Context, addr string) (string, error) {
	info, err := doString(ctx, addr, "INFO", "replication")
	if err != nil {
		return "", err
	}
	return infoField(info, "role"), nil
}

// replicaLinkUp reports whether the node at addr is a replica whose initial
// sync finished: master_link_status turns up only after the RDB is loaded.
func replicaLinkUp(ctx context.Context, addr string) (bool, string) {
	info, err := doString(ctx, addr, "INFO", "replication")
	if err != nil {
		return false, fmt.Sprintf("%s: %v", addr, err)
	}
	r, link := infoField(info, "role"), infoField(info, "master_link_status")
	if r != "slave" || link != "up" {
		return false, fmt.Sprintf("%s: role=%s master_link_status=%s", addr, r, link)
	}
	return true, ""
}

// dataNodeArgs returns the command line of a data node of a topology:
// logging to a file in dir, so a failed start-up can show what the node
// said, and repl-diskless-sync-delay 0, because Redis 7 otherwise waits 5 s
// for more replicas before it starts streaming the first full sync, which
// would make every setup 5 s slower. extra comes last so a test can override
// both.
func dataNodeArgs(dir string, extra []string) []string {
	return append([]string{"--logfile", logFile(dir), "--repl-diskless-sync-delay", "0"}, extra...)
}

// findServer returns the server listening on addr, or nil.
func findServer(servers []*Server, addr string) *Server {
	for _, s := range servers {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// logFile is where a data node of a topology writes its log.
func logFile(dir string) string { return filepath.Join(dir, "redis.log") }

// logTail returns the last lines of a log file, for failure messages.
func logTail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// failWithLogs logs the tail of each log and fails the test: a topology that
// does not come up is hard to understand from one error line.
func failWithLogs(t testing.TB, logs []string, format string, args ...any) {
	t.Helper()
	dumpLogs(t, logs, 30)
	t.Fatalf(format, args...)
}

func dumpLogs(t testing.TB, logs []string, lines int) {
	t.Helper()
	for _, l := range logs {
		t.Logf("--- %s\n%s", l, logTail(l, lines))
	}
}
