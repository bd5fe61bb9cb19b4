package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// doctor runs `dlock doctor -o json` with conn (connection flags) and returns
// the exit code and the report.
func doctor(t *testing.T, conn []string, env ...string) (int, doctorReport, result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := command(ctx, nil, append(conn, "doctor", "-o", "json", "--pings", "20")...)
	cmd.Env = append(cmd.Env, env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	_ = cmd.Run()
	r := result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
	var rep doctorReport
	if r.code == exitOK || r.code == exitCheckFailed {
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("doctor %v: exit %d, output not JSON: %v\n%s%s", conn, r.code, err, r.stdout, r.stderr)
		}
	}
	return r.code, rep, r
}

// only returns the findings of check.
func only(rep doctorReport, check string) []finding {
	var out []finding
	for _, f := range rep.Checks {
		if f.Check == check {
			out = append(out, f)
		}
	}
	return out
}

// want asserts the one finding of check has status and every part in its
// message or fix.
func want(t *testing.T, rep doctorReport, check, status string, parts ...string) {
	t.Helper()
	fs := only(rep, check)
	if len(fs) != 1 {
		t.Fatalf("%d %s finding(s), want 1: %+v", len(fs), check, rep.Checks)
	}
	wantFinding(t, fs[0], status, parts...)
}

func wantFinding(t *testing.T, f finding, status string, parts ...string) {
	t.Helper()
	if f.Status != status {
		t.Errorf("%s: status %s, want %s: %s (fix: %s)", f.Check, f.Status, status, f.Message, f.Fix)
	}
	for _, p := range parts {
		if !strings.Contains(f.Message+" fix: "+f.Fix, p) {
			t.Errorf("%s: %q (fix: %q) does not say %q", f.Check, f.Message, f.Fix, p)
		}
	}
}

func addr(s *redistest.Server) []string { return []string{"--addr", s.Addr} }

// A server set up as dlock wants: every check ok, exit 0.
func TestDoctorGoodServer(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	// A lock, a waiter line and a fence counter for the count.
	if err := srv.Client(t).HSet(context.Background(), "dlock:{held}", "token", "x").Err(); err != nil {
		t.Fatal(err)
	}
	code, rep, r := doctor(t, addr(srv))
	if code != exitOK || rep.Fail != 0 || rep.Warn != 0 {
		t.Fatalf("exit %d, %d fail, %d warn; want 0, 0, 0:\n%s%s", code, rep.Fail, rep.Warn, r.stdout, r.stderr)
	}
	if rep.Topology != "standalone" {
		t.Errorf("topology %q, want standalone", rep.Topology)
	}
	// The server named by what it is, with its own kind's minimum.
	if f, _ := redistest.CurrentFlavor(); f.Name == "valkey" {
		want(t, rep, "version", statusOK, "Valkey 8", "(redis_version 7.2.4)", "dlock needs Valkey 7.2 or newer")
	} else {
		want(t, rep, "version", statusOK, "Redis 7", "dlock needs Redis 5.0 or newer")
	}
	want(t, rep, "maxmemory-policy", statusOK, "noeviction")
	want(t, rep, "persistence", statusOK, "appendfsync always")
	want(t, rep, "replication", statusOK, "without replicas")
	want(t, rep, "latency", statusOK, "p50", "p99", "over 20 PINGs")
	want(t, rep, "locks", statusOK, "1 lock(s) held", `prefix "dlock:"`)
	want(t, rep, "go-redis", statusOK, "ContextTimeoutEnabled")
	if len(only(rep, "clock-skew")) != 0 {
		t.Errorf("a lone server has no clock to compare with, yet: %+v", only(rep, "clock-skew"))
	}
}

// The settings that endanger locks, each on a server of its own: the line
// that names it, its fix, and the exit status.
func TestDoctorBadSettings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		check  string
		status string
		parts  []string
	}{
		{"allkeys-lru", []string{"--maxmemory-policy", "allkeys-lru"}, "maxmemory-policy", statusFail,
			[]string{"allkeys-lru evicts any key", "second client", "CONFIG SET maxmemory-policy noeviction", "maxmemory is 0"}},
		{"volatile-lru", []string{"--maxmemory-policy", "volatile-lru", "--maxmemory", "100mb"}, "maxmemory-policy", statusFail,
			[]string{"volatile-lru evicts keys that have a TTL", "CONFIG SET maxmemory-policy noeviction"}},
		{"no persistence", nil, "persistence", statusWarn,
			[]string{"no AOF, no RDB snapshots", "restart loses every lock", "fences keep growing", "appendfsync always"}},
		{"rdb only", []string{"--save", "3600 1"}, "persistence", statusWarn,
			[]string{`RDB snapshots only (save "3600 1")`, "appendonly yes"}},
		{"everysec", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, "persistence", statusWarn,
			[]string{"appendfsync everysec", "up to a second", "delayed restart"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.args...)
			code, rep, r := doctor(t, addr(srv))
			want(t, rep, tc.check, tc.status, tc.parts...)
			wantCode := exitOK
			if tc.status == statusFail {
				wantCode = exitCheckFailed
			}
			if code != wantCode || rep.Fail != map[bool]int{true: 1}[wantCode != exitOK] {
				t.Fatalf("exit %d with %d fail, want %d:\n%s%s", code, rep.Fail, wantCode, r.stdout, r.stderr)
			}
		})
	}
}

// The text form: one line a check, starting with its status and name, the
// fix on the next line, a summary, and exit 6 on a fail.
func TestDoctorText(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lfu")
	r := dlockRun(t, srv, "doctor", "--pings", "5")
	if r.code != exitCheckFailed {
		t.Fatalf("exit %d, want %d: %s%s", r.code, exitCheckFailed, r.stdout, r.stderr)
	}
	lines := strings.Split(r.stdout, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "fail  maxmemory-policy  "+srv.Addr+": maxmemory-policy allkeys-lfu") {
			if i+1 >= len(lines) || !strings.Contains(lines[i+1], "fix: CONFIG SET maxmemory-policy noeviction") {
				t.Fatalf("no fix after the fail line:\n%s", r.stdout)
			}
			if !strings.Contains(r.stdout, "1 fail\n") || !strings.Contains(r.stderr, "1 check(s) failed") {
				t.Fatalf("no summary of the fail:\n%s%s", r.stdout, r.stderr)
			}
			return
		}
	}
	t.Fatalf("no fail line for maxmemory-policy:\n%s", r.stdout)
}

// Connected to a replica: fail. The primary with a replica and no
// min-replicas-to-write: warn; with more than it has: fail; with one: ok.
// With replicas, the clocks are compared.
func TestDoctorReplication(t *testing.T) {
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	prdb := primary.Client(t)
	waitFor(t, "the replica attached", func() bool {
		return strings.Contains(prdb.Info(context.Background(), "replication").Val(), "connected_slaves:1")
	})

	code, rep, r := doctor(t, addr(replica))
	want(t, rep, "replication", statusFail, "is a replica of 127.0.0.1:"+strconv.Itoa(primary.Port), "READONLY", "--master-name")
	if code != exitCheckFailed {
		t.Fatalf("on a replica: exit %d, want %d:\n%s", code, exitCheckFailed, r.stdout)
	}

	code, rep, _ = doctor(t, addr(primary))
	want(t, rep, "replication", statusWarn, "1 replica(s), min-replicas-to-write 0", "two holders", "min-replicas-to-write 1", "WithReplicas")
	want(t, rep, "clock-skew", statusOK, "2 nodes")
	if code != exitOK {
		t.Fatalf("primary without min-replicas-to-write: exit %d, want 0 (a warn)", code)
	}

	ctx := context.Background()
	if err := prdb.ConfigSet(ctx, "min-replicas-to-write", "2").Err(); err != nil {
		t.Fatal(err)
	}
	code, rep, _ = doctor(t, addr(primary))
	want(t, rep, "replication", statusFail, "min-replicas-to-write 2 but 1 replica(s)", "NOREPLICAS")
	if code != exitCheckFailed {
		t.Fatalf("min-replicas-to-write above the replicas: exit %d, want %d", code, exitCheckFailed)
	}

	if err := prdb.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	code, rep, _ = doctor(t, addr(primary))
	want(t, rep, "replication", statusOK, "min-replicas-to-write 1", "min-replicas-max-lag 10s")
	if code != exitOK {
		t.Fatalf("min-replicas-to-write 1: exit %d, want 0", code)
	}
}

// A user that may not run CONFIG or INFO (managed Redis): warn "cannot
// read", never fail.
func TestDoctorRefusedConfig(t *testing.T) {
	srv := redistest.Start(t)
	err := srv.Client(t).Do(context.Background(), "ACL", "SETUSER", "doc", "on", ">s3cret", "~*", "&*", "+@all", "-config", "-info").Err()
	if err != nil {
		t.Fatal(err)
	}
	code, rep, r := doctor(t, append(addr(srv), "--user", "doc"), "DLOCK_PASSWORD=s3cret")
	if code != exitOK || rep.Fail != 0 {
		t.Fatalf("exit %d with %d fail, want 0 and none:\n%s%s", code, rep.Fail, r.stdout, r.stderr)
	}
	want(t, rep, "version", statusWarn, "cannot read the server's version", "NOPERM")
	want(t, rep, "maxmemory-policy", statusWarn, "cannot read maxmemory-policy", "NOPERM", "noeviction")
	want(t, rep, "persistence", statusWarn, "cannot read appendonly")
	want(t, rep, "replication", statusWarn, "cannot read the role")
}

func TestDoctorUnreachableAndUsage(t *testing.T) {
	closed, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	for _, conn := range [][]string{{}, {"--cluster"}} {
		args := append(conn, "--addr", "127.0.0.1:"+strconv.Itoa(closed), "--timeout", "500ms", "doctor")
		r := dlockRun(t, nil, args...)
		if r.code != exitRedis || !strings.Contains(r.stderr, "cannot reach Redis") {
			t.Fatalf("dlock %q: exit %d, want %d: %s", args, r.code, exitRedis, r.stderr)
		}
	}
	for _, args := range [][]string{{"doctor", "x"}, {"doctor", "--pings", "0"}, {"doctor", "-o", "yaml"}, {"doctor", "--scan-limit", "0"}} {
		if r := dlockRun(t, nil, args...); r.code != exitUsage {
			t.Errorf("dlock %q: exit %d, want %d: %s", args, r.code, exitUsage, r.stderr)
		}
	}
}

// A Cluster of three primaries with a replica each: a line per primary for
// the per-node checks, cluster_state ok on each, the clocks of all six
// nodes compared.
func TestDoctorCluster(t *testing.T) {
	cs := redistest.StartCluster(t)
	var conn []string
	for _, a := range cs.Addrs {
		conn = append(conn, "--addr", a)
	}
	code, rep, r := doctor(t, conn)
	if code != exitOK || rep.Topology != "cluster" {
		t.Fatalf("exit %d, topology %q; want 0, cluster:\n%s%s", code, rep.Topology, r.stdout, r.stderr)
	}
	for _, check := range []string{"version", "cluster", "latency", "maxmemory-policy", "replication"} {
		fs := only(rep, check)
		if len(fs) != 3 {
			t.Fatalf("%d %s line(s), want one per primary: %+v", len(fs), check, fs)
		}
		for i, f := range fs {
			if f.Node != cs.Addrs[i] && !contains(cs.Addrs, f.Node) {
				t.Errorf("%s line for %q, not a primary of %v", check, f.Node, cs.Addrs)
			}
		}
	}
	for _, f := range only(rep, "cluster") {
		wantFinding(t, f, statusOK, "cluster_state ok", "16384 of 16384 slots assigned, 16384 served")
	}
	for _, f := range only(rep, "version") {
		wantFinding(t, f, statusOK, "with the shard channels a Cluster needs")
	}
	for _, f := range only(rep, "replication") {
		wantFinding(t, f, statusWarn, "1 replica(s), min-replicas-to-write 0")
	}
	want(t, rep, "clock-skew", statusOK, "6 nodes")
	want(t, rep, "go-redis", statusOK, "ClusterStateReloadInterval")
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Through Sentinel: each Sentinel names the primary and reaches its quorum.
func TestDoctorSentinel(t *testing.T) {
	st := redistest.StartSentinel(t)
	conn := []string{"--master-name", st.MasterName}
	for _, a := range st.SentinelAddrs {
		conn = append(conn, "--addr", a)
	}
	code, rep, r := doctor(t, conn)
	if code != exitOK || rep.Topology != "sentinel" {
		t.Fatalf("exit %d, topology %q; want 0, sentinel:\n%s%s", code, rep.Topology, r.stdout, r.stderr)
	}
	fs := only(rep, "sentinel")
	if len(fs) != len(st.SentinelAddrs) {
		t.Fatalf("%d sentinel line(s), want %d: %+v", len(fs), len(st.SentinelAddrs), fs)
	}
	for _, f := range fs {
		wantFinding(t, f, statusOK, "primary "+st.Primary.Addr, "OK 3 usable Sentinels")
	}
	want(t, rep, "version", statusOK)
	if f := only(rep, "version")[0]; f.Node != st.Primary.Addr {
		t.Errorf("version checked on %q, want the primary %s", f.Node, st.Primary.Addr)
	}
	want(t, rep, "replication", statusWarn, "1 replica(s), min-replicas-to-write 0")
	want(t, rep, "clock-skew", statusOK, "2 nodes")

	// One Sentinel of the list down: a warn for it, the others still ok.
	closed, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	down := "127.0.0.1:" + strconv.Itoa(closed)
	code, rep, r = doctor(t, append(conn, "--addr", down, "--timeout", "500ms"))
	if code != exitOK {
		t.Fatalf("one Sentinel down: exit %d, want 0:\n%s%s", code, r.stdout, r.stderr)
	}
	var ok, warned int
	for _, f := range only(rep, "sentinel") {
		switch {
		case f.Node == down && f.Status == statusWarn:
			warned++
		case f.Status == statusOK:
			ok++
		}
	}
	if ok != len(st.SentinelAddrs) || warned != 1 {
		t.Fatalf("%d ok and %d warn for the Sentinel down, want %d and 1: %+v", ok, warned, len(st.SentinelAddrs), only(rep, "sentinel"))
	}
}

// The lock count stops at --scan-limit on a big keyspace, and says so.
func TestDoctorScanLimit(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := range 5000 {
		pipe.Set(ctx, "dlock:{n"+strconv.Itoa(i)+"}:fence", i, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	_, rep, _ := doctor(t, append(addr(srv), "--scan-limit", "1000"))
	want(t, rep, "locks", statusWarn, "at least", "stopped after looking at about 1000 keys", "--scan-limit")
	_, rep, _ = doctor(t, addr(srv))
	want(t, rep, "locks", statusOK, "5000 fence counter(s)")
}

// A Cluster with a primary down and no replica to take over: the dead
// primary is a fail, the others report cluster_state fail, exit 6.
func TestDoctorClusterDown(t *testing.T) {
	cs := redistest.StartCluster(t, redistest.WithReplicas(0))
	dead := cs.Addrs[2]
	live := cs.Node(cs.Addrs[0]).Client(t)
	if err := cs.KillNode(dead); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "cluster_state:fail on a live primary", func() bool {
		return strings.Contains(live.ClusterInfo(context.Background()).Val(), "cluster_state:fail")
	})
	code, rep, r := doctor(t, []string{"--addr", cs.Addrs[0], "--addr", cs.Addrs[1], "--timeout", "1s"})
	if code != exitCheckFailed {
		t.Fatalf("exit %d, want %d:\n%s%s", code, exitCheckFailed, r.stdout, r.stderr)
	}
	var sawDead bool
	for _, f := range only(rep, "reachable") {
		sawDead = sawDead || (f.Node == dead && f.Status == statusFail)
	}
	if !sawDead {
		t.Errorf("no reachable fail for the dead primary %s: %+v", dead, rep.Checks)
	}
	fs := only(rep, "cluster")
	if len(fs) != 2 {
		t.Fatalf("%d cluster line(s), want one per live primary: %+v", len(fs), fs)
	}
	for _, f := range fs {
		wantFinding(t, f, statusFail, "cluster_state fail", "redis-cli --cluster check")
	}
}

// durable-grant says whether dlock.WithDurableGrant works: asked of the
// server (COMMAND INFO WAITAOF), on each kind of server whatever the run's.
func TestDoctorDurableGrant(t *testing.T) {
	for _, tc := range []struct {
		flavor string
		args   []string
		parts  []string
	}{
		{"redis", nil, []string{"Redis 7.0", "has no WAITAOF", "WithDurableGrant is refused"}},
		// Every Valkey so far answers WAITAOF early under everysec.
		{"valkey", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, []string{"before the fsync", "redis/redis#13793", "is refused"}},
		{"valkey", []string{"--appendonly", "yes", "--appendfsync", "always"}, []string{"appendfsync always", "WithDurableGrant is accepted"}},
		{"valkey", nil, []string{"WAITAOF, but AOF off", "appendonly is yes"}},
	} {
		srv := redistest.StartFlavor(t, tc.flavor, tc.args...)
		_, rep, r := doctor(t, addr(srv))
		if len(only(rep, "durable-grant")) != 1 {
			t.Fatalf("%s %v: no durable-grant line:\n%s%s", tc.flavor, tc.args, r.stdout, r.stderr)
		}
		want(t, rep, "durable-grant", statusOK, tc.parts...)
		if fix := only(rep, "persistence")[0].Fix; strings.Contains(fix, "WithDurableGrant") {
			// Named only where it would keep its promise: never here.
			t.Errorf("%s %v: the persistence fix offers WithDurableGrant: %s", tc.flavor, tc.args, fix)
		}
	}
}
