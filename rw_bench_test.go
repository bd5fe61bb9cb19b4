package dlock_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// BenchmarkShared measures read locks on one name: readers only (every
// acquisition joins the others: one script each way), and mixed, one write
// in every ten acquisitions, which waits for the readers to drain and makes
// the readers behind it wait (hand-offs to writers and to batches of
// readers).
func BenchmarkShared(b *testing.B) {
	srv := redistest.Start(b)
	b.Run("readers-only", func(b *testing.B) {
		c := newLocker(b, srv.Client(b))
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l, err := c.TryAcquire(bg, "bench-shared", dlock.WithShared())
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
	})
	b.Run("mixed", func(b *testing.B) {
		// A Client per goroutine, as separate processes: one Client's
		// waiters of a name line up locally, which would hide the queue
		// in Redis.
		const clients = 8
		cs := make([]*dlock.Client, clients)
		for i := range cs {
			cs[i] = newLocker(b, srv.Client(b))
		}
		var id, n atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(clients / 2) // 2 cores: 8 goroutines
		b.RunParallel(func(pb *testing.PB) {
			c := cs[int(id.Add(1)-1)%clients]
			for pb.Next() {
				opts := []dlock.AcquireOption{dlock.WithWait(5 * time.Second)}
				if n.Add(1)%10 != 0 {
					opts = append(opts, dlock.WithShared())
				}
				l, err := c.Acquire(bg, "bench-mixed", opts...)
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
	})
	b.Run("writers-only", func(b *testing.B) {
		// The same loop with writes only, to compare mixed against.
		cs := make([]*dlock.Client, 8)
		for i := range cs {
			cs[i] = newLocker(b, srv.Client(b))
		}
		var id atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			c := cs[int(id.Add(1)-1)%len(cs)]
			for pb.Next() {
				l, err := c.Acquire(bg, "bench-writers", dlock.WithWait(5*time.Second))
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
	})
}
