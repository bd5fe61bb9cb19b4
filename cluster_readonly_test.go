package dlock_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A Cluster client that reads from replicas (ReadOnly, RouteRandomly,
// RouteByLatency) still takes, checks and releases locks on the primaries:
// every lock script is a write, and Inspect, which reads, sees the holder
// at once, not a replica's older state.
func TestClusterClientReadingReplicasLocksOnPrimaries(t *testing.T) {
	cs := redistest.StartCluster(t)
	addrs := cs.NodeAddrs()
	for _, route := range []struct {
		name string
		opts redis.ClusterOptions
	}{
		{"ReadOnly", redis.ClusterOptions{ReadOnly: true}},
		{"RouteRandomly", redis.ClusterOptions{RouteRandomly: true}},
		{"RouteByLatency", redis.ClusterOptions{RouteByLatency: true}},
	} {
		t.Run(route.name, func(t *testing.T) {
			opts := route.opts
			opts.Addrs, opts.ContextTimeoutEnabled = addrs, true
			rdb := redis.NewClusterClient(&opts)
			t.Cleanup(func() { _ = rdb.Close() })
			a, b := newLocker(t, rdb), newLocker(t, cs.ClusterClient(t))
			for i := range 30 {
				name := fmt.Sprintf("%s-%d", route.name, i)
				l, err := a.TryAcquire(bg, name, dlock.WithTTL(5*time.Second))
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if _, err := b.TryAcquire(bg, name); !errors.Is(err, dlock.ErrNotObtained) {
					t.Fatalf("%s: another client took a held lock: %v", name, err)
				}
				info, err := a.Inspect(bg, name)
				if err != nil || info.Token != l.Token() {
					t.Fatalf("%s: Inspect right after the grant: %+v, %v; want the holder", name, info, err)
				}
				if _, err := l.TTL(bg); err != nil {
					t.Fatalf("%s: TTL: %v", name, err)
				}
				if err := l.Release(bg); err != nil {
					t.Fatalf("%s: Release: %v", name, err)
				}
				if _, err := a.Inspect(bg, name); !errors.Is(err, dlock.ErrNotHeld) {
					t.Fatalf("%s: Inspect right after the release: %v; want not held", name, err)
				}
			}
		})
	}
}
