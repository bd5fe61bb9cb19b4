package dlockprom_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockprom"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/observe"
)

// The observer runs on dlock's hot paths: the renewal loop reports every
// renewal of every held lock, and every Acquire and Release reports once.
func BenchmarkOnRenew(b *testing.B) {
	for _, bc := range []struct {
		name string
		col  *dlockprom.Collector
	}{
		{"plain", dlockprom.NewCollector()},
		{"name label", dlockprom.NewCollector(dlockprom.WithNameLabel(byKind))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := observe.RenewEvent{Name: "order:42", Result: observe.ResultOK}
			b.ReportAllocs()
			for b.Loop() {
				bc.col.OnRenew(e)
			}
		})
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	col := dlockprom.NewCollector()
	acq := observe.AcquireEvent{Name: "order:42", Result: observe.ResultAcquired, Wait: time.Millisecond, Fence: 1}
	rel := observe.ReleaseEvent{Name: "order:42", Result: observe.ResultOK, Held: time.Second}
	b.ReportAllocs()
	for b.Loop() {
		col.OnAcquire(bg, acq)
		col.OnRelease(bg, rel)
	}
}

// One listing of the fleet (a scrape with no cache) with n locks held, the
// cost an operator pays per cache TTL: wall time, and Redis commands sent.
func BenchmarkFleetScrape(b *testing.B) {
	for _, n := range []int{100, 1000, 10_000} {
		b.Run(fmt.Sprintf("locks=%d", n), func(b *testing.B) {
			srv := redistest.Start(b)
			holder := dlock.MustNew(srv.Client(b))
			b.Cleanup(func() { _ = holder.Close(bg) })
			for i := range n {
				// Unrenewed, with a lease longer than the benchmark: the
				// renewal loop would otherwise compete with the listing.
				if _, err := holder.TryAcquire(bg, fmt.Sprintf("order:%d", i), dlock.WithTTL(10*time.Minute), dlock.WithoutRenewal()); err != nil {
					b.Fatal(err)
				}
			}
			rdb := srv.Client(b)
			cmds := &cmdCounter{}
			rdb.AddHook(cmds)
			c := dlock.MustNew(rdb)
			b.Cleanup(func() { _ = c.Close(bg) })
			fc, err := dlockprom.NewFleetCollector(c, dlockprom.WithCacheTTL(0), dlockprom.WithScanBudget(0, time.Minute))
			if err != nil {
				b.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(fc)
			before := redisUsec(b, rdb)
			b.ResetTimer()
			for b.Loop() {
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cmds.total())/float64(b.N), "cmds/op")
			// Redis' own time on the listing's commands (INFO itself is
			// left out): what the scrapes cost the server everyone shares.
			b.ReportMetric((redisUsec(b, rdb)-before)/float64(b.N), "redis-µs/op")
		})
	}
}

// redisUsec is the time Redis spent in commands so far, by INFO
// commandstats, leaving out INFO's own.
func redisUsec(b *testing.B, rdb *redis.Client) float64 {
	b.Helper()
	info, err := rdb.Info(bg, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for line := range strings.SplitSeq(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_info:") {
			continue
		}
		_, stats, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for kv := range strings.SplitSeq(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
	}
	return total
}
