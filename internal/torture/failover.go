package torture

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/internal/redistest"
)

// Failover scenarios run on a Sentinel or Cluster topology that the caller
// starts and passes in Env.Sentinel or Env.Cluster. redistest starts those
// with a testing.TB (for its temporary directories, clean-up and logs), so
// these scenarios run from tests only (TestFullProfile, under `make
// torture`); `dlock torture` runs none of them. Run neither starts nor stops
// the topology.
//
// Workers connect without proxies: go-redis follows the topology itself,
// through the sentinels (MasterName) or the cluster's slot map (seeded with
// every node, reloaded every redistest.ClientStateReload). The resource stays
// on its own standalone Redis, which is never faulted.

// checkTopology tells whether Env carries the topology the scenario needs.
func (r *run) checkTopology() error {
	switch r.sc.Topology {
	case "sentinel":
		if r.env.Sentinel == nil {
			return fmt.Errorf("torture: %s needs a Sentinel setup in Env.Sentinel (the failover scenarios run from tests only)", r.sc.Name)
		}
	case "cluster":
		if r.env.Cluster == nil {
			return fmt.Errorf("torture: %s needs a Cluster setup in Env.Cluster (the failover scenarios run from tests only)", r.sc.Name)
		}
	default:
		return fmt.Errorf("torture: %s: unknown topology %q (want \"\", sentinel or cluster)", r.sc.Name, r.sc.Topology)
	}
	if r.env.Redis != nil {
		return fmt.Errorf("torture: %s: a topology and a user's Redis exclude each other", r.sc.Name)
	}
	return nil
}

// topologyWorker points a worker at the topology.
func (r *run) topologyWorker(cfg *workerConfig) {
	switch r.sc.Topology {
	case "sentinel":
		cfg.Addrs, cfg.Master = append([]string(nil), r.env.Sentinel.SentinelAddrs...), r.env.Sentinel.MasterName
	case "cluster":
		for _, s := range r.env.Cluster.Nodes {
			cfg.Addrs = append(cfg.Addrs, s.Addr)
		}
		cfg.Cluster, cfg.ClusterReload = true, redistest.ClientStateReload
	}
}

// failover promotes a replica and records one FaultFailover.
//
// Either kill may first cut the replicas off (see lag), so that the
// promoted replica lacks the last lock writes.
//
// Sentinel: SIGKILL of the primary, the sentinels promote a replica (about
// 2–3 s, and not within 4 s of the previous failover), then the killed node
// is restarted empty and made a replica of the new primary, so that a later
// failover has a replica to promote. A manual SENTINEL FAILOVER is not used:
// the old primary keeps taking writes for about 11 s after it (see
// TESTING-NOTES.md), which would make most of the run one excused window.
//
// Cluster: the primary of the slot of one lock name is either killed (two
// times in three: its replica is promoted at once with CLUSTER FAILOVER
// FORCE, as an operator would, rather than after cluster-node-timeout; the
// node is restarted empty and rejoins as a replica) or handed over with a
// manual CLUSTER FAILOVER (the coordinated one: the primary stops writes
// until its replica caught up, so no acknowledged write is lost).
//
// The window, From to To: from the kill (or the manual failover's start)
// until the new primary serves and the killed node is back as a replica.
// The restart is inside because it is part of the fault: the node comes
// back empty, and in a cluster it claims its old slots until gossip tells it
// otherwise (a Redis restarted without persistence, which the contract
// excuses too).
//
// Not extended by a TTL after the promotion: Check excuses an overlap of a
// hold a by a hold b when the window meets [a.Got, b.Got]. A holder that
// acquired on the old primary (the one a lost write can hurt) has a.Got
// before the kill, so any b that got the lock after the kill is excused,
// however late — a's belief lasting up to a TTL after the promotion is
// covered without widening the window. A hold acquired after To was acquired
// on the new primary, with its replica back: an overlap of it is not the
// failover's doing and must stay a violation. A wider window would only
// hide such findings.
func (r *run) failover(ctx context.Context) error {
	var f Fault
	var err error
	r.awaitWaiter(ctx) // a failover during waits: they must ride it out
	switch {
	case r.sc.Topology == "sentinel" && r.env.Sentinel != nil:
		f, err = r.failoverSentinel(ctx)
	case r.sc.Topology == "cluster" && r.env.Cluster != nil:
		f, err = r.failoverCluster(ctx)
	default:
		return fmt.Errorf("torture: %s needs a Sentinel or Cluster topology", FaultFailover)
	}
	if err != nil {
		return fmt.Errorf("torture: failover: %w", err)
	}
	r.fault(f)
	// Calm after each failover, so that the run also has stretches in which
	// no window excuses anything.
	sleepCtx(ctx, time.Second+time.Duration(r.rng.Int64N(int64(time.Second))))
	return nil
}

func (r *run) failoverSentinel(ctx context.Context) (f Fault, err error) {
	st := r.env.Sentinel
	// planned from before the kill until the promotion this failover
	// waits for (see watchSentinel); a switch after it is not ours.
	r.mu.Lock()
	r.planned = true
	r.mu.Unlock()
	endPlanned := func(primary string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.planned {
			r.planned, r.plannedTo = false, primary
			r.plannedGen++
		}
	}
	defer endPlanned("") // on error: the watcher takes the next agreed primary
	var replicas []*redistest.Server
	cur := st.CurrentPrimary(ctx)
	for _, n := range append([]*redistest.Server{st.Primary}, st.Replicas...) {
		if n.Addr != cur {
			replicas = append(replicas, n)
		}
	}
	from := Now()
	lagged, err := r.lag(ctx, cur, replicas)
	if err != nil {
		return Fault{}, err
	}
	old := st.KillPrimary()
	for _, n := range replicas {
		n.Resume()
	}
	primary, err := st.WaitNewPrimary(ctx)
	if err != nil {
		return Fault{}, err
	}
	promoted := Now()
	endPlanned(primary)
	node := st.Node(old)
	if node == nil {
		return Fault{}, fmt.Errorf("no data node on %s", old)
	}
	if err := node.Restart(ctx); err != nil {
		return Fault{}, fmt.Errorf("restart %s: %w", old, err)
	}
	host, port, _ := net.SplitHostPort(primary)
	if err := rejoin(ctx, old, func(c *redis.Client) error { return c.ReplicaOf(ctx, host, port).Err() }); err != nil {
		return Fault{}, err
	}
	// The window ends at the promotion: the restarted node is never
	// addressed by clients that ask the sentinels, so a hold acquired on
	// the new primary, once it serves, is no longer the failover's doing.
	return Fault{Kind: FaultFailover, Worker: -1, From: from, To: promoted,
		Note: fmt.Sprintf("sentinel: %skilled primary %s, %s promoted after %.0fms; %s restarted empty as its replica in %.0fms", lagged, old, primary, float64(promoted-from)/1e6, old, float64(Now()-promoted)/1e6)}, nil
}

func (r *run) failoverCluster(ctx context.Context) (Fault, error) {
	cs := r.env.Cluster
	name := "n" + strconv.Itoa(r.rng.IntN(max(r.sc.Names, 1)))
	key := node.KeysOf(r.env.Prefix, name).Lock
	primary, replicaAddrs, slot, err := slotOwner(ctx, cs, key)
	if err != nil {
		return Fault{}, err
	}
	var replicas []*redistest.Server
	for _, a := range replicaAddrs {
		if n := cs.Node(a); n != nil {
			replicas = append(replicas, n)
		}
	}
	kill := r.rng.IntN(3) != 0
	from := Now()
	lagged := ""
	if kill {
		if lagged, err = r.lag(ctx, primary, replicas); err != nil {
			return Fault{}, err
		}
		err := cs.KillNode(primary)
		for _, n := range replicas {
			n.Resume()
		}
		if err != nil {
			return Fault{}, err
		}
	}
	promoted, err := cs.FailoverReplicaOf(ctx, primary)
	if err != nil {
		return Fault{}, err
	}
	at := Now()
	// Every name whose slot the old primary served.
	var names []string
	for i := range max(r.sc.Names, 1) {
		n := "n" + strconv.Itoa(i)
		if n == name {
			names = append(names, n)
			continue
		}
		if p, _, _, err := slotOwner(ctx, cs, node.KeysOf(r.env.Prefix, n).Lock); err == nil && (p == primary || p == promoted) {
			names = append(names, n)
		}
	}
	if !kill {
		return Fault{Kind: FaultFailoverManual, Worker: -1, Names: names, From: from, To: at,
			Note: fmt.Sprintf("cluster: manual CLUSTER FAILOVER of %s (slot %d of %q) to %s", primary, slot, name, promoted)}, nil
	}
	if err := cs.Node(primary).Restart(ctx); err != nil {
		return Fault{}, fmt.Errorf("restart %s: %w", primary, err)
	}
	// The restarted node learns from gossip that its slots moved and turns
	// itself into a replica of their new owner.
	if err := rejoin(ctx, primary, nil); err != nil {
		return Fault{}, err
	}
	// The window ends when the restarted node is a replica: until gossip
	// told it that its slots moved, it still claimed them, empty — a client
	// with the old slot map could be granted a lock there.
	return Fault{Kind: FaultFailover, Worker: -1, Names: names, From: from, To: Now(),
		Note: fmt.Sprintf("cluster: %skilled primary %s (slot %d of %q), %s promoted after %.0fms; %s restarted empty, rejoined as a replica", lagged, primary, slot, name, promoted, float64(at-from)/1e6, primary)}, nil
}

// lag, half the time, makes the primary at addr take writes that its
// replicas will never see, then returns with the replicas still stopped: the
// caller kills the primary and resumes them, and the promoted replica lacks
// the last TTL/2 to TTL of lock writes — acknowledged acquisitions and
// renewals lost, the failover asynchronous replication allows. A plain kill
// on loopback loses nothing: replication is faster than the kill. As
// TESTING-NOTES.md says, SIGSTOP alone does not do it (the stream waits in
// the replica's socket buffer): the primary also drops its replicas' links
// (CLIENT KILL TYPE replica), so later writes are never sent. The stop, 50
// to 350 ms, is short enough that a lock acquired in it can still be
// believed in when the new primary serves (a cluster promotes in about
// 150 ms), and shorter than down-after-milliseconds and cluster-node-timeout (1 s), so
// the replicas stay eligible. It returns a note for the fault.
func (r *run) lag(ctx context.Context, addr string, replicas []*redistest.Server) (string, error) {
	if len(replicas) == 0 || r.rng.IntN(2) == 0 {
		return "", nil
	}
	d := 50*time.Millisecond + time.Duration(r.rng.Int64N(int64(300*time.Millisecond)))
	for _, n := range replicas {
		n.Pause()
	}
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	if err := c.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		for _, n := range replicas {
			n.Resume()
		}
		return "", fmt.Errorf("CLIENT KILL TYPE replica on %s: %w", addr, err)
	}
	sleepCtx(ctx, d)
	return fmt.Sprintf("replicas stopped and cut off for %v, then ", d.Round(time.Millisecond)), nil
}

// slotOwner returns the primary serving key's slot and its replicas, as the
// first node that answers sees them.
func slotOwner(ctx context.Context, cs *redistest.ClusterSetup, key string) (string, []string, int64, error) {
	var errs []error
	for _, s := range cs.Nodes {
		c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
		slot, err := c.ClusterKeySlot(ctx, key).Result()
		var shards []redis.ClusterShard
		if err == nil {
			shards, err = c.ClusterShards(ctx).Result()
		}
		_ = c.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Addr, err))
			continue
		}
		for _, sh := range shards {
			if !slices.ContainsFunc(sh.Slots, func(r redis.SlotRange) bool { return r.Start <= slot && slot <= r.End }) {
				continue
			}
			// Failed nodes are listed too: only those online count, as
			// CLUSTER SLOTS (deprecated) had it.
			var primary string
			var reps []string
			for _, n := range sh.Nodes {
				addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
				switch {
				case n.Health != "online":
				case n.Role == "master":
					primary = addr
				default:
					reps = append(reps, addr)
				}
			}
			if primary != "" {
				return primary, reps, slot, nil
			}
		}
		errs = append(errs, fmt.Errorf("%s: no node serves slot %d", s.Addr, slot))
	}
	return "", nil, 0, fmt.Errorf("the primary of %q: %w", key, errors.Join(errs...))
}

// rejoin runs attach (if any) on the node at addr, then waits until it is a
// replica whose link to its primary is up.
func rejoin(ctx context.Context, addr string, attach func(*redis.Client) error) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	if attach != nil {
		if err := attach(c); err != nil {
			return fmt.Errorf("attach %s as a replica: %w", addr, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, redistest.DefaultWait)
	defer cancel()
	last := "nothing yet"
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = strings.Join(strings.Fields(info), " ")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not become a replica with its link up within %v; last seen: %s", addr, redistest.DefaultWait, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// watchSentinel looks at the primary the sentinels agree on every 50 ms
// while the run lasts (Sentinel topology only), and logs a change that no
// failover of the nemesis made as FaultFailoverUnplanned. The sentinels once
// promoted a replica on their own 1.5 s after the nemesis's failover had
// ended, every sentinel agreeing on the first promotion, and left the old
// primary running: a grant on it was lost, and the overlap it let in was a
// failover's, unlogged. The window runs from the last look that saw the old
// primary to the first look at which no primary it replaced answers ROLE
// as a primary any more: a demoted primary that still runs takes writes
// until the sentinels turn it into a replica (about 10 s after a SENTINEL
// FAILOVER in trials here: two primaries at once). A primary that times out
// (stopped, or a loaded machine) may run again as one: only a replica's
// answer or a refused connection closes the window. A look where the
// sentinels disagree or do not answer moves nothing. stop ends the watch
// (logging a window still open) and waits for it.
func (r *run) watchSentinel(ctx context.Context) (stop func()) {
	st := r.env.Sentinel
	if r.sc.Topology != "sentinel" || st == nil {
		return func() {}
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		clients := map[string]*redis.Client{} // one per server asked ROLE
		defer func() {
			for _, c := range clients {
				_ = c.Close()
			}
		}()
		cur, _ := st.AgreedPrimary(wctx)
		seen, gen := Now(), 0
		var open *Fault   // a switch whose old primaries may still take writes
		var olds []string // those old primaries
		closeOpen := func(why string) {
			switched := open.To
			open.To = Now()
			open.Note += fmt.Sprintf("; %s after %.0fms", why, float64(open.To-switched)/1e6)
			r.fault(*open)
			open, olds = nil, nil
		}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-wctx.Done():
				if open != nil {
					closeOpen("the run ended with an old primary still one")
				}
				return
			case <-tick.C:
			}
			if open != nil && !slices.ContainsFunc(olds, func(a string) bool { return mayBePrimary(wctx, clients, a) }) {
				closeOpen(strings.Join(olds, ", ") + " no longer a primary")
			}
			got, ok := st.AgreedPrimary(wctx)
			now := Now()
			r.mu.Lock()
			planned, pgen, pto := r.planned, r.plannedGen, r.plannedTo
			r.mu.Unlock()
			switch {
			case planned:
				continue // the nemesis's failover logs itself
			case pgen != gen:
				// A failover of the nemesis ended since the last look:
				// its primary is the one to compare with ("" after an
				// error: the next agreed one).
				gen, cur, seen = pgen, pto, now
				continue
			case !ok:
				continue
			case got == cur || cur == "":
				cur, seen = got, now
			case open != nil:
				// Another switch while an old primary still takes
				// writes: one window for all, each old one watched.
				open.Note += fmt.Sprintf(", then %s replaced by %s", cur, got)
				olds = append(olds, cur)
				cur, seen = got, now
			default:
				// To holds the switch's time until the window closes.
				open = &Fault{Kind: FaultFailoverUnplanned, Worker: -1, From: seen, To: now,
					Note: fmt.Sprintf("sentinel: primary %s replaced by %s, not by the nemesis", cur, got)}
				olds = []string{cur}
				cur, seen = got, now
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// mayBePrimary reports whether the server at addr may take writes as a
// primary: it answers ROLE as one, or does not answer at all but for a
// refused connection (a stopped or slow primary runs again as one).
func mayBePrimary(ctx context.Context, clients map[string]*redis.Client, addr string) bool {
	c := clients[addr]
	if c == nil {
		c = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
		clients[addr] = c
	}
	role, err := c.Do(ctx, "ROLE").Slice()
	switch {
	case err == nil:
		return len(role) > 0 && role[0] == "master"
	case errors.Is(err, syscall.ECONNREFUSED):
		return false // not running: it takes nothing
	}
	return true
}
