package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestClusterCoreWaitingAndRenewal(t *testing.T) {
	cs := redistest.StartCluster(t)
	cc := cs.ClusterClient(t)
	c := newLocker(t, cc)

	// Many names: their keys spread over every primary's slots.
	const n = 60
	var locks []dlock.Lock
	for i := range n {
		locks = append(locks, mustAcquire(t, c, fmt.Sprintf("slot-%d", i), dlock.WithTTL(500*time.Millisecond)))
	}
	time.Sleep(1500 * time.Millisecond) // three TTLs: renewal pipelines span all nodes
	for _, l := range locks {
		if l.Context().Err() != nil {
			t.Fatalf("%s lost in the cluster: %v", l.Name(), context.Cause(l.Context()))
		}
	}
	all, err := c.List(bg, "slot-*", 0)
	if err != nil || len(all) != n {
		t.Fatalf("List over all primaries: %d locks, %v; want %d", len(all), err, n)
	}
	perNode := map[string]int{}
	for _, l := range locks {
		node, err := cc.MasterForKey(bg, "dlock:{"+l.Name()+"}")
		if err != nil {
			t.Fatal(err)
		}
		perNode[node.Options().Addr]++
	}
	if len(perNode) != 3 {
		t.Fatalf("locks on %d primaries, want all 3: %v", len(perNode), perNode)
	}

	// A waiter listens on a shard channel of its lock's slot, on the node
	// that serves it: hand-off messages stay on that shard.
	holder := mustAcquire(t, c, "sharded", dlock.WithTTL(5*time.Second))
	waiter := newLocker(t, cs.ClusterClient(t))
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(bg, "sharded", dlock.WithWait(10*time.Second))
		if err == nil {
			err = l.Release(bg)
		}
		got <- err
	}()
	node, err := cc.MasterForKey(bg, "dlock:{sharded}")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a shard channel subscriber on the lock's node", func() bool {
		chans, _ := node.PubSubShardChannels(bg, "dlock:{sharded}:w:*").Result()
		return len(chans) == 1
	})
	if chans, _ := node.PubSubChannels(bg, "dlock:{sharded}*").Result(); len(chans) != 0 {
		t.Fatalf("plain pub/sub channels in a Cluster: %v", chans)
	}
	if err := holder.Release(bg); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter on a shard channel: %v", err)
	}

	// Waiting and hand-off between clients of their own, as processes.
	var clients []*dlock.Client
	for range 3 {
		clients = append(clients, newLocker(t, cs.ClusterClient(t)))
	}
	if n := contendDo(t, clients, "slot-7-contended", 10); n != 0 {
		t.Fatalf("%d overlapping holders in the cluster", n)
	}
	for _, l := range locks {
		if err := l.Release(bg); err != nil {
			t.Fatal(err)
		}
	}
}

// failoverRun drives contenders on one name through a failover and counts
// what an operator cares about: acquisitions before and after, locks lost,
// and overlaps seen by a resource that the failover does not touch.
type failoverRun struct {
	before, after, lost, overlaps, errs atomic.Int64
}

func (r *failoverRun) String() string {
	return fmt.Sprintf("acquisitions %d before / %d after, lost %d, doubly held %d, errors %d",
		r.before.Load(), r.after.Load(), r.lost.Load(), r.overlaps.Load(), r.errs.Load())
}

func runFailover(t *testing.T, clients []*dlock.Client, resource *redis.Client, name string, opts []dlock.AcquireOption, failover func()) *failoverRun {
	t.Helper()
	run := &failoverRun{}
	var after atomic.Bool
	ctx, cancel := context.WithCancel(bg)
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				l, err := c.Acquire(ctx, name, append(opts, dlock.WithTTL(time.Second), dlock.WithWait(3*time.Second))...)
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, dlock.ErrNotObtained) {
						run.errs.Add(1)
						time.Sleep(20 * time.Millisecond)
					}
					continue
				}
				if after.Load() {
					run.after.Add(1)
				} else {
					run.before.Add(1)
				}
				if n, _ := resource.Incr(bg, "inside:"+name).Result(); n > 1 {
					run.overlaps.Add(1)
				}
				time.Sleep(5 * time.Millisecond)
				resource.Decr(bg, "inside:"+name)
				if l.Context().Err() != nil {
					run.lost.Add(1)
				}
				_ = l.Release(bg)
			}
		})
	}
	time.Sleep(time.Second)
	after.Store(true)
	failover()
	time.Sleep(3 * time.Second)
	cancel()
	wg.Wait()
	return run
}

func TestSentinelFailoverMeasured(t *testing.T) {
	resource := redistest.Start(t).Client(t) // never faulted
	for _, tc := range []struct {
		name string
		opts []dlock.AcquireOption
	}{
		{"async replication", nil},
		{"WithReplicas(1)", []dlock.AcquireOption{dlock.WithReplicas(1, 200*time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := redistest.StartSentinel(t, redistest.WithReplicas(2))
			var clients []*dlock.Client
			for range 4 {
				clients = append(clients, newLocker(t, st.FailoverClient(t)))
			}
			run := runFailover(t, clients, resource, "sentinel-"+tc.name, tc.opts, func() {
				st.KillPrimary()
				if _, err := st.WaitNewPrimary(bg); err != nil {
					t.Error(err)
				}
			})
			t.Logf("Sentinel, primary killed, %s: %v", tc.name, run)
			if run.after.Load() == 0 {
				t.Fatalf("no acquisition after the failover: %v", run)
			}
			if tc.opts != nil && run.overlaps.Load() != 0 {
				t.Fatalf("doubly held with replica confirmation: %v", run)
			}
		})
	}
}

func TestClusterFailoverMeasured(t *testing.T) {
	resource := redistest.Start(t).Client(t)
	for _, tc := range []struct {
		name string
		opts []dlock.AcquireOption
	}{
		{"async replication", nil},
		{"WithReplicas(1)", []dlock.AcquireOption{dlock.WithReplicas(1, 200*time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := redistest.StartCluster(t)
			var clients []*dlock.Client
			for range 4 {
				clients = append(clients, newLocker(t, cs.ClusterClient(t)))
			}
			name := "cluster-" + tc.name
			node, err := cs.ClusterClient(t).MasterForKey(bg, "dlock:{"+name+"}")
			if err != nil {
				t.Fatal(err)
			}
			primary := node.Options().Addr
			run := runFailover(t, clients, resource, name, tc.opts, func() {
				if err := cs.KillNode(primary); err != nil {
					t.Error(err)
				}
				if _, err := cs.FailoverReplicaOf(bg, primary); err != nil {
					t.Error(err)
				}
			})
			t.Logf("Cluster, primary of the lock's slot killed, %s: %v", tc.name, run)
			// The promoted replica has no replica of its own: with
			// confirmation required, refusing locks is the right answer.
			if tc.opts == nil && run.after.Load() == 0 {
				t.Fatalf("no acquisition after the failover: %v", run)
			}
			if tc.opts != nil && run.overlaps.Load() != 0 {
				t.Fatalf("doubly held with replica confirmation: %v", run)
			}
		})
	}
}
