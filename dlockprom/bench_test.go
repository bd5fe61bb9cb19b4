package dlockprom_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockprom"
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
