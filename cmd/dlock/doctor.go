package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/dlock-go/dlock/internal/serverreq"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
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
  durable-grant     whether dlock.WithDurableGrant can confirm grants on
                    disk here (WAITAOF, and AOF on)
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
	// shard is whether COMMAND INFO knows SPUBLISH, which a Cluster's
	// hand-offs use; nil when the server refused to say.
	shard *bool
	// waitAOF is whether COMMAND INFO knows WAITAOF, which
	// dlock.WithDurableGrant sends; nil when the server refused to say.
	waitAOF *bool
}

var doctorConfig = []string{"maxmemory-policy", "maxmemory", "appendonly", "appendfsync", "save", "min-replicas-to-write", "min-replicas-max-lag"}

func (a *app) doctor(ctx context.Context, o doctorOptions) error {
	uo, err := a.conn.options(a.getenv, a.promptPassword)
	if err != nil {
		return err
	}
	a.conn.warnURLPassword(a.stderr)
	rdb := redis.NewUniversalClient(uo)
	defer rdb.Close()
	// Not a PING through a ClusterClient: it may pick a dead primary, which
	// is a finding (reachable), not a reason to stop. The Cluster's slot
	// map, which primaries loads, needs one live node.
	// Elsewhere one PING, not retried, within --timeout, naming the
	// address and the flags it came from, as every command's (probe).
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		if err := a.probe(uo); err != nil {
			return fmt.Errorf("doctor: %w", err)
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
		d.checkDurable(n, f)
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
	commands := pipe.Do(ctx, serverreq.CommandsQuery...)
	_, _ = pipe.Exec(ctx) // errors are read per command
	f := nodeFacts{info: map[string]string{}, config: map[string]string{}, confErr: map[string]error{}, infoErr: info.Err()}
	known := serverreq.Commands(commands.Val(), commands.Err())
	f.shard, f.waitAOF = known.ShardChannels, known.WaitAOF
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
