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
	addrs := cs.NodeAddrs()
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

// While the lock's slot migrates, the source refuses a script with some of
// its keys there (TRYAGAIN), and sends one with none of them to the target
// (ASK), which refuses it too while keys are missing (TRYAGAIN). A plain
// acquisition rides this out with go-redis' retries; one WithReplicas does
// the same, within ClusterOptions.MaxRedirects, and lands on the target once
// the slot is there.
func TestWithReplicasThroughSlotMigration(t *testing.T) {
	cs := redistest.StartCluster(t)
	addrs := cs.NodeAddrs()
	// 8 redirects: with the waits after TRYAGAIN doubling from 16 ms, about
	// 4 s for the migration below to finish, however loaded the machine.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true,
		ClusterStateReloadInterval: time.Hour, MaxRedirects: 8})
	t.Cleanup(func() { _ = cc.Close() })
	c := newLocker(t, cc)
	opts := []dlock.AcquireOption{dlock.WithReplicas(1, time.Second), dlock.WithTTL(10 * time.Second), dlock.WithWait(0)}

	for _, tc := range []struct{ name, why string }{
		{"mig-used", "fence counter on the source: TRYAGAIN there"},
		{"mig-fresh", "no key anywhere: ASK, then TRYAGAIN on the target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "dlock:{" + tc.name + "}"
			if tc.name == "mig-used" {
				l := mustAcquire(t, c, tc.name, opts...)
				if err := l.Release(bg); err != nil {
					t.Fatal(err)
				}
			}
			slot, err := cs.KeySlot(bg, key)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cc.MasterForKey(bg, key); err != nil { // the map, loaded before the move
				t.Fatal(err)
			}
			from, err := cs.SlotOwner(bg, slot)
			if err != nil {
				t.Fatal(err)
			}
			to := cs.Addrs[0]
			if to == from {
				to = cs.Addrs[1]
			}
			m, err := cs.BeginSlotMigration(bg, slot, to)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			done := make(chan error, 1)
			go func() {
				time.Sleep(150 * time.Millisecond) // the acquisition meets the open slot
				err := m.MoveKeys(bg)
				if err == nil {
					err = m.Finish(bg)
				}
				done <- err
			}()
			ctx, cancel := context.WithTimeout(bg, 8*time.Second)
			defer cancel()
			start := time.Now()
			l, err := c.Acquire(ctx, tc.name, opts...)
			if merr := <-done; merr != nil {
				t.Fatal(merr)
			}
			if err != nil {
				t.Fatalf("WithReplicas during the migration of its slot (%s): %v after %v", tc.why, err, time.Since(start))
			}
			t.Logf("%s: acquired in %v", tc.why, time.Since(start))
			if got := cs.Node(to).Client(t).HGet(bg, key, "token").Val(); got != l.Token() {
				t.Fatalf("target %s holds token %q, want ours", to, got)
			}
			if err := l.Release(bg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A waiter with WithReplicas whose slot map went stale while it waited (a
// failover of the lock's primary) is still handed the lock: the hand-off's
// refresh and WAIT, or its own attempt once it wakes, follow the MOVED its
// old primary answers.
func TestWithReplicasHandOffAfterFailover(t *testing.T) {
	cs := redistest.StartCluster(t)
	addrs := cs.NodeAddrs()
	stale := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true,
		ClusterStateReloadInterval: time.Hour})
	t.Cleanup(func() { _ = stale.Close() })
	waiter := newLocker(t, stale)
	holder := newLocker(t, cs.ClusterClient(t))
	const name = "handoff-moved"
	key := "dlock:{" + name + "}"
	opts := []dlock.AcquireOption{dlock.WithReplicas(1, time.Second), dlock.WithTTL(3 * time.Second)}

	// The holder's lease outlives a slow manual failover: the old primary
	// pauses its clients (the holder's renewals too) until the replica has
	// caught up and won its vote, up to 5 s on a loaded machine. With a 3 s
	// TTL its lock was lost before the release (CI), which this test is
	// not about.
	h := mustAcquire(t, holder, name, dlock.WithReplicas(1, time.Second), dlock.WithTTL(15*time.Second))
	got := make(chan error, 1)
	var w dlock.Lock
	go func() {
		var err error
		w, err = waiter.Acquire(bg, name, append(opts, dlock.WithWait(15*time.Second))...)
		got <- err
	}()
	node, err := stale.MasterForKey(bg, key)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the waiter queued", func() bool { return cs.ClusterClient(t).ZCard(bg, "dlock:{"+name+"}:q").Val() == 1 })
	old := node.Options().Addr
	failing := time.Now()
	if _, err := cs.FailoverReplicaOf(bg, old); err != nil {
		t.Fatal(err)
	}
	t.Logf("failover done in %v", time.Since(failing).Round(time.Millisecond))
	// The waiter's hand-off subscription follows the failover (the old
	// primary drops its shard channels) and reloads the slot map when it
	// does, often before the release below: then the hand-off's WAIT goes
	// to the new primary straight away. Either way the waiter must get the
	// lock; TestWithReplicasFollowsMoved covers MOVED on its own.
	if n, _ := stale.MasterForKey(bg, key); n == nil || n.Options().Addr != old {
		t.Log("the waiter's slot map was reloaded before the hand-off (its subscription followed the failover)")
	} else {
		t.Log("the waiter's slot map is still stale: its hand-off must follow MOVED")
	}
	start := time.Now()
	if err := h.Release(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter with WithReplicas after a failover: %v after %v", err, time.Since(start))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("waiter still waiting 20 s after the release")
	}
	t.Logf("handed over in %v after the release", time.Since(start))
	if err := w.Release(bg); err != nil {
		t.Fatal(err)
	}
}
