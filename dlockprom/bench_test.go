package dlockprom_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockprom"
	"github.com/dlock-go/dlock/internal/redistest"
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
			e := dlock.RenewEvent{Name: "order:42", Result: dlock.ResultOK}
			b.ReportAllocs()
			for b.Loop() {
				bc.col.OnRenew(e)
			}
		})
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	col := dlockprom.NewCollector()
	acq := dlock.AcquireEvent{Name: "order:42", Result: dlock.ResultAcquired, Wait: time.Millisecond, Fence: 1}
	rel := dlock.ReleaseEvent{Name: "order:42", Result: dlock.ResultOK, Held: time.Second}
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
			b.ResetTimer()
			for b.Loop() {
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cmds.total())/float64(b.N), "cmds/op")
		})
	}
}
