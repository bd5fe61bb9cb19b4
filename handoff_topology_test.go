package dlock_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// Hand-off messages after topology changes (issue 17, item 9). A waiter
// woken by its hand-off message holds the lock without sending anything; a
// waiter whose message was lost learns of the hand-off only when its timer
// makes it run an attempt (a script). So these tests tell "message" from
// "timer" structurally, by counting the scripts the waiting client runs on
// the name between the release and the grant, not by timing. The hand-off
// latencies they log are figures, not assertions.
//
// What the tests do bound by time is how long the client takes to have its
// channel subscribed again where releases publish (resubscribeWithin): a
// gross bound, a few times what the repair takes (milliseconds after a kill
// or a migration, about a second after a Sentinel failover), and below
// what the unrepaired client takes (never, or about 10 s after a Sentinel
// failover, when Sentinel demotes the old primary and kills its clients).
const resubscribeWithin = 4 * time.Second

// namedScripts counts the scripts a client sends, per lock name: a waiter's
// attempts, refreshes and releases of that name.
type namedScripts struct {
	mu sync.Mutex
	n  map[string]int
}

func (s *namedScripts) of(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[name]
}

func (s *namedScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *namedScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			for _, a := range cmd.Args() {
				key, _ := a.(string)
				if _, rest, ok := strings.Cut(key, "{"); ok {
					name, _, _ := strings.Cut(rest, "}")
					s.mu.Lock()
					if s.n == nil {
						s.n = map[string]int{}
					}
					s.n[name]++
					s.mu.Unlock()
					break
				}
			}
		}
		return next(ctx, cmd)
	}
}
func (s *namedScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// handOffs hands name from other to w until w took a hand-off without
// running a script on the name first, up to three times: the timer can
// fire in the few ms between a release and its message. The first round
// uses the holder h and w's wait res already under way (w queued); later
// rounds start both anew. It returns the latency of the hand-off that came
// by message, and fails the test when every one came by timer.
func handOffs(t *testing.T, w, other *dlock.Client, scripts *namedScripts, queue func(string) int64,
	name string, h dlock.Lock, res <-chan acquired) time.Duration {
	t.Helper()
	for round := 1; ; round++ {
		if round > 1 {
			h = mustAcquire(t, other, name, dlock.WithTTL(10*time.Second))
			res = acquireAsync(w, name, waitOpts...)
		}
		waitFor(t, "W queued for "+name, func() bool { return queue(name) == 1 })
		before := scripts.of(name)
		released := time.Now()
		if err := h.Release(bg); err != nil {
			t.Fatalf("release of %s: %v", name, err)
		}
		l := await(t, "W's wait for "+name, res, 5*time.Second)
		took := time.Since(released)
		ran := scripts.of(name) - before
		if err := l.Release(bg); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s, hand-off %d: held %v after the release, %d script(s) from W before", name, round,
			took.Round(10*time.Microsecond), ran)
		if ran == 0 {
			return took
		}
		if round == 3 {
			t.Fatalf("%s: W ran an attempt before each of %d hand-offs: woken by its timer, its message lost", name, round)
		}
	}
}

// waitOpts: a TTL of 20 s spaces W's own wake-ups (its timer) about a second
// apart, so a hand-off by timer is both slow and visible as a script.
var waitOpts = []dlock.AcquireOption{dlock.WithWait(15 * time.Second), dlock.WithTTL(20 * time.Second)}

// subscribers counts the subscribers of channel on the server at addr:
// shard channel subscribers when sharded.
func subscribers(addr, channel string, sharded bool) int64 {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	var m map[string]int64
	if sharded {
		m, _ = rdb.PubSubShardNumSub(ctx, channel).Result()
	} else {
		m, _ = rdb.PubSubNumSub(ctx, channel).Result()
	}
	return m[channel]
}

// handoffChannel finds w's hand-off channel of name subscribed on addr.
func handoffChannel(t *testing.T, addr, name string, sharded bool) string {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	var chans []string
	waitFor(t, "W's hand-off channel of "+name+" on "+addr, func() bool {
		if sharded {
			chans, _ = rdb.PubSubShardChannels(bg, "dlock:{"+name+"}:w:*").Result()
		} else {
			chans, _ = rdb.PubSubChannels(bg, "dlock:{"+name+"}:w:*").Result()
		}
		return len(chans) == 1
	})
	return chans[0]
}

// resubscribed waits, up to resubscribeWithin, for channel to have a
// subscriber on addr again, and reports (without stopping the test, so the
// hand-offs that follow are measured either way) when it does not.
func resubscribed(t *testing.T, what, addr, channel string, sharded bool, since time.Time) {
	t.Helper()
	for subscribers(addr, channel, sharded) == 0 {
		if time.Since(since) > resubscribeWithin {
			t.Errorf("%s: %s not subscribed on %s %v after the change", what, channel, addr, resubscribeWithin)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%s: %s subscribed on %s %v after the change", what, channel, addr, time.Since(since).Round(time.Millisecond))
}

// pubsubReaders counts the goroutines that read a pub/sub session, of any
// Client of this test binary.
func pubsubReaders() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("dlock.(*notifier).read("))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// idleAfterLinger checks that once nobody waits and the channels stopped
// lingering, no session reader is left, the ones the repairs started
// included: an idle Client runs no goroutine.
func idleAfterLinger(t *testing.T) {
	t.Helper()
	waitFor(t, "no pub/sub session reader once nobody waits", func() bool { return pubsubReaders() == 0 })
}

// clusterWaiter is W: a dlock client on a Cluster whose scripts are counted.
func clusterWaiter(t *testing.T, cs *redistest.ClusterSetup) (*dlock.Client, *namedScripts) {
	t.Helper()
	var addrs []string
	for _, n := range cs.Nodes {
		addrs = append(addrs, n.Addr)
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs, ContextTimeoutEnabled: true, ClusterStateReloadInterval: redistest.ClientStateReload,
	})
	scripts := &namedScripts{}
	rdb.AddHook(scripts)
	w := dlock.MustNew(rdb)
	t.Cleanup(func() { _ = w.Close(bg); _ = rdb.Close() })
	return w, scripts
}

// twoSlotsOnOneNode returns two names in different slots served by one
// primary, and that primary.
func twoSlotsOnOneNode(t *testing.T, cc *redis.ClusterClient, prefix string) (a, b, node string) {
	t.Helper()
	first := map[string]string{} // primary → a name on it
	for i := range 1000 {
		name := fmt.Sprintf("%s-%d", prefix, i)
		m, err := cc.MasterForKey(bg, "dlock:{"+name+"}")
		if err != nil {
			t.Fatal(err)
		}
		addr := m.Options().Addr
		if other, ok := first[addr]; !ok {
			first[addr] = name
		} else if cc.ClusterKeySlot(bg, other).Val() != cc.ClusterKeySlot(bg, name).Val() {
			return other, name, addr
		}
	}
	t.Fatal("no two names in different slots of one primary")
	return "", "", ""
}

// twoWaits is W waiting on names a and b, each held by other: the set-up and
// the check every two-name case shares.
type twoWaits struct {
	w, other   *dlock.Client
	scripts    *namedScripts
	queue      func(string) int64
	a, b       string
	ha, hb     dlock.Lock
	resA, resB <-chan acquired
}

// waitOnTwo has other take a and b and W wait for both, queued in Redis.
func waitOnTwo(t *testing.T, w, other *dlock.Client, scripts *namedScripts, queue func(string) int64, a, b string) *twoWaits {
	t.Helper()
	tw := &twoWaits{w: w, other: other, scripts: scripts, queue: queue, a: a, b: b}
	tw.ha = mustAcquire(t, other, a, dlock.WithTTL(10*time.Second))
	tw.hb = mustAcquire(t, other, b, dlock.WithTTL(10*time.Second))
	tw.resA = acquireAsync(w, a, waitOpts...)
	tw.resB = acquireAsync(w, b, waitOpts...)
	waitFor(t, "W queued for a and b", func() bool { return queue(a) == 1 && queue(b) == 1 })
	return tw
}

// handedOnByMessage checks that after event (at since) channel chA is
// subscribed again on addrA and chB on addrB, that both names are then
// handed to W by message, and that no session reader is left.
func (tw *twoWaits) handedOnByMessage(t *testing.T, event string, since time.Time, addrA, chA, addrB, chB string, sharded bool) {
	t.Helper()
	resubscribed(t, "a", addrA, chA, sharded, since)
	resubscribed(t, "b", addrB, chB, sharded, since)
	took := handOffs(t, tw.w, tw.other, tw.scripts, tw.queue, tw.a, tw.ha, tw.resA)
	t.Logf("a: hand-off by message %v after the %s", took.Round(10*time.Microsecond), event)
	took = handOffs(t, tw.w, tw.other, tw.scripts, tw.queue, tw.b, tw.hb, tw.resB)
	t.Logf("b: hand-off by message %v after the %s", took.Round(10*time.Microsecond), event)
	idleAfterLinger(t)
}

// (a) W waits on names in two slots of one node, and its pub/sub connection
// to that node is killed. go-redis reconnects and re-sends both shard
// channels in one SSUBSCRIBE, which Redis refuses (CROSSSLOT): W must
// subscribe them again itself.
func TestClusterPubSubKilledHandOffByMessage(t *testing.T) {
	cs := redistest.StartCluster(t)
	cc := cs.ClusterClient(t)
	w, scripts := clusterWaiter(t, cs)
	other := newLocker(t, cs.ClusterClient(t))
	queue := func(name string) int64 { return cc.ZCard(bg, "dlock:{"+name+"}:q").Val() }
	a, b, node := twoSlotsOnOneNode(t, cc, "killed")

	tw := waitOnTwo(t, w, other, scripts, queue, a, b)
	chA, chB := handoffChannel(t, node, a, true), handoffChannel(t, node, b, true)

	direct := redis.NewClient(&redis.Options{Addr: node})
	defer direct.Close()
	killed := time.Now()
	if n, err := direct.ClientKillByFilter(bg, "TYPE", "pubsub").Result(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub on %s: %d killed, %v; want W's one connection", node, n, err)
	}
	tw.handedOnByMessage(t, "kill", killed, node, chA, node, chB, true)
}

// (b) The slot of a waited-on name migrates to another primary. The old
// node sends W an unsolicited sunsubscribe for the channel: W must subscribe
// it again on the new owner, and keep the channel of the name that stayed.
func TestClusterSlotMigrationHandOffByMessage(t *testing.T) {
	cs := redistest.StartCluster(t)
	cc := cs.ClusterClient(t)
	w, scripts := clusterWaiter(t, cs)
	other := newLocker(t, cs.ClusterClient(t))
	queue := func(name string) int64 { return cc.ZCard(bg, "dlock:{"+name+"}:q").Val() }
	a, b, from := twoSlotsOnOneNode(t, cc, "migrated")
	to := ""
	for _, p := range cs.Primaries(bg) {
		if p != from {
			to = p
			break
		}
	}

	tw := waitOnTwo(t, w, other, scripts, queue, a, b)
	chA, chB := handoffChannel(t, from, a, true), handoffChannel(t, from, b, true)

	slot := int(cc.ClusterKeySlot(bg, a).Val())
	migrated := time.Now()
	if _, err := cs.MigrateSlot(bg, slot, to, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("slot %d of %s moved from %s to %s in %v", slot, a, from, to, time.Since(migrated).Round(time.Millisecond))
	if n := subscribers(from, chA, true); n != 0 {
		t.Fatalf("%s still has %d subscribers on the old node", chA, n)
	}
	tw.handedOnByMessage(t, "migration", migrated, to, chA, from, chB, true)
}

// writesLandOn waits until a write through rdb reaches the server at addr:
// go-redis moved the client's command connections to the new primary.
func writesLandOn(t *testing.T, rdb redis.UniversalClient, addr, key string) {
	t.Helper()
	direct := redis.NewClient(&redis.Options{Addr: addr})
	defer direct.Close()
	i := 0
	waitFor(t, "writes of "+key+" to reach "+addr, func() bool {
		i++
		val := fmt.Sprint(i)
		ctx, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		return rdb.Set(ctx, key, val, 0).Err() == nil && direct.Get(ctx, key).Val() == val
	})
}

// (c) A Sentinel failover while W waits. go-redis moves the command
// connections to the new primary; W's pub/sub connection must follow, or
// every hand-off published on the new primary is lost until Sentinel
// demotes the old one (about 10 s after a manual failover).
func TestSentinelFailoverHandOffByMessage(t *testing.T) {
	st := redistest.StartSentinel(t)
	wrdb := st.FailoverClient(t)
	scripts := &namedScripts{}
	wrdb.AddHook(scripts)
	w := newLocker(t, wrdb)
	ordb := st.FailoverClient(t)
	other := newLocker(t, ordb)
	const name = "failover"
	old := st.Primary.Addr
	queueOn := func(addr string) func(string) int64 {
		return func(name string) int64 {
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			defer rdb.Close()
			return rdb.ZCard(bg, "dlock:{"+name+"}:q").Val()
		}
	}

	h := mustAcquire(t, other, name, dlock.WithTTL(10*time.Second))
	res := acquireAsync(w, name, waitOpts...)
	waitFor(t, "W queued", func() bool { return queueOn(old)(name) == 1 })
	ch := handoffChannel(t, old, name, false)

	start := time.Now()
	primary, err := st.Failover(bg)
	if err != nil {
		t.Fatal(err)
	}
	switched := time.Now()
	t.Logf("failover from %s to %s in %v", old, primary, switched.Sub(start).Round(time.Millisecond))
	// Both clients' commands go to the new primary, else a release on the
	// old one (still writable for seconds) would publish where W listens.
	writesLandOn(t, ordb, primary, "probe:other")
	writesLandOn(t, wrdb, primary, "probe:w")
	resubscribed(t, name, primary, ch, false, switched)
	took := handOffs(t, w, other, scripts, queueOn(primary), name, h, res)
	t.Logf("%s: hand-off by message %v after the failover", name, took.Round(10*time.Microsecond))
	idleAfterLinger(t)
}

// (d) A Cluster failover while W waits on two slots of the primary: the
// replica takes the slots over, and the channels must be subscribed where
// releases publish now, on the new primary.
func TestClusterFailoverHandOffByMessage(t *testing.T) {
	cs := redistest.StartCluster(t)
	cc := cs.ClusterClient(t)
	w, scripts := clusterWaiter(t, cs)
	other := newLocker(t, cs.ClusterClient(t))
	queue := func(name string) int64 { return cc.ZCard(bg, "dlock:{"+name+"}:q").Val() }
	a, b, old := twoSlotsOnOneNode(t, cc, "failover")

	tw := waitOnTwo(t, w, other, scripts, queue, a, b)
	chA, chB := handoffChannel(t, old, a, true), handoffChannel(t, old, b, true)

	start := time.Now()
	primary, err := cs.FailoverReplicaOf(bg, old)
	if err != nil {
		t.Fatal(err)
	}
	switched := time.Now()
	t.Logf("cluster failover from %s to %s in %v", old, primary, switched.Sub(start).Round(time.Millisecond))
	tw.handedOnByMessage(t, "failover", switched, primary, chA, primary, chB, true)
}

// (a') The same kill outside a Cluster: go-redis' own resubscribe, one
// SUBSCRIBE of every channel, is enough there (this passes on main too; it
// keeps the plain path honest now that the Cluster path repairs itself).
func TestPubSubKilledHandOffByMessage(t *testing.T) {
	srv := redistest.Start(t)
	wrdb := srv.Client(t)
	scripts := &namedScripts{}
	wrdb.AddHook(scripts)
	w := newLocker(t, wrdb)
	other := newClients(t, srv, 1)[0]
	rdb := srv.Client(t)
	queue := func(name string) int64 { return rdb.ZCard(bg, "dlock:{"+name+"}:q").Val() }
	const a, b = "plain-killed-a", "plain-killed-b"

	tw := waitOnTwo(t, w, other, scripts, queue, a, b)
	chA, chB := handoffChannel(t, srv.Addr, a, false), handoffChannel(t, srv.Addr, b, false)

	killed := time.Now()
	if n, err := rdb.ClientKillByFilter(bg, "TYPE", "pubsub").Result(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub: %d killed, %v; want W's one connection", n, err)
	}
	tw.handedOnByMessage(t, "kill", killed, srv.Addr, chA, srv.Addr, chB, false)
}
