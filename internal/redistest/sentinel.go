package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel timing. down-after-milliseconds 1000 makes a killed primary
// subjectively down after 1 s; failover-timeout 2000 bounds a stuck failover
// and, because a sentinel will not start a new failover of the same primary
// within 2×failover-timeout of the previous one, keeps back-to-back
// failovers in one test only about 4 s apart. Measured on a 2-core machine:
// KillPrimary to WaitNewPrimary about 2.3–3.5 s, Failover about 1.2 s.
const (
	sentinelDownAfterMs       = 1000
	sentinelFailoverTimeoutMs = 2000
	sentinelQuorum            = 2
	sentinelCount             = 3
)

// SentinelSetup is one primary, its replicas and three sentinels that
// monitor it, all on 127.0.0.1 and all stopped in t.Cleanup.
type SentinelSetup struct {
	MasterName    string
	Primary       *Server   // the primary at start; see CurrentPrimary after a failover
	Replicas      []*Server // the replicas at start
	SentinelAddrs []string

	wait time.Duration
	logs []string

	mu     sync.Mutex
	killed string // the address KillPrimary killed, until a new primary is confirmed
	last   string // the primary address last confirmed
}

// StartSentinel starts a primary, WithReplicas replicas (default 1) and three
// redis-sentinel processes (quorum 2), and returns once the setup is usable
// for a failover: every replica finished its initial sync, and every
// sentinel knows the primary, every replica and the two other sentinels and
// can reach its quorum. Waiting for all of that up front matters because
// sentinels learn about each other only from hello messages every 2 s: a
// SENTINEL FAILOVER sent earlier fails with NOGOODSLAVE, and a primary killed
// earlier may never be failed over. Start-up takes about 2–3 s.
//
// Replicas are attached with REPLICAOF after they start rather than with
// --replicaof on their command line, so Server.Restart of any data node
// gives an empty node that starts as a primary, as a crashed Redis without
// persistence would; the sentinels turn it back into a replica on their own
// schedule, about 10 s later here.
func StartSentinel(t testing.TB, opts ...Option) *SentinelSetup {
	t.Helper()
	cfg := newConfig(opts)
	if cfg.replicas < 1 {
		t.Fatalf("redistest: StartSentinel needs at least one replica, got %d", cfg.replicas)
	}
	ctx := context.Background()
	var logs []string
	launch := func(what string) *Server {
		t.Helper()
		dir := t.TempDir()
		logs = append(logs, logFile(dir))
		s, err := Launch(ctx, dir, dataNodeArgs(dir, cfg.serverArgs)...)
		if errors.Is(err, ErrNoRedis) {
			t.Fatalf("%v", err)
		}
		if err != nil {
			failWithLogs(t, logs, "redistest: start %s: %v", what, err)
		}
		t.Cleanup(s.Kill)
		return s
	}

	st := &SentinelSetup{MasterName: cfg.masterName, wait: cfg.wait}
	st.Primary = launch("primary")
	st.last = st.Primary.Addr
	for i := range cfg.replicas {
		r := launch(fmt.Sprintf("replica %d", i))
		if _, err := do(ctx, r.Addr, "REPLICAOF", "127.0.0.1", st.Primary.Port); err != nil {
			failWithLogs(t, logs, "redistest: REPLICAOF on %s: %v", r.Addr, err)
		}
		st.Replicas = append(st.Replicas, r)
	}
	// Sentinels read the replica list from the primary's INFO, which they
	// refresh only every 10 s: start them after the replicas are attached
	// so that their first INFO already lists them.
	for _, r := range st.Replicas {
		err := waitFor(ctx, cfg.wait, "replica "+r.Addr+" to finish its initial sync (master_link_status:up)",
			func(ctx context.Context) (bool, string) { return replicaLinkUp(ctx, r.Addr) })
		if err != nil {
			failWithLogs(t, logs, "%v", err)
		}
	}

	for i := range sentinelCount {
		dir := t.TempDir()
		sp, err := startSentinelProc(ctx, dir, cfg.masterName, st.Primary.Port)
		if err != nil {
			failWithLogs(t, logs, "redistest: start sentinel %d: %v", i, err)
		}
		logs = append(logs, sp.log)
		t.Cleanup(sp.kill)
		st.SentinelAddrs = append(st.SentinelAddrs, sp.addr)
	}

	if err := st.waitReady(ctx); err != nil {
		failWithLogs(t, logs, "%v", err)
	}
	st.logs = logs
	return st
}

// DumpLogs writes the last lines of every node's and sentinel's log to the
// test log: the sentinels' +sdown, +odown, +switch-master and
// -failover-abort-* events explain a failover that did not happen.
func (st *SentinelSetup) DumpLogs(t testing.TB, lines int) {
	t.Helper()
	dumpLogs(t, st.logs, lines)
}

// waitReady waits until every sentinel sees the primary, all replicas and
// the other sentinels, and confirms it can authorize a failover.
func (st *SentinelSetup) waitReady(ctx context.Context) error {
	for _, addr := range st.SentinelAddrs {
		err := waitFor(ctx, st.wait, fmt.Sprintf("sentinel %s to see primary %s, %d replica(s) with link ok, %d other sentinels and quorum",
			addr, st.Primary.Addr, len(st.Replicas), sentinelCount-1),
			func(ctx context.Context) (bool, string) {
				ctx, cancel := context.WithTimeout(ctx, probeTime)
				defer cancel()
				sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1, DisableIdentity: true, ContextTimeoutEnabled: true})
				defer sc.Close()
				m, err := sc.GetMasterAddrByName(ctx, st.MasterName).Result()
				if err != nil {
					return false, err.Error()
				}
				if got := net.JoinHostPort(m[0], m[1]); got != st.Primary.Addr {
					return false, "primary " + got
				}
				reps, err := sc.Replicas(ctx, st.MasterName).Result()
				if err != nil {
					return false, err.Error()
				}
				ok := 0
				var seen []string
				for _, r := range reps {
					seen = append(seen, fmt.Sprintf("%s flags=%s link=%s", r["name"], r["flags"], r["master-link-status"]))
					if r["flags"] == "slave" && r["master-link-status"] == "ok" {
						ok++
					}
				}
				if ok < len(st.Replicas) {
					return false, fmt.Sprintf("replicas %v", seen)
				}
				others, err := sc.Sentinels(ctx, st.MasterName).Result()
				if err != nil {
					return false, err.Error()
				}
				if len(others) < sentinelCount-1 {
					return false, fmt.Sprintf("%d other sentinels", len(others))
				}
				if q, err := sc.CkQuorum(ctx, st.MasterName).Result(); err != nil {
					return false, fmt.Sprintf("CKQUORUM: %v %s", err, q)
				}
				return true, ""
			})
		if err != nil {
			return err
		}
	}
	return nil
}

// FailoverClient returns a go-redis failover client for the setup, closed in
// t.Cleanup. ContextTimeoutEnabled makes reads honor the context's deadline.
func (st *SentinelSetup) FailoverClient(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            st.MasterName,
		SentinelAddrs:         slices.Clone(st.SentinelAddrs),
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// AgreedPrimary returns the primary every sentinel reports, and false when
// one does not answer or they disagree (a failover under way).
func (st *SentinelSetup) AgreedPrimary(ctx context.Context) (string, bool) {
	agreed := ""
	for _, addr := range st.SentinelAddrs {
		got, err := st.primaryAt(ctx, addr)
		if err != nil || (agreed != "" && got != agreed) {
			return "", false
		}
		agreed = got
	}
	return agreed, agreed != ""
}

// CurrentPrimary returns the primary address most sentinels report now, or
// "" if no sentinel answers. Sentinels can disagree for a moment during a
// failover: they learn the new primary from each other's hello messages.
func (st *SentinelSetup) CurrentPrimary(ctx context.Context) string {
	votes := map[string]int{}
	best := ""
	for _, addr := range st.SentinelAddrs {
		got, err := st.primaryAt(ctx, addr)
		if err != nil {
			continue
		}
		votes[got]++
		if best == "" || votes[got] > votes[best] {
			best = got
		}
	}
	return best
}

// Node returns the data node (primary or replica at start) listening on
// addr, or nil: with CurrentPrimary it finds the process to Kill, Pause or
// Restart after a failover.
func (st *SentinelSetup) Node(addr string) *Server {
	return findServer(append([]*Server{st.Primary}, st.Replicas...), addr)
}

func (st *SentinelSetup) primaryAt(ctx context.Context, sentinel string) (string, error) {
	res, err := do(ctx, sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", st.MasterName)
	if err != nil {
		return "", err
	}
	parts, ok := res.([]any)
	if !ok || len(parts) != 2 {
		return "", fmt.Errorf("redistest: sentinel %s answered %v", sentinel, res)
	}
	return net.JoinHostPort(fmt.Sprint(parts[0]), fmt.Sprint(parts[1])), nil
}

// Failover runs SENTINEL FAILOVER and waits until every sentinel reports a
// new primary, no sentinel has a failover in progress, and the new primary
// answers as role master. It returns the new primary's address.
//
// The old primary is not waited for: the sentinels turn it into a replica
// only on a later INFO round, about 10 s after the switch, and until then it
// still accepts writes from clients that kept a connection to it. A second
// Failover in that window retries its NOGOODSLAVE answer until the old
// primary is a replica again or the wait runs out.
func (st *SentinelSetup) Failover(ctx context.Context) (string, error) {
	old := st.CurrentPrimary(ctx)
	if old == "" {
		return "", errors.New("redistest: Failover: no sentinel reports a primary")
	}
	// NOGOODSLAVE (no replica known to be in sync) and INPROG (a previous
	// failover has not ended on that sentinel) are retried: both clear up
	// within a gossip round or two.
	err := waitFor(ctx, st.wait, "a sentinel to accept SENTINEL FAILOVER "+st.MasterName,
		func(ctx context.Context) (bool, string) {
			var seen []string
			for _, addr := range st.SentinelAddrs {
				_, err := do(ctx, addr, "SENTINEL", "FAILOVER", st.MasterName)
				if err == nil {
					return true, ""
				}
				seen = append(seen, addr+": "+err.Error())
			}
			return false, strings.Join(seen, "; ")
		})
	if err != nil {
		return "", err
	}
	return st.waitNewPrimary(ctx, old)
}

// KillPrimary kills, with SIGKILL, the data node the sentinels report as
// primary now (falling back to the last one confirmed if none answers) and
// returns its address. The sentinels fail over on their own: call
// WaitNewPrimary.
func (st *SentinelSetup) KillPrimary() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addr := st.CurrentPrimary(ctx)
	st.mu.Lock()
	if addr == "" {
		addr = st.last
	}
	st.killed = addr
	st.mu.Unlock()
	if s := st.Node(addr); s != nil {
		s.Kill()
	}
	return addr
}

// WaitNewPrimary waits until every sentinel reports a primary other than the
// one KillPrimary killed last (or, without a KillPrimary since the last
// confirmed primary, other than that one: so it also serves after Pause of
// the primary), no sentinel has a failover in progress, and the new primary
// answers as role master. Detection takes down-after-milliseconds (1 s), and
// a sentinel does not start a failover of the same primary within
// 2×failover-timeout (4 s) of the previous one.
func (st *SentinelSetup) WaitNewPrimary(ctx context.Context) (string, error) {
	st.mu.Lock()
	old := st.killed
	if old == "" {
		old = st.last
	}
	st.mu.Unlock()
	return st.waitNewPrimary(ctx, old)
}

func (st *SentinelSetup) waitNewPrimary(ctx context.Context, old string) (string, error) {
	var primary string
	err := waitFor(ctx, st.wait, "every sentinel to report a new primary (not "+old+") with its failover ended, and the new primary to answer as role master",
		func(ctx context.Context) (bool, string) {
			var seen []string
			agreed := ""
			for _, s := range st.SentinelAddrs {
				got, err := st.primaryAt(ctx, s)
				if err != nil {
					return false, s + ": " + err.Error()
				}
				seen = append(seen, s+" says "+got)
				if got == old || (agreed != "" && got != agreed) {
					return false, strings.Join(seen, ", ")
				}
				agreed = got
				// The leader already reports the promoted replica while it
				// still reconfigures the other replicas; a SENTINEL FAILOVER
				// sent then is refused with INPROG, and the other replicas
				// may still follow the old primary. Wait for the end.
				flags, err := st.masterFlags(ctx, s)
				if err != nil || strings.Contains(flags, "failover") {
					return false, fmt.Sprintf("%s: master flags %q %v", s, flags, err)
				}
			}
			if r, err := role(ctx, agreed); err != nil || r != "master" {
				return false, fmt.Sprintf("%s: role %q %v", agreed, r, err)
			}
			primary = agreed
			return true, ""
		})
	if err != nil {
		return "", err
	}
	st.mu.Lock()
	st.last, st.killed = primary, ""
	st.mu.Unlock()
	return primary, nil
}

// masterFlags returns the flags field of SENTINEL MASTER on one sentinel.
func (st *SentinelSetup) masterFlags(ctx context.Context, sentinel string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTime)
	defer cancel()
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel, Protocol: 2, MaxRetries: -1, DisableIdentity: true, ContextTimeoutEnabled: true})
	defer sc.Close()
	m, err := sc.Master(ctx, st.MasterName).Result()
	if err != nil {
		return "", err
	}
	return m["flags"], nil
}

// sentinelProc is one redis-sentinel process.
type sentinelProc struct {
	addr string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startSentinelProc writes a sentinel config into dir and starts
// redis-sentinel on it. Sentinel insists on a writable config file (it
// rewrites it with its id and everything it learns), so the config cannot be
// given on the command line alone; the port is therefore in the file, and a
// port taken between FreePort and the bind is retried with a new file.
func startSentinelProc(ctx context.Context, dir, name string, primaryPort int) (*sentinelProc, error) {
	bin, err := lookPath(func(f Flavor) string { return f.Sentinel })
	var args []string
	if err != nil {
		// Some packages ship only the server, which runs as a sentinel
		// with --sentinel (Debian's valkey-server without valkey-sentinel).
		if bin, err = ServerBinary(); err != nil {
			return nil, err
		}
		args = []string{"--sentinel"}
	}
	var lastErr error
	for range 3 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %q
logfile ""
sentinel resolve-hostnames no
sentinel announce-ip 127.0.0.1
sentinel monitor %s 127.0.0.1 %d %d
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s %d
sentinel parallel-syncs %s 1
`, port, dir, name, primaryPort, sentinelQuorum, name, sentinelDownAfterMs, name, sentinelFailoverTimeoutMs, name)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return nil, fmt.Errorf("redistest: write sentinel config: %w", err)
		}
		sp := &sentinelProc{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), log: filepath.Join(dir, "sentinel.log")}
		if lastErr = sp.start(ctx, bin, append([]string{conf}, args...)); lastErr == nil {
			return sp, nil
		}
	}
	return nil, lastErr
}

func (sp *sentinelProc) start(ctx context.Context, bin string, args []string) error {
	logf, err := os.Create(sp.log)
	if err != nil {
		return fmt.Errorf("redistest: create sentinel log: %w", err)
	}
	defer logf.Close() // the child has its own copy
	cmd := exec.Command(bin, args...)
	// As in server.go: kill the sentinel if the test binary dies without
	// cleanup, so no orphan keeps its port or fails over someone else's
	// server later.
	cmd.SysProcAttr = ChildAttr()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start %s: %w", bin, err)
	}
	sp.cmd, sp.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(sp.done)
	}()
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		if Ping(wait, sp.addr) == nil {
			return nil
		}
		select {
		case <-sp.done:
			return fmt.Errorf("redistest: sentinel on %s exited at start: %s", sp.addr, logTail(sp.log, 5))
		case <-wait.Done():
			sp.kill()
			return fmt.Errorf("redistest: sentinel on %s did not answer PING: %w", sp.addr, wait.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// kill stops the sentinel with SIGKILL and waits for it to exit.
func (sp *sentinelProc) kill() {
	if sp.cmd == nil || sp.cmd.Process == nil {
		return
	}
	_ = sp.cmd.Process.Kill()
	<-sp.done
}
