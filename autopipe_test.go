package dlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// go-redis' auto-pipeliner (experimental in go-redis) batches the commands
// of many goroutines into shared writes; the README suggests it for many
// uncontended goroutines. Everything dlock does must work through it.
func TestThroughAutoPipeliner(t *testing.T) {
	_, rdb, _ := setup(t)
	ap, err := rdb.AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ap.Close() })
	c := newLocker(t, ap)

	l := mustAcquire(t, c, "ap", dlock.WithTTL(300*time.Millisecond))
	time.Sleep(time.Second) // renewed through pipelines on the auto-pipeliner
	if l.Context().Err() != nil {
		t.Fatalf("lost through the auto-pipeliner: %v", context.Cause(l.Context()))
	}
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}

	var inside, overlaps atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				err := c.Do(bg, "ap-contended", func(context.Context) error {
					if inside.Add(1) > 1 {
						overlaps.Add(1)
					}
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					return nil
				}, dlock.WithWait(10*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlaps through the auto-pipeliner", overlaps.Load())
	}
}
