package dlockprom_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockprom"
)

// One Collector observes the dlock client and is registered on the registry
// that serves /metrics, for example with
// http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{})).
func ExampleNewCollector() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()

	col := dlockprom.NewCollector()
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	locker := dlock.MustNew(rdb, dlock.WithObserver(col))
	defer locker.Close(ctx)

	lock, err := locker.TryAcquire(ctx, "order:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = locker.TryAcquire(ctx, "order:42") // busy: counted, not held
	fmt.Println(err != nil)
	printSamples(reg, "dlock_held")
	_ = lock.Release(ctx)

	printSamples(reg, "dlock_acquire_total", "dlock_release_total", "dlock_held")
	// Output:
	// true
	// dlock_held 1
	// dlock_acquire_total{result="acquired"} 1
	// dlock_acquire_total{result="busy"} 1
	// dlock_release_total{result="ok"} 1
	// dlock_held 0
}

// A name label for a bounded set of lock kinds: everything before the first
// colon, so "order:42" and "order:43" share the series of "order".
func ExampleWithNameLabel() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()

	col := dlockprom.NewCollector(dlockprom.WithNameLabel(func(name string) string {
		kind, _, _ := strings.Cut(name, ":")
		return kind
	}))
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	locker := dlock.MustNew(rdb, dlock.WithObserver(col))
	defer locker.Close(ctx)

	for _, name := range []string{"invoice:7", "invoice:8", "user:1"} {
		if _, err := locker.TryAcquire(ctx, name); err != nil {
			fmt.Println(err)
			return
		}
	}
	printSamples(reg, "dlock_held")
	// Output:
	// dlock_held{name="invoice"} 2
	// dlock_held{name="user"} 1
}

// printSamples prints the non-zero samples of counters and gauges, in the
// text format's notation.
func printSamples(g prometheus.Gatherer, names ...string) {
	mfs, err := g.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, name := range names {
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
				if v == 0 && mf.GetName() != "dlock_held" {
					continue
				}
				var ls []string
				for _, lp := range m.GetLabel() {
					ls = append(ls, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
				}
				if len(ls) > 0 {
					fmt.Printf("%s{%s} %v\n", name, strings.Join(ls, ","), v)
				} else {
					fmt.Printf("%s %v\n", name, v)
				}
			}
		}
	}
}
