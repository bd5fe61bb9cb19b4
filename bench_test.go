package dlock_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// BenchmarkTryAcquireRelease measures one uncontended acquire and release:
// two round trips, each one script. "serial" is one goroutine (latency:
// nothing to batch); "parallel" 16 goroutines on 2 cores, each on its own
// name, with the Client's batching (WithBatchDepth) and, beside it,
// without ("parallel-nobatch"). Allocations per cycle are reported: the
// client path is what this guards (bench/ measures against other
// libraries).
func BenchmarkTryAcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	c := newLocker(b, srv.Client(b))
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l, err := c.TryAcquire(bg, "bench")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(bg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) { parallelCycles(b, c) })
	b.Run("parallel-nobatch", func(b *testing.B) {
		parallelCycles(b, newLocker(b, srv.Client(b), dlock.WithBatchDepth(0)))
	})
}

// parallelCycles runs acquire-release cycles on 16 goroutines (8 per core),
// each on its own name: uncontended, as many independent orders would be.
func parallelCycles(b *testing.B, c *dlock.Client) {
	b.ReportAllocs()
	b.SetParallelism(8)
	var id atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		name := "bench-" + strconv.FormatInt(id.Add(1), 10)
		for pb.Next() {
			l, err := c.TryAcquire(bg, name)
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.Release(bg); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkSemaphore measures one uncontended permit: TryAcquire and
// Release of WithPermits(8), beside BenchmarkTryAcquireRelease's exclusive lock.
// "held7" takes a permit while 7 others are held: the scripts read the
// permits zset, whose size is the cost that grows with n.
func BenchmarkSemaphore(b *testing.B) {
	srv := redistest.Start(b)
	c := newLocker(b, srv.Client(b))
	cycle := func(b *testing.B, name string) {
		b.ReportAllocs()
		for b.Loop() {
			l, err := c.TryAcquire(bg, name, dlock.WithPermits(8))
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(bg); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("free", func(b *testing.B) { cycle(b, "sem-free") })
	b.Run("held7", func(b *testing.B) {
		for range 7 {
			l, err := c.TryAcquire(bg, "sem-held", dlock.WithPermits(8), dlock.WithTTL(time.Minute))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Release(bg) })
		}
		cycle(b, "sem-held")
	})
}
