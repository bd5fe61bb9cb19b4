package dlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/observe"
)

// renewCounter counts the confirmed renewals of each lock name.
type renewCounter struct {
	observe.BaseObserver
	mu sync.Mutex
	ok map[string]int
}

func (r *renewCounter) OnRenew(e observe.RenewEvent) {
	if e.Result != observe.ResultOK {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ok[e.Name]++
}

func (r *renewCounter) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok[name]
}

// namesOn returns n lock names whose keys live on the Cluster primary addr.
func namesOn(t *testing.T, cc *redis.ClusterClient, addr, prefix string, n int) []string {
	t.Helper()
	var names []string
	for i := 0; len(names) < n && i < 10000; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		m, err := cc.MasterForKey(bg, "dlock:{"+name+"}")
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == addr {
			names = append(names, name)
		}
	}
	if len(names) < n {
		t.Fatalf("found %d names on %s, want %d", len(names), addr, n)
	}
	return names
}

// A Cluster primary that hangs (SIGSTOP, before the cluster fails it over)
// costs only the locks whose keys it holds: their leases run out and they
// are lost, while the locks on the healthy primaries go on being renewed
// and stay held. Renewals go out per node, so neither a pipeline that spans
// the nodes (which returns only when every node's part did) nor a loop
// that waits for the stopped node's read can hold back the others'.
func TestHungPrimaryCostsOnlyItsOwnLocks(t *testing.T) {
	// No replicas and a node timeout far beyond the test: the stopped
	// primary is neither failed over nor marked failing, so the cluster
	// stays up on the other two.
	cs := redistest.StartCluster(t, redistest.WithReplicas(0), redistest.WithServerArgs("--cluster-node-timeout", "60000"))
	cc := cs.ClusterClient(t)
	rec := &renewCounter{ok: map[string]int{}}
	c := newLocker(t, cc, dlock.WithObserver(rec))

	stopped := cs.Addrs[0]
	var healthy []string
	for i, addr := range cs.Addrs[1:] {
		healthy = append(healthy, namesOn(t, cc, addr, fmt.Sprintf("ok%d", i), 3)...)
	}
	doomed := namesOn(t, cc, stopped, "hung", 2)

	locks := map[string]dlock.Lock{}
	for i, name := range append(append([]string{}, healthy...), doomed...) {
		ttl := time.Second
		if i%2 == 1 {
			ttl = 2 * time.Second // longer leases must not wait on the stopped node's read either
		}
		locks[name] = mustAcquire(t, c, name, dlock.WithTTL(ttl))
	}
	base := map[string]int{}
	for _, name := range healthy {
		base[name] = rec.count(name)
	}

	cs.Node(stopped).Pause()
	t.Cleanup(cs.Node(stopped).Resume)

	// The stopped node's locks end at their lease deadline.
	for _, name := range doomed {
		select {
		case <-locks[name].Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s, on the stopped primary, still held 5 s after the stop", name)
		}
	}
	// Each healthy lock is renewed three more times (over one to two
	// TTLs, past the doomed locks' deadlines) and is never lost.
	deadline := time.Now().Add(10 * time.Second)
	for _, name := range healthy {
		for rec.count(name) < base[name]+3 {
			select {
			case <-locks[name].Context().Done():
				t.Fatalf("%s, on a healthy primary, was lost while %s was stopped: %v",
					name, stopped, context.Cause(locks[name].Context()))
			case <-time.After(5 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s, on a healthy primary: %d renewals since the stop, want 3", name, rec.count(name)-base[name])
			}
		}
	}
	for _, name := range healthy {
		if err := locks[name].Context().Err(); err != nil {
			t.Fatalf("%s, on a healthy primary, ended: %v", name, context.Cause(locks[name].Context()))
		}
		if got := cc.HGet(bg, "dlock:{"+name+"}", "token").Val(); got != locks[name].Token() {
			t.Fatalf("%s: its node holds token %q, want ours", name, got)
		}
	}
}
