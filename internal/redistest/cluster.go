package redistest

import (
	"context"
	"errors"
	"fmt"
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

const (
	clusterPrimaries = 3 // the fewest redis-cli --cluster create accepts
	clusterSlots     = 16384
	// clusterNodeTimeoutMs is how long a node must be unreachable before it
	// is marked failing: 1 s makes the cluster's own failover after a kill
	// take 2–3 s.
	clusterNodeTimeoutMs = 1000
)

// ClusterSetup is a Redis Cluster of three primaries with WithReplicas
// replicas each (default 1), all on 127.0.0.1 and all stopped in t.Cleanup.
type ClusterSetup struct {
	Nodes []*Server // every node, in start order
	Addrs []string  // the primaries' addresses at start, ordered by their first slot

	wait time.Duration
	logs []string

	mu       sync.Mutex
	replicas map[string][]string // replicas of a node when KillNode killed it
}

// StartCluster starts 3×(1+WithReplicas) cluster nodes, joins them with
// redis-cli --cluster create, and returns once every node reports
// cluster_state:ok with all 16384 slots assigned, every node knows every
// other node with no handshake or failure flag, and every replica's link to
// its primary is up. Start-up takes about 2.2 s here, about half of it
// redis-cli waiting for the nodes to agree on the configuration.
//
// Each node lives in its own directory, with its nodes.conf there: a
// Server.Restart of a node therefore rejoins the cluster under the same
// identity, empty, as a crashed node without persistence would.
//
// The cluster bus port is given explicitly with --cluster-port (Redis 7)
// rather than left at the default port+10000: the free ports the kernel
// hands out are in 32768–60999, and port+10000 is above 65535 for a fifth of
// them, or may be in use.
func StartCluster(t testing.TB, opts ...Option) *ClusterSetup {
	t.Helper()
	cfg := newConfig(opts)
	if cfg.replicas < 0 {
		t.Fatalf("redistest: StartCluster: negative replica count %d", cfg.replicas)
	}
	ctx := context.Background()
	cs := &ClusterSetup{wait: cfg.wait}
	total := clusterPrimaries * (1 + cfg.replicas)
	var logs []string
	for i := range total {
		dir := t.TempDir()
		logs = append(logs, logFile(dir))
		s, err := launchClusterNode(ctx, dir, cfg.serverArgs)
		if errors.Is(err, ErrNoRedis) {
			t.Fatalf("%v", err)
		}
		if err != nil {
			failWithLogs(t, logs, "redistest: start cluster node %d: %v", i, err)
		}
		t.Cleanup(s.Kill)
		cs.Nodes = append(cs.Nodes, s)
	}

	if err := createCluster(ctx, cs.allAddrs(), cfg.replicas); err != nil {
		failWithLogs(t, logs, "%v", err)
	}
	if err := cs.waitHealthy(ctx, total); err != nil {
		failWithLogs(t, logs, "%v", err)
	}
	cs.Addrs = cs.Primaries(ctx)
	if len(cs.Addrs) != clusterPrimaries {
		failWithLogs(t, logs, "redistest: cluster has primaries %v, want %d", cs.Addrs, clusterPrimaries)
	}
	cs.logs = logs
	return cs
}

// DumpLogs writes the last lines of every node's log to the test log, to
// explain a failover that did not happen.
func (cs *ClusterSetup) DumpLogs(t testing.TB, lines int) {
	t.Helper()
	dumpLogs(t, cs.logs, lines)
}

// launchClusterNode starts one cluster-enabled node in dir with an explicit
// bus port. A bus port taken between FreePort and the bind makes the server
// exit at start, which Launch would retry with the same bus port: so the bus
// port is retried here.
func launchClusterNode(ctx context.Context, dir string, extra []string) (*Server, error) {
	var lastErr error
	for range 3 {
		bus, err := FreePort()
		if err != nil {
			return nil, err
		}
		args := append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", strconv.Itoa(clusterNodeTimeoutMs),
			"--cluster-port", strconv.Itoa(bus),
		}, dataNodeArgs(dir, extra)...)
		s, err := Launch(ctx, dir, args...)
		if err == nil || errors.Is(err, ErrNoRedis) {
			return s, err
		}
		lastErr = fmt.Errorf("%w; log: %s", err, logTail(logFile(dir), 3))
	}
	return nil, lastErr
}

// createCluster runs redis-cli --cluster create. redis-cli makes the first
// len(addrs)/(1+replicas) nodes primaries and assigns the rest as replicas.
func createCluster(ctx context.Context, addrs []string, replicas int) error {
	bin, err := lookPath(func(f Flavor) string { return f.CLI })
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = ChildAttr()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("redistest: redis-cli --cluster create: %w\n%s", err, out)
	}
	return nil
}

// NodeAddrs returns the addresses of every node, in start order: the seed
// addresses of a go-redis ClusterClient a test configures itself.
func (cs *ClusterSetup) NodeAddrs() []string { return cs.allAddrs() }

func (cs *ClusterSetup) allAddrs() []string {
	addrs := make([]string, len(cs.Nodes))
	for i, s := range cs.Nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// waitHealthy waits until every node in want answers with cluster_state:ok
// and all slots assigned, sees total nodes with no handshake, pfail or fail
// flag, and every replica's link is up.
func (cs *ClusterSetup) waitHealthy(ctx context.Context, total int) error {
	return waitFor(ctx, cs.wait, fmt.Sprintf("all %d cluster nodes to report cluster_state:ok, %d slots assigned, every node known and every replica link up", total, clusterSlots),
		func(ctx context.Context) (bool, string) {
			for _, s := range cs.Nodes {
				if ok, seen := nodeHealthy(ctx, s.Addr, total); !ok {
					return false, seen
				}
			}
			return true, ""
		})
}

// nodeHealthy checks one node's view of the cluster; total is the number of
// nodes it must know, or 0 to accept any.
func nodeHealthy(ctx context.Context, addr string, total int) (bool, string) {
	info, err := doString(ctx, addr, "CLUSTER", "INFO")
	if err != nil {
		return false, addr + ": " + err.Error()
	}
	state, assigned, known := infoField(info, "cluster_state"), infoField(info, "cluster_slots_assigned"), infoField(info, "cluster_known_nodes")
	if state != "ok" || assigned != strconv.Itoa(clusterSlots) || (total > 0 && known != strconv.Itoa(total)) {
		return false, fmt.Sprintf("%s: cluster_state=%s slots_assigned=%s known_nodes=%s", addr, state, assigned, known)
	}
	nodes, err := clusterNodes(ctx, addr)
	if err != nil {
		return false, addr + ": " + err.Error()
	}
	for _, n := range nodes {
		// A node marked fail is accepted only after start-up (total 0):
		// that is a node a test killed. Everything else means the nodes
		// are still gossiping towards agreement.
		if n.has("handshake") || n.has("noaddr") || n.has("fail?") || (total > 0 && n.has("fail")) {
			return false, fmt.Sprintf("%s sees %s flags=%s", addr, n.addr, n.flags)
		}
	}
	for _, n := range nodes {
		if n.has("myself") && n.has("slave") {
			return replicaLinkUp(ctx, addr)
		}
	}
	return true, ""
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, flags, master string
	firstSlot               int // lowest slot owned, or -1
}

func (n clusterNode) has(flag string) bool {
	return slices.Contains(strings.Split(n.flags, ","), flag)
}

// clusterNodes parses CLUSTER NODES as the node at addr sees it. Addresses
// lose their "@busport" suffix.
func clusterNodes(ctx context.Context, addr string) ([]clusterNode, error) {
	text, err := doString(ctx, addr, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	var nodes []clusterNode
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		a, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{id: f[0], addr: a, flags: f[2], master: f[3], firstSlot: -1}
		// Slot fields are "N" or "N-M"; "[N->-id]" and "[N-<-id]" mark
		// slots in migration and are not owned.
		for _, r := range f[8:] {
			lo, _, _ := strings.Cut(r, "-")
			if v, err := strconv.Atoi(lo); err == nil && (n.firstSlot < 0 || v < n.firstSlot) {
				n.firstSlot = v
			}
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// ClientStateReload is the ClusterStateReloadInterval of ClusterClient.
//
// go-redis refreshes its slot map only on MOVED, ASK or READONLY replies,
// or when the map is older than ClusterStateReloadInterval (60 s by default
// in v9.23). A killed primary answers nothing, so with the default a client
// keeps dialing it for the slots it served for up to a minute after a
// replica took over. Tests want the failover, not that wait.
const ClientStateReload = time.Second

// ClusterClient returns a go-redis cluster client seeded with every node's
// address (so it finds the cluster even when some nodes were killed), closed
// in t.Cleanup. ContextTimeoutEnabled makes reads honor the context's
// deadline; ClusterStateReloadInterval is ClientStateReload.
func (cs *ClusterSetup) ClusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                      cs.allAddrs(),
		ContextTimeoutEnabled:      true,
		ClusterStateReloadInterval: ClientStateReload,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Primaries returns the addresses of the primaries that own slots now,
// ordered by their first slot, as the first node that answers sees them
// (CLUSTER NODES); nil if no node answers. A primary that died still owns
// its slots until a replica takes them over. Right after a failover nodes can
// disagree for a moment; FailoverReplicaOf waits that out.
func (cs *ClusterSetup) Primaries(ctx context.Context) []string {
	for _, s := range cs.Nodes {
		if p := primariesSeenBy(ctx, s.Addr); p != nil {
			return p
		}
	}
	return nil
}

// primariesSeenBy returns the primaries that own slots in the view of the
// node at addr, ordered by their first slot.
func primariesSeenBy(ctx context.Context, addr string) []string {
	nodes, err := clusterNodes(ctx, addr)
	if err != nil {
		return nil
	}
	nodes = slices.DeleteFunc(nodes, func(n clusterNode) bool { return !n.has("master") || n.firstSlot < 0 })
	slices.SortFunc(nodes, func(a, b clusterNode) int { return a.firstSlot - b.firstSlot })
	var out []string
	for _, n := range nodes {
		out = append(out, n.addr)
	}
	return out
}

// Node returns the node listening on addr, or nil.
func (cs *ClusterSetup) Node(addr string) *Server { return findServer(cs.Nodes, addr) }

// KillNode kills the node on addr with SIGKILL. The cluster marks it failing
// after cluster-node-timeout (1 s) and, if it was a primary, a replica takes
// over on its own a second or two later. KillNode remembers the node's
// replicas first, because once one is promoted nothing in CLUSTER NODES says
// whose replica it was; FailoverReplicaOf needs that.
func (cs *ClusterSetup) KillNode(addr string) error {
	s := cs.Node(addr)
	if s == nil {
		return fmt.Errorf("redistest: KillNode: no cluster node on %s", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if reps := cs.replicasOf(ctx, addr); len(reps) > 0 {
		cs.mu.Lock()
		if cs.replicas == nil {
			cs.replicas = map[string][]string{}
		}
		cs.replicas[addr] = reps
		cs.mu.Unlock()
	}
	s.Kill()
	return nil
}

// replicasOf returns the replicas of the node on addr, not marked failing, as
// the first node that answers sees them.
func (cs *ClusterSetup) replicasOf(ctx context.Context, addr string) []string {
	for _, s := range cs.Nodes {
		nodes, err := clusterNodes(ctx, s.Addr)
		if err != nil {
			continue
		}
		id := ""
		for _, n := range nodes {
			if n.addr == addr {
				id = n.id
			}
		}
		var reps []string
		for _, n := range nodes {
			if id != "" && n.master == id && !n.has("fail") && !n.has("fail?") {
				reps = append(reps, n.addr)
			}
		}
		return reps
	}
	return nil
}

// FailoverReplicaOf promotes a replica of the primary on primaryAddr with
// CLUSTER FAILOVER and returns the replica's address once it reports role
// master, every live node sees it as a primary, and every live node reports
// cluster_state:ok again.
//
// If the primary does not answer (killed or paused), CLUSTER FAILOVER FORCE
// is sent instead: a plain manual failover needs the primary's help to stop
// writes and hand over its replication offset. If the cluster promoted a
// replica on its own first, that one is waited for.
func (cs *ClusterSetup) FailoverReplicaOf(ctx context.Context, primaryAddr string) (string, error) {
	var replica string
	promoted := false
	err := waitFor(ctx, cs.wait, "a replica of "+primaryAddr+" (listed by a live node, or recorded by KillNode)",
		func(ctx context.Context) (bool, string) {
			if reps := cs.replicasOf(ctx, primaryAddr); len(reps) > 0 {
				replica = reps[0]
				return true, ""
			}
			// Killed and already failed over by the cluster itself: the
			// replica that KillNode saw is a primary now.
			cs.mu.Lock()
			reps := cs.replicas[primaryAddr]
			cs.mu.Unlock()
			for _, r := range reps {
				if got, err := role(ctx, r); err == nil && got == "master" {
					replica, promoted = r, true
					return true, ""
				}
			}
			return false, fmt.Sprintf("no live replica of %s listed; recorded at KillNode: %v", primaryAddr, reps)
		})
	if err != nil {
		return "", err
	}

	if !promoted {
		args := []any{"CLUSTER", "FAILOVER"}
		if !alive(ctx, primaryAddr) {
			args = append(args, "FORCE")
		}
		if _, err := do(ctx, replica, args...); err != nil {
			// "You should send CLUSTER FAILOVER to a replica": the cluster
			// promoted it on its own meanwhile; wait for the rest as usual.
			if !strings.Contains(err.Error(), "to a replica") {
				return "", fmt.Errorf("redistest: %v on %s: %w", args, replica, err)
			}
		}
	}

	err = waitFor(ctx, cs.wait, fmt.Sprintf("replica %s of %s to report role master, be seen as a primary by every live node and cluster_state:ok everywhere", replica, primaryAddr),
		func(ctx context.Context) (bool, string) {
			if r, err := role(ctx, replica); err != nil || r != "master" {
				return false, fmt.Sprintf("%s: role %q %v", replica, r, err)
			}
			live := 0
			for _, s := range cs.Nodes {
				if !alive(ctx, s.Addr) {
					continue // killed or paused
				}
				live++
				if ok, seen := nodeHealthy(ctx, s.Addr, 0); !ok {
					return false, seen
				}
				if p := primariesSeenBy(ctx, s.Addr); !slices.Contains(p, replica) {
					return false, fmt.Sprintf("%s sees primaries %v", s.Addr, p)
				}
			}
			return live > 0, "no live node"
		})
	if err != nil {
		return "", err
	}
	return replica, nil
}
