package dlock_test

import (
	"context"
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

	// Eight goroutines sharing the one client, as in one process.
	clients := []*dlock.Client{c, c, c, c, c, c, c, c}
	if n := contendDo(t, clients, "ap-contended", 20); n != 0 {
		t.Fatalf("%d overlaps through the auto-pipeliner", n)
	}
}
