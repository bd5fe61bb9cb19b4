package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock/internal/serverreq"
)

const doctorLong = `Check that the Redis dlock connects to (the connection flags, as for every
command) is fit to keep locks, before trusting it with them. Each check
prints one line, ok, warn or fail, and for warn and fail what to do:

  reachable         every primary answers PING (a fail names a dead one)
  version           redis_version against the oldest dlock works with
  maxmemory-policy  noeviction required: any other policy may evict a held
                    lock, and a second client then takes it (two holders)
  persistence       AOF and appendfsync: what a restart does to held locks
                    and fencing tokens
  replication       the role, the replicas, min-replicas-to-write
  sentinel          with --master-name: each Sentinel knows the primary and
                    can reach its quorum (SENTINEL CKQUORUM)
  cluster           in a Cluster: cluster_state and slots served, per primary
  go-redis          the client settings that matter for locks
  latency           p50/p99 of --pings PINGs to each primary
  clock-skew        TIME on every primary and replica, compared: fences
                    restart from a server's clock when a counter is lost
  locks             dlock keys under --prefix (a SCAN bounded by --scan-limit)

A setting the server will not show (CONFIG or INFO refused by an ACL, as
managed Redis often does) is a warn "cannot read", never a fail.

Exit status: 0 when no check failed (warnings included), 6 when one did, 3
when Redis cannot be reached at all, 2 for a usage error.`

// exitCheckFailed is doctor's exit code when a check fails: torture's code
// for violations, since both mean "dlock ran fine and found Redis unsafe".
const exitCheckFailed = exitViolations

// Statuses of a check.
const (
	statusOK   = "ok"
	statusWarn = "warn"
	statusFail = "fail"
)

// finding is one line of doctor.
type finding struct {
	Check   string `json:"check"`
	Status  string `json:"status"`
	Node    string `json:"node,omitempty"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// doctorReport is doctor -o json.
type doctorReport struct {
	Topology string    `json:"topology"` // standalone, sentinel or cluster
	Prefix   string    `json:"prefix"`
	Checks   []finding `json:"checks"`
	OK       int       `json:"ok"`
	Warn     int       `json:"warn"`
	Fail     int       `json:"fail"`
}

type doctorOptions struct {
	output    string
	pings     int
	scanLimit int
}

func newDoctorCmd(a *app) *cobra.Command {
	var o doctorOptions
	cmd := &cobra.Command{
		Use:   "doctor [-o text|json]",
		Short: "Check that Redis is fit to keep locks",
		Long:  doctorLong,
		Example: `  dlock doctor -u redis://redis.internal:6379
  dlock doctor --addr 10.0.0.1:7000 --addr 10.0.0.2:7000 -o json   # a Cluster
  dlock doctor --master-name mymaster --addr s1:26379 --addr s2:26379`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.output); err != nil {
				return err
			}
			if o.pings < 1 || o.pings > 10000 {
				return usagef("--pings %d is not within 1..10000", o.pings)
			}
			if o.scanLimit < 1 {
				return usagef("--scan-limit %d must be at least 1", o.scanLimit)
			}
			return a.doctor(cmd.Context(), o)
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	fs.IntVar(&o.pings, "pings", 50, "PINGs sent to each primary to measure latency")
	fs.IntVar(&o.scanLimit, "scan-limit", 100000, "keys the lock count may look at, per primary, before it stops (SCAN COUNT 1000)")
	return cmd
}

// dataNode is a primary doctor checks.
type dataNode struct {
	addr string
	rdb  redis.Cmdable
}

// nodeFacts is what one primary said, in one round trip; an error is the
// server's refusal (or a failure) for that one item.
type nodeFacts struct {
	info    map[string]string // the fields of INFO's default sections
	infoErr error
	config  map[string]string // CONFIG GET answers
	confErr map[string]error
}

var doctorConfig = []string{"maxmemory-policy", "maxmemory", "appendonly", "appendfsync", "save", "min-replicas-to-write", "min-replicas-max-lag"}

func (a *app) doctor(ctx context.Context, o doctorOptions) error {
	uo, err := a.conn.options(a.getenv, a.promptPassword)
	if err != nil {
		return err
	}
	rdb := redis.NewUniversalClient(uo)
	defer rdb.Close()
	// Not a PING through a ClusterClient: it may pick a dead primary, which
	// is a finding (reachable), not a reason to stop. The Cluster's slot
	// map, which primaries loads, needs one live node.
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("doctor: cannot reach Redis: %w", err)
		}
	}
	d := &doctorRun{a: a, ctx: ctx, uo: uo, rdb: rdb, o: o}
	d.rep.Prefix = a.conn.prefix
	nodes, err := d.primaries()
	if err != nil {
		return fmt.Errorf("doctor: cannot reach Redis: %w", err)
	}
	nodes = d.reachable(nodes)
	for _, n := range nodes {
		f := gatherFacts(ctx, n.rdb)
		d.checkVersion(n, f)
		d.checkEviction(n, f)
		d.checkPersistence(n, f)
		d.checkReplication(n, f)
	}
	if uo.MasterName != "" {
		d.checkSentinels()
	}
	if d.cluster != nil {
		for _, n := range nodes {
			d.checkClusterNode(n)
		}
	}
	d.checkClient()
	for _, n := range nodes {
		d.checkLatency(n)
	}
	d.checkSkew(nodes)
	d.checkLocks(nodes)

	if err := d.write(a.stdout); err != nil {
		return err
	}
	if d.rep.Fail > 0 {
		return &exitError{code: exitCheckFailed, err: fmt.Errorf("doctor: %d check(s) failed", d.rep.Fail)}
	}
	return nil
}

// doctorRun is one run of doctor: its connection and the findings so far.
type doctorRun struct {
	a       *app
	ctx     context.Context
	uo      *redis.UniversalOptions
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient
	o       doctorOptions
	rep     doctorReport
	// replicas of the primaries, as they announced themselves, for the
	// clock comparison.
	replicas []string
}

func (d *doctorRun) add(check, status, node, msg, fix string) {
	d.rep.Checks = append(d.rep.Checks, finding{Check: check, Status: status, Node: node, Message: msg, Fix: fix})
	switch status {
	case statusOK:
		d.rep.OK++
	case statusWarn:
		d.rep.Warn++
	default:
		d.rep.Fail++
	}
}

// primaries returns the primaries to check: every primary of a Cluster,
// the one a Sentinel names, or the server itself.
func (d *doctorRun) primaries() ([]dataNode, error) {
	switch c := d.rdb.(type) {
	case *redis.ClusterClient:
		d.cluster = c
		d.rep.Topology = "cluster"
		var mu sync.Mutex // ForEachMaster calls fn on every primary at once
		var nodes []dataNode
		err := c.ForEachMaster(d.ctx, func(_ context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			nodes = append(nodes, dataNode{addr: n.Options().Addr, rdb: n})
			return nil
		})
		slices.SortFunc(nodes, func(x, y dataNode) int { return strings.Compare(x.addr, y.addr) })
		return nodes, err
	case *redis.Client:
		if d.uo.MasterName != "" {
			d.rep.Topology = "sentinel"
			addr := "primary of " + d.uo.MasterName
			for _, sa := range d.uo.Addrs { // the first Sentinel that answers
				s := d.sentinelClient(sa)
				got, err := d.sentinelPrimary(s)
				_ = s.Close()
				if err == nil {
					addr = got
					break
				}
			}
			return []dataNode{{addr: addr, rdb: c}}, nil
		}
		d.rep.Topology = "standalone"
		return []dataNode{{addr: c.Options().Addr, rdb: c}}, nil
	}
	return nil, fmt.Errorf("unexpected client %T", d.rdb)
}

// reachable returns the nodes that answer PING, and fails the others: a
// primary of a Cluster that is down serves none of its slots' locks.
func (d *doctorRun) reachable(nodes []dataNode) []dataNode {
	var up []dataNode
	for _, n := range nodes {
		if err := n.rdb.Ping(d.ctx).Err(); err != nil {
			d.add("reachable", statusFail, n.addr, "this primary does not answer PING: "+err.Error()+"; the locks it serves can be neither taken nor renewed",
				"bring it back, or let its replica take over")
			continue
		}
		up = append(up, n)
	}
	return up
}

// gatherFacts asks one server for everything the checks read, in one
// pipeline. A refused command is recorded, not fatal.
func gatherFacts(ctx context.Context, rdb redis.Cmdable) nodeFacts {
	pipe := rdb.Pipeline()
	// INFO without a section: its default sections hold all we read, and a
	// server older than 7.0 refuses several sections in one INFO.
	info := pipe.Info(ctx)
	confs := make([]*redis.MapStringStringCmd, len(doctorConfig))
	for i, p := range doctorConfig {
		confs[i] = pipe.ConfigGet(ctx, p)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	f := nodeFacts{info: map[string]string{}, config: map[string]string{}, confErr: map[string]error{}, infoErr: info.Err()}
	for line := range strings.Lines(info.Val()) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			f.info[k] = v
		}
	}
	for i, p := range doctorConfig {
		if v, ok := confs[i].Val()[p]; ok && confs[i].Err() == nil {
			f.config[p] = v
		} else {
			err := confs[i].Err()
			if err == nil {
				err = errors.New("not in the reply")
			}
			f.confErr[p] = err
		}
	}
	return f
}

func (d *doctorRun) checkVersion(n dataNode, f nodeFacts) {
	version := f.info["redis_version"]
	minV, why, what := serverreq.Min, serverreq.WhyMin, "dlock needs"
	if d.cluster != nil {
		minV, why, what = serverreq.MinCluster, serverreq.WhyMinCluster, "a Redis Cluster needs"
	}
	need := fmt.Sprintf("%s %d.%d or newer", what, minV[0], minV[1])
	v, ok := serverreq.Parse(version)
	switch {
	case version == "":
		d.add("version", statusWarn, n.addr, "cannot read redis_version ("+cannotRead(f.infoErr)+"); "+need,
			"allow INFO to the user dlock connects as, or check the version with the provider")
	case !ok:
		d.add("version", statusWarn, n.addr, fmt.Sprintf("redis_version %q is not a version dlock can compare; %s", version, need), "")
	case serverreq.Older(v, minV):
		d.add("version", statusFail, n.addr, fmt.Sprintf("redis_version %s; %s (%s)", version, need, why),
			fmt.Sprintf("upgrade Redis to %d.%d or newer", minV[0], minV[1]))
	default:
		d.add("version", statusOK, n.addr, fmt.Sprintf("redis_version %s; %s", version, need), "")
	}
}

// cannotRead says why a setting could not be read.
func cannotRead(err error) string {
	if err == nil {
		return "not shown"
	}
	return "refused: " + strings.TrimSpace(err.Error())
}

func (d *doctorRun) checkEviction(n dataNode, f nodeFacts) {
	policy, ok := f.config["maxmemory-policy"]
	if !ok {
		// Managed Redis often refuses CONFIG but shows the policy in INFO.
		policy, ok = f.info["maxmemory_policy"]
	}
	if !ok {
		d.add("maxmemory-policy", statusWarn, n.addr, "cannot read maxmemory-policy (CONFIG GET "+cannotRead(f.confErr["maxmemory-policy"])+"; not in INFO memory either)",
			"make sure it is noeviction (redis.conf or the provider's parameter group): any other policy may evict held locks")
		return
	}
	risk, risky := serverreq.EvictionRisk(policy)
	if !risky {
		d.add("maxmemory-policy", statusOK, n.addr, "noeviction: a full Redis refuses writes, so acquisitions fail loudly rather than a held lock being evicted", "")
		return
	}
	msg, fix, _ := strings.Cut(risk, ". Run ")
	if mm := f.config["maxmemory"]; mm == "0" {
		msg += " (maxmemory is 0 now, so nothing is evicted until a limit is set; managed Redis sets one)"
	}
	d.add("maxmemory-policy", statusFail, n.addr, msg, fix)
}

const restartFix = "CONFIG SET appendonly yes and CONFIG SET appendfsync always (and in redis.conf); or, after a crash, keep Redis from serving locks for the longest lock TTL (a delayed restart)"

// fenceAfterRestart is what a lost fence counter does, from common.lua's
// next_fence: the next fence is at least the server's clock in µs.
const fenceAfterRestart = "fences keep growing (a lost counter restarts from the server's clock in µs) as long as the server's clock does not go back"

func (d *doctorRun) checkPersistence(n dataNode, f nodeFacts) {
	aof, ok := f.config["appendonly"]
	if !ok {
		aof, ok = f.info["aof_enabled"]
		aof = map[string]string{"1": "yes", "0": "no"}[aof]
	}
	if !ok || aof == "" {
		d.add("persistence", statusWarn, n.addr, "cannot read appendonly (CONFIG GET "+cannotRead(f.confErr["appendonly"])+"; not in INFO persistence either)",
			"check with the provider what a restart keeps: without AOF fsynced on every write, a restart frees locks their holders still work under")
		return
	}
	if aof != "yes" {
		snap := "no RDB snapshots either: a restart loses every lock"
		if s := f.config["save"]; s != "" {
			snap = fmt.Sprintf("RDB snapshots only (save %q): a restart loses every lock taken since the last snapshot", s)
		}
		d.add("persistence", statusWarn, n.addr,
			"no AOF, "+snap+"; a second client can then take a lock its holder still works under, until the holder's next renewal fails (a third of its TTL); "+fenceAfterRestart,
			restartFix)
		return
	}
	switch fsync, ok := f.config["appendfsync"]; {
	case !ok:
		d.add("persistence", statusWarn, n.addr, "AOF on, appendfsync unknown (CONFIG GET "+cannotRead(f.confErr["appendfsync"])+"): everysec would lose up to a second of lock grants in a crash",
			"make sure appendfsync is always")
	case fsync == "always":
		d.add("persistence", statusOK, n.addr, "AOF with appendfsync always: a restart keeps every lock and fence counter it acknowledged", "")
	default:
		lose := "up to a second of writes"
		if fsync == "no" {
			lose = "the writes the OS had not flushed (often up to 30 s)"
		}
		d.add("persistence", statusWarn, n.addr,
			fmt.Sprintf("AOF with appendfsync %s: a crash of the machine loses %s, so a lock granted just before it is free after the restart while its holder works on; %s", fsync, lose, fenceAfterRestart),
			restartFix)
	}
}

func (d *doctorRun) checkReplication(n dataNode, f nodeFacts) {
	role := f.info["role"]
	if role == "" {
		d.add("replication", statusWarn, n.addr, "cannot read the role (INFO replication "+cannotRead(f.infoErr)+")", "")
		return
	}
	if role != "master" {
		d.add("replication", statusFail, n.addr,
			fmt.Sprintf("this server is a replica of %s:%s: it refuses the writes of every lock operation (READONLY)", f.info["master_host"], f.info["master_port"]),
			"connect to the primary, or through Sentinel (--master-name with the Sentinels' --addr)")
		return
	}
	replicas, _ := strconv.Atoi(f.info["connected_slaves"])
	for i := range replicas {
		// slave0:ip=127.0.0.1,port=6380,state=online,offset=..,lag=0
		var ip, port string
		for kv := range strings.SplitSeq(f.info["slave"+strconv.Itoa(i)], ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "ip":
				ip = v
			case "port":
				port = v
			}
		}
		if ip != "" && port != "" {
			d.replicas = append(d.replicas, ip+":"+port)
		}
	}
	if replicas == 0 {
		if d.uo.MasterName != "" {
			d.add("replication", statusWarn, n.addr, "the primary has no replica connected: Sentinel has nothing to promote if it dies",
				"attach a replica (REPLICAOF on it)")
			return
		}
		d.add("replication", statusOK, n.addr, "primary without replicas: a failover cannot lose a lock grant; a crash is a restart (see persistence)", "")
		return
	}
	minW, ok := f.config["min-replicas-to-write"]
	if !ok {
		d.add("replication", statusWarn, n.addr,
			fmt.Sprintf("%d replica(s); cannot read min-replicas-to-write (CONFIG GET %s)", replicas, cannotRead(f.confErr["min-replicas-to-write"])),
			"make sure min-replicas-to-write is at least 1 on the primaries")
		return
	}
	w, _ := strconv.Atoi(minW)
	lag := f.config["min-replicas-max-lag"]
	switch {
	case w == 0:
		d.add("replication", statusWarn, n.addr,
			fmt.Sprintf("%d replica(s), min-replicas-to-write 0: replication is asynchronous, so a failover can promote a replica that missed a lock grant (two holders), and a primary cut off from the others keeps granting locks until it learns of the failover", replicas),
			"CONFIG SET min-replicas-to-write 1 and min-replicas-max-lag 10 or less on every primary (and in redis.conf); in services, dlock.WithReplicas(1, timeout) waits for a replica to acknowledge each grant")
	case w > replicas:
		d.add("replication", statusFail, n.addr,
			fmt.Sprintf("min-replicas-to-write %d but %d replica(s) connected: the primary refuses every write (NOREPLICAS), so every acquisition fails", w, replicas),
			"attach replicas, or lower min-replicas-to-write")
	default:
		d.add("replication", statusOK, n.addr,
			fmt.Sprintf("%d replica(s), min-replicas-to-write %d, min-replicas-max-lag %ss: a primary cut off from its replicas stops granting locks after that lag", replicas, w, lag), "")
	}
}

// sentinelClient returns a client for one Sentinel, with the connection's
// TLS and timeouts; Sentinels take no data-node password here.
func (d *doctorRun) sentinelClient(addr string) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{
		Addr: addr, TLSConfig: d.uo.TLSConfig, Username: d.uo.SentinelUsername, Password: d.uo.SentinelPassword,
		DialTimeout: d.uo.DialTimeout, ReadTimeout: d.uo.ReadTimeout, WriteTimeout: d.uo.WriteTimeout,
		ContextTimeoutEnabled: true, MaxRetries: -1, Dialer: d.uo.Dialer,
	})
}

func (d *doctorRun) sentinelPrimary(s *redis.SentinelClient) (string, error) {
	got, err := s.GetMasterAddrByName(d.ctx, d.uo.MasterName).Result()
	if err != nil {
		return "", err
	}
	if len(got) != 2 {
		return "", fmt.Errorf("answer %q", got)
	}
	return got[0] + ":" + got[1], nil
}

func (d *doctorRun) checkSentinels() {
	name := d.uo.MasterName
	primaries := map[string]bool{}
	reached := 0
	for _, addr := range d.uo.Addrs {
		s := d.sentinelClient(addr)
		primary, err := d.sentinelPrimary(s)
		if err != nil {
			st := statusWarn // one Sentinel down is what quorum is for
			if !isNetErr(err) {
				st = statusFail
			}
			d.add("sentinel", st, addr, fmt.Sprintf("does not name the primary of %q: %v", name, err),
				"check that this Sentinel runs and monitors "+name+" (SENTINEL MASTERS)")
			_ = s.Close()
			continue
		}
		reached++
		primaries[primary] = true
		q, err := s.CkQuorum(d.ctx, name).Result()
		_ = s.Close()
		if err != nil {
			d.add("sentinel", statusFail, addr, fmt.Sprintf("primary %s, but SENTINEL CKQUORUM %s: %v", primary, name, err),
				"start enough Sentinels that they reach the quorum and a majority: without it no failover happens")
			continue
		}
		d.add("sentinel", statusOK, addr, fmt.Sprintf("primary %s; %s", primary, q), "")
	}
	switch {
	case reached == 0:
		d.add("sentinel", statusFail, "", fmt.Sprintf("no Sentinel of %d answered for %q", len(d.uo.Addrs), name), "check the --addr values and --master-name")
	case len(primaries) > 1:
		d.add("sentinel", statusFail, "", fmt.Sprintf("the Sentinels name different primaries: %v (a failover under way, or a split)", slices.Sorted(maps.Keys(primaries))),
			"run again in a minute; if it stays, check SENTINEL MASTERS on each")
	}
}

func isNetErr(err error) bool {
	var re redis.Error
	return !errors.As(err, &re)
}

func (d *doctorRun) checkClusterNode(n dataNode) {
	raw, err := n.rdb.ClusterInfo(d.ctx).Result()
	if err != nil {
		d.add("cluster", statusWarn, n.addr, "cannot read CLUSTER INFO ("+cannotRead(err)+")", "")
		return
	}
	info := map[string]string{}
	for line := range strings.Lines(raw) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			info[k] = v
		}
	}
	state, assigned, served := info["cluster_state"], info["cluster_slots_assigned"], info["cluster_slots_ok"]
	msg := fmt.Sprintf("cluster_state %s, %s of 16384 slots assigned, %s served, %s nodes known", state, assigned, served, info["cluster_known_nodes"])
	if state != "ok" || assigned != "16384" || served != "16384" {
		d.add("cluster", statusFail, n.addr, msg+": locks whose slot is not served cannot be taken or renewed",
			"redis-cli --cluster check "+n.addr+" (then --cluster fix)")
		return
	}
	d.add("cluster", statusOK, n.addr, msg, "")
}

func (d *doctorRun) checkClient() {
	msg := fmt.Sprintf("this command connects with ContextTimeoutEnabled true and --timeout %v for dial, read and write. In services: ContextTimeoutEnabled: true (without it go-redis ignores a context's deadline on reads, and a renewal stuck on a dead connection can outlive the lease)", d.a.conn.timeout)
	if d.cluster != nil {
		msg += "; ClusterStateReloadInterval of a few seconds (go-redis' default 60s: after a failover the client keeps dialing the dead primary until then, and renewals of its locks fail)"
	}
	d.add("go-redis", statusOK, "", msg, "")
}

// latencyWarn is the p99 above which the lease deserves a second look: a
// renewal is a round trip, due every third of the TTL.
const latencyWarn = 50 * time.Millisecond

func (d *doctorRun) checkLatency(n dataNode) {
	rtts := make([]time.Duration, 0, d.o.pings)
	for range d.o.pings {
		start := time.Now()
		if err := n.rdb.Ping(d.ctx).Err(); err != nil {
			d.add("latency", statusFail, n.addr, fmt.Sprintf("PING failed after %d answered: %v", len(rtts), err), "")
			return
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	p50, p99 := rtts[len(rtts)/2], rtts[(len(rtts)*99+99)/100-1]
	msg := fmt.Sprintf("p50 %v, p99 %v, max %v over %d PINGs", roundMicro(p50), roundMicro(p99), roundMicro(rtts[len(rtts)-1]), len(rtts))
	switch {
	case p99 > d.a.conn.timeout/2:
		d.add("latency", statusFail, n.addr, msg+": close to --timeout", "find why Redis answers so slowly (SLOWLOG, LATENCY DOCTOR), or raise timeouts and TTLs")
	case p99 > latencyWarn:
		d.add("latency", statusWarn, n.addr, msg+fmt.Sprintf(": renewals are round trips due every third of a TTL; keep TTLs well above %v", 100*p99),
			"put Redis closer to its clients, or use long TTLs")
	default:
		d.add("latency", statusOK, n.addr, msg, "")
	}
}

func roundMicro(d time.Duration) time.Duration { return d.Round(time.Microsecond) }

// skewWarn is the clock difference between data nodes above which doctor
// warns: a fence restarted from a clock that far behind may repeat fences
// handed out within that time.
const skewWarn = 100 * time.Millisecond

// checkSkew compares TIME on every primary and the replicas they announce.
// Each reading is set against the local clock at the middle of its round
// trip, so the error of a pair is at most half of the two round trips.
func (d *doctorRun) checkSkew(nodes []dataNode) {
	type reading struct {
		addr   string
		offset time.Duration // server clock minus local clock
		rtt    time.Duration
	}
	var rs []reading
	read := func(addr string, rdb redis.Cmdable) error {
		start := time.Now()
		t, err := rdb.Time(d.ctx).Result()
		if err != nil {
			return err
		}
		rtt := time.Since(start)
		rs = append(rs, reading{addr: addr, offset: t.Sub(start.Add(rtt / 2)), rtt: rtt})
		return nil
	}
	for _, n := range nodes {
		if err := read(n.addr, n.rdb); err != nil {
			d.add("clock-skew", statusWarn, n.addr, "cannot read TIME: "+err.Error(), "")
		}
	}
	for _, addr := range d.replicas {
		o := d.uo.Simple()
		o.Addr, o.MaxRetries = addr, -1
		c := redis.NewClient(o)
		if err := read(addr, c); err != nil {
			d.add("clock-skew", statusWarn, addr, "cannot read TIME on this replica (as its primary announces it): "+err.Error(),
				"compare its clock by hand: a promoted replica whose clock is behind can repeat fences")
		}
		_ = c.Close()
	}
	if len(rs) < 2 {
		return // nothing to compare: a lone server's fences follow its own clock
	}
	lo, hi, maxRTT := rs[0], rs[0], time.Duration(0)
	for _, r := range rs {
		if r.offset < lo.offset {
			lo = r
		}
		if r.offset > hi.offset {
			hi = r
		}
		maxRTT = max(maxRTT, r.rtt)
	}
	skew := hi.offset - lo.offset
	msg := fmt.Sprintf("%d nodes; largest difference %v (%s ahead of %s), ± %v", len(rs), roundMicro(skew), hi.addr, lo.addr, roundMicro(maxRTT))
	if skew > skewWarn+maxRTT {
		d.add("clock-skew", statusWarn, "", msg+": when a fence counter is lost (restart, failover, a slot moved after the counter expired), the node that takes over restarts fences from its own clock, and one that far behind can hand out fences below ones already handed out; lock ages also differ by node",
			"run NTP (chrony) on every Redis host")
		return
	}
	d.add("clock-skew", statusOK, "", msg, "")
}

// checkLocks counts dlock's keys under the prefix on each primary, with a
// bounded SCAN: never KEYS, and never the whole keyspace of a big server.
func (d *doctorRun) checkLocks(nodes []dataNode) {
	prefix := d.a.conn.prefix
	var held, sems, queues, fences, seen int
	capped := false
	for _, n := range nodes {
		var cursor uint64
		looked := 0
		for {
			keys, next, err := n.rdb.Scan(d.ctx, cursor, prefix+"{*", 1000).Result()
			if err != nil {
				d.add("locks", statusWarn, n.addr, "cannot SCAN: "+err.Error(), "")
				return
			}
			for _, k := range keys {
				switch {
				case strings.HasSuffix(k, "}"):
					held++
				case strings.HasSuffix(k, "}:sem"):
					sems++
				case strings.HasSuffix(k, "}:q"):
					queues++
				case strings.HasSuffix(k, "}:fence"):
					fences++
				}
			}
			seen += len(keys)
			looked += 1000
			cursor = next
			if cursor == 0 {
				break
			}
			if looked >= d.o.scanLimit {
				capped = true
				break
			}
		}
	}
	atLeast := ""
	if capped {
		atLeast = "at least "
	}
	msg := fmt.Sprintf("%s%d lock(s) held, %d semaphore(s) with permits out, %d name(s) with waiters, %d fence counter(s) under prefix %q", atLeast, held, sems, queues, fences, prefix)
	if capped {
		d.add("locks", statusWarn, "", msg+fmt.Sprintf(": stopped after looking at about %d keys per primary", d.o.scanLimit), "raise --scan-limit to count them all")
		return
	}
	d.add("locks", statusOK, "", msg, "")
}

func (d *doctorRun) write(w io.Writer) error {
	if d.o.output == "json" {
		return writeJSON(w, d.rep)
	}
	fmt.Fprintf(w, "dlock doctor: %s, prefix %q\n", d.rep.Topology, d.rep.Prefix)
	for _, f := range d.rep.Checks {
		node := ""
		if f.Node != "" {
			node = f.Node + ": "
		}
		fmt.Fprintf(w, "%-4s  %-16s  %s%s\n", f.Status, f.Check, node, f.Message)
		if f.Fix != "" {
			fmt.Fprintf(w, "      %-16s  fix: %s\n", "", f.Fix)
		}
	}
	_, err := fmt.Fprintf(w, "%d ok, %d warn, %d fail\n", d.rep.OK, d.rep.Warn, d.rep.Fail)
	return err
}
