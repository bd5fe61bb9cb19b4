package dlockprom_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockprom"
)

// A FleetCollector shows the locks every process holds in Redis, not only
// this one's: here two workers hold shipments and a third waits. One
// service (or `dlock serve`) registers it; the figures are read from Redis
// when Prometheus scrapes, at most once per cache TTL.
func ExampleNewFleetCollector() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	// The workers: other processes in real life.
	worker := dlock.MustNew(rdb, dlock.WithPrefix("example-fleet:"))
	defer worker.Close(ctx)
	for _, name := range []string{"shipment:1", "shipment:2", "leader"} {
		if _, err := worker.TryAcquire(ctx, name); err != nil {
			fmt.Println(err)
			return
		}
	}
	// The service that exports the fleet: its own Client, same prefix.
	client := dlock.MustNew(rdb, dlock.WithPrefix("example-fleet:"))
	defer client.Close(ctx)
	fc, err := dlockprom.NewFleetCollector(client,
		dlockprom.WithCacheTTL(10*time.Second),
		dlockprom.WithScanBudget(50_000, 2*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(fc)

	// printSamples leaves out zeros: dlock_fleet_truncated is 0, the
	// listing saw the whole keyspace.
	printSamples(reg, "dlock_fleet_locks", "dlock_fleet_truncated", "dlock_fleet_scans_total")
	// Output:
	// dlock_fleet_locks{group="leader",kind="exclusive"} 1
	// dlock_fleet_locks{group="shipment",kind="exclusive"} 2
	// dlock_fleet_scans_total 1
}

// Groups of the caller's: here by the part before the last ':', at most two
// of them, the rest counted as "other"; and only the names under "eu:".
func ExampleWithGroups() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	client := dlock.MustNew(rdb, dlock.WithPrefix("example-groups:"))
	defer client.Close(ctx)
	for _, name := range []string{"eu:cart:1", "eu:cart:2", "eu:cart:3", "eu:pay:1", "eu:pay:2", "eu:mail:1", "eu:sms:1", "us:cart:1"} {
		if _, err := client.TryAcquire(ctx, name); err != nil {
			fmt.Println(err)
			return
		}
	}
	fc, err := dlockprom.NewFleetCollector(client,
		dlockprom.WithMatch("eu:*"),
		dlockprom.WithGroups(func(name string) string {
			i := strings.LastIndexByte(name, ':')
			return name[:max(i, 0)]
		}, 2))
	if err != nil {
		fmt.Println(err)
		return
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(fc)
	printSamples(reg, "dlock_fleet_locks")
	// Output:
	// dlock_fleet_locks{group="eu:cart",kind="exclusive"} 3
	// dlock_fleet_locks{group="eu:pay",kind="exclusive"} 2
	// dlock_fleet_locks{group="other",kind="exclusive"} 2
}

func ExampleGroupBeforeColon() {
	for _, name := range []string{"order:42", "order:43:items", "leader"} {
		fmt.Println(name, "->", dlockprom.GroupBeforeColon(name))
	}
	// Output:
	// order:42 -> order
	// order:43:items -> order
	// leader -> leader
}
