package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// WithReplicas sends script and WAIT to the node go-redis' slot map names
// for the lock's key. After a failover that map is stale until go-redis
// reloads it (every ClusterStateReloadInterval, 60 s by default): the old
// primary, now a replica, answers MOVED. The acquisition follows the
// redirect as a plain one does, instead of failing until the next reload
// (issue 17 item 10: every attempt got MOVED for 3 s).
func TestWithReplicasFollowsMoved(t *testing.T) {
	cs := redistest.StartCluster(t)
	addrs := make([]string, len(cs.Nodes))
	for i, s := range cs.Nodes {
		addrs[i] = s.Addr
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true,
		ClusterStateReloadInterval: time.Hour}) // only MOVED may refresh the map
	t.Cleanup(func() { _ = cc.Close() })
	c := newLocker(t, cc)
	const name = "moved"
	opts := []dlock.AcquireOption{dlock.WithReplicas(1, time.Second), dlock.WithTTL(10 * time.Second)}

	l := mustAcquire(t, c, name, opts...) // the slot map is loaded
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	node, err := cc.MasterForKey(bg, "dlock:{"+name+"}")
	if err != nil {
		t.Fatal(err)
	}
	old := node.Options().Addr
	// Graceful: the old primary stays up as the new one's replica, and
	// answers MOVED for the slot.
	promoted, err := cs.FailoverReplicaOf(bg, old)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old primary to replicate the new one", func() bool {
		r, err := cs.Node(old).Client(t).Do(bg, "ROLE").Slice()
		return err == nil && len(r) > 0 && r[0] == "slave"
	})
	if node, _ := cc.MasterForKey(bg, "dlock:{"+name+"}"); node == nil || node.Options().Addr != old {
		t.Fatal("go-redis' slot map was reloaded before the acquisition: this test needs it stale")
	}

	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	start := time.Now()
	l, err = c.Acquire(ctx, name, append(opts, dlock.WithWait(0))...)
	if err != nil {
		t.Fatalf("WithReplicas after a failover, slot map stale: %v after %v", err, time.Since(start))
	}
	t.Logf("acquired through MOVED in %v", time.Since(start))
	if got := cs.Node(promoted).Client(t).HGet(bg, "dlock:{"+name+"}", "token").Val(); got != l.Token() {
		t.Fatalf("new primary %s holds token %q, want ours", promoted, got)
	}
	// Acknowledged means the old primary, now its replica, has it too.
	conn := cs.Node(old).Client(t).Conn() // READONLY is per connection
	defer conn.Close()
	if err := conn.ReadOnly(bg).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := conn.HGet(bg, "dlock:{"+name+"}", "token").Result(); got != l.Token() {
		t.Fatalf("replica %s holds token %q (%v) right after the acknowledged acquisition", old, got, err)
	}
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
}
