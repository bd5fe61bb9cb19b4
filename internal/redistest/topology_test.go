package redistest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestMain checks that no test here leaves a goroutine behind: the setups
// close their clients and the go-redis failover client runs a pub/sub
// goroutine that only Close stops.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// landsOn writes key through rdb until a direct GET on addr returns the
// value, and fails the test if that takes longer than limit. A failover
// client that still writes to a demoted primary, which keeps accepting
// writes for seconds after a manual failover, would pass a plain "SET
// returned OK" check; reading the value back from the expected primary does
// not let that through.
func landsOn(t *testing.T, rdb redis.UniversalClient, addr, key string, limit time.Duration) {
	t.Helper()
	direct := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer direct.Close()
	deadline := time.Now().Add(limit)
	for i := 0; ; i++ {
		val := fmt.Sprintf("v%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		setErr := rdb.Set(ctx, key, val, 0).Err()
		got, getErr := direct.Get(ctx, key).Result()
		cancel()
		if setErr == nil && getErr == nil && got == val {
			if i > 0 {
				t.Logf("write of %s reached %s on attempt %d", key, addr, i+1)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("write of %s through the client did not reach %s within %v: SET: %v; GET: %q %v", key, addr, limit, setErr, got, getErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestSentinel(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	// Two replicas: one for the automatic failover after KillPrimary and
	// one left for the manual Failover after it, without waiting about 10 s
	// for the sentinels to turn a demoted primary into a replica.
	st := redistest.StartSentinel(t, redistest.WithReplicas(2))
	t.Logf("sentinel setup (1 primary, 2 replicas, 3 sentinels) up in %v", time.Since(start).Round(time.Millisecond))

	if len(st.SentinelAddrs) != 3 || len(st.Replicas) != 2 {
		t.Fatalf("got %d sentinels and %d replicas, want 3 and 2", len(st.SentinelAddrs), len(st.Replicas))
	}
	if got := st.CurrentPrimary(ctx); got != st.Primary.Addr {
		t.Fatalf("CurrentPrimary = %q, want the primary at start %s", got, st.Primary.Addr)
	}
	rdb := st.FailoverClient(t)
	landsOn(t, rdb, st.Primary.Addr, "before", time.Second)
	// Make sure both replicas have the key before the primary dies.
	if n, err := st.Primary.Client(t).Do(ctx, "WAIT", 2, 5000).Int(); err != nil || n != 2 {
		t.Fatalf("WAIT 2: %d %v", n, err)
	}

	start = time.Now()
	killed := st.KillPrimary()
	if killed != st.Primary.Addr {
		t.Fatalf("KillPrimary killed %s, want %s", killed, st.Primary.Addr)
	}
	auto, err := st.WaitNewPrimary(ctx)
	if err != nil {
		st.DumpLogs(t, 40)
		t.Fatal(err)
	}
	t.Logf("automatic failover after KillPrimary: %s -> %s in %v", killed, auto, time.Since(start).Round(time.Millisecond))
	if st.Node(auto) == nil || auto == killed {
		t.Fatalf("new primary %s is not one of the replicas", auto)
	}
	if v, err := st.Node(auto).Client(t).Get(ctx, "before").Result(); err != nil {
		t.Fatalf("replicated key lost on the new primary %s: %q %v", auto, v, err)
	}
	landsOn(t, rdb, auto, "after-kill", 10*time.Second)

	start = time.Now()
	manual, err := st.Failover(ctx)
	if err != nil {
		st.DumpLogs(t, 40)
		t.Fatal(err)
	}
	t.Logf("manual Failover: %s -> %s in %v", auto, manual, time.Since(start).Round(time.Millisecond))
	if manual == auto || manual == killed || st.Node(manual) == nil {
		t.Fatalf("Failover promoted %s; want the remaining replica (not %s or %s)", manual, auto, killed)
	}
	if got := st.CurrentPrimary(ctx); got != manual {
		t.Fatalf("CurrentPrimary = %s after Failover, want %s", got, manual)
	}
	// The failover client learns of the switch from +switch-master, which
	// the sentinels published before Failover returned; its delivery is
	// asynchronous, so allow a moment.
	landsOn(t, rdb, manual, "after-failover", 5*time.Second)
}

func TestCluster(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	cs := redistest.StartCluster(t)
	t.Logf("cluster (3 primaries, 3 replicas) up in %v", time.Since(start).Round(time.Millisecond))
	if len(cs.Nodes) != 6 || len(cs.Addrs) != 3 {
		t.Fatalf("got %d nodes and primaries %v, want 6 and 3", len(cs.Nodes), cs.Addrs)
	}
	if got := cs.Primaries(ctx); !slices.Equal(got, cs.Addrs) {
		t.Fatalf("Primaries = %v, want %v", got, cs.Addrs)
	}

	rdb := cs.ClusterClient(t)
	const keys = 300
	// write sets and reads back keys spread over many slots. The client
	// may need a moment to learn a new slot map after a failover (MOVED, or
	// its state reload for a killed node): each command is retried until
	// converge has passed since the first one, and the time it took is
	// logged.
	write := func(prefix string, converge time.Duration) {
		t.Helper()
		start := time.Now()
		retries := 0
		for _, op := range []string{"SET", "GET"} {
			for i := range keys {
				k := fmt.Sprintf("%s:%d", prefix, i)
				for {
					var err error
					if op == "SET" {
						err = rdb.Set(ctx, k, k, 0).Err()
					} else {
						var v string
						if v, err = rdb.Get(ctx, k).Result(); err == nil && v != k {
							t.Fatalf("GET %s = %q", k, v)
						}
					}
					if err == nil {
						break
					}
					if time.Since(start) > converge {
						t.Fatalf("%s %s: %v (still failing %v after the first command)", op, k, err, converge)
					}
					retries++
					time.Sleep(50 * time.Millisecond)
				}
			}
		}
		if retries > 0 {
			t.Logf("writes %q needed %d retries; client converged within %v", prefix, retries, time.Since(start).Round(time.Millisecond))
		}
	}
	write("a", 0)
	// The keys must have spread over every primary, or the test would not
	// prove that the client follows slots.
	for _, addr := range cs.Addrs {
		n, err := cs.Node(addr).Client(t).DBSize(ctx).Result()
		if err != nil || n == 0 {
			t.Fatalf("primary %s holds %d keys (%v); want some of the %d", addr, n, err, keys)
		}
	}

	// A slot moves with its keys; the client follows the MOVED replies.
	slot := int(rdb.ClusterKeySlot(ctx, "a:0").Val())
	from := ""
	for _, addr := range cs.Addrs {
		if n, _ := cs.Node(addr).Client(t).Exists(ctx, "a:0").Result(); n == 1 {
			from = addr
		}
	}
	to := cs.Addrs[0]
	if to == from {
		to = cs.Addrs[1]
	}
	start = time.Now()
	if _, err := cs.MigrateSlot(ctx, slot, to, nil); err != nil {
		t.Fatalf("MigrateSlot(%d, %s) from %s: %v", slot, to, from, err)
	}
	t.Logf("slot %d moved from %s to %s in %v", slot, from, to, time.Since(start).Round(time.Millisecond))
	if v, err := cs.Node(to).Client(t).Get(ctx, "a:0").Result(); err != nil || v != "a:0" {
		t.Fatalf("a:0 on the new owner %s: %q, %v", to, v, err)
	}
	if _, err := cs.MigrateSlot(ctx, slot, to, nil); err == nil {
		t.Fatal("MigrateSlot to the node that owns the slot: no error")
	}
	write("a", 0)

	start = time.Now()
	old := cs.Addrs[0]
	promoted, err := cs.FailoverReplicaOf(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("manual cluster failover: %s -> %s in %v", old, promoted, time.Since(start).Round(time.Millisecond))
	if p := cs.Primaries(ctx); !slices.Contains(p, promoted) || slices.Contains(p, old) {
		t.Fatalf("Primaries after failover = %v; want %s in and %s out", p, promoted, old)
	}
	write("b", 0)

	// A primary that dies: FailoverReplicaOf takes the FORCE path.
	start = time.Now()
	dead := cs.Addrs[1]
	if err := cs.KillNode(dead); err != nil {
		t.Fatal(err)
	}
	promoted, err = cs.FailoverReplicaOf(ctx, dead)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover of killed primary: %s -> %s in %v", dead, promoted, time.Since(start).Round(time.Millisecond))
	if p := cs.Primaries(ctx); !slices.Contains(p, promoted) || slices.Contains(p, dead) {
		t.Fatalf("Primaries after kill = %v; want %s in and %s out", p, promoted, dead)
	}
	write("c", 5*time.Second)
}

func TestStartPrimaries(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	servers := redistest.StartPrimaries(t, 3)
	t.Logf("3 primaries up in %v", time.Since(start).Round(time.Millisecond))
	if len(servers) != 3 {
		t.Fatalf("got %d servers, want 3", len(servers))
	}
	seen := map[string]bool{}
	var clients []*redis.Client
	for i, s := range servers {
		if seen[s.Addr] {
			t.Fatalf("address %s given twice", s.Addr)
		}
		seen[s.Addr] = true
		c := s.Client(t)
		clients = append(clients, c)
		if err := c.Set(ctx, "k", i, 0).Err(); err != nil {
			t.Fatalf("SET on %s: %v", s.Addr, err)
		}
	}
	// Independent: each kept its own value.
	for i, c := range clients {
		if v, err := c.Get(ctx, "k").Int(); err != nil || v != i {
			t.Fatalf("server %d: GET k = %d %v, want %d", i, v, err, i)
		}
	}
	port := servers[1].Port
	if err := servers[1].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if servers[1].Port != port {
		t.Fatalf("Restart moved the server from port %d to %d", port, servers[1].Port)
	}
	if err := clients[1].Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("restarted server still has k (%v); want it empty", err)
	}
	if v, err := clients[0].Get(ctx, "k").Int(); err != nil || v != 0 {
		t.Fatalf("server 0 lost its key after server 1 restarted: %d %v", v, err)
	}
}
