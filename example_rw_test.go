package dlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// A writer waits for a reader; a new reader is kept out behind it, unless it
// skips waiting writers.
func ExampleWithoutWriterPriority() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	readers, writers := dlock.MustNew(rdb), dlock.MustNew(rdb)
	defer readers.Close(ctx)
	defer writers.Close(ctx)

	r, _ := readers.TryAcquire(ctx, "prices", dlock.WithShared())
	got := make(chan dlock.Lock, 1)
	go func() {
		w, _ := writers.Acquire(ctx, "prices", dlock.WithWait(5*time.Second))
		got <- w
	}()
	for rdb.ZCard(ctx, "dlock:{prices}:q").Val() == 0 { // the writer lines up
		time.Sleep(time.Millisecond)
	}

	_, err := readers.TryAcquire(ctx, "prices", dlock.WithShared())
	fmt.Println("new reader behind a waiting writer:", err != nil)
	late, err := readers.TryAcquire(ctx, "prices", dlock.WithShared(), dlock.WithoutWriterPriority())
	fmt.Println("reader that skips it:", err == nil)

	_ = late.Release(ctx)
	_ = r.Release(ctx)
	w := <-got
	fmt.Println("writer after the readers:", w != nil)
	_ = w.Release(ctx)
	// Output:
	// new reader behind a waiting writer: true
	// reader that skips it: true
	// writer after the readers: true
}

// Inspect tells who reads a shared lock and who waits for it.
func ExampleReaderInfo() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	a := dlock.MustNew(rdb, dlock.WithDefaultOwner("indexer-1"))
	b := dlock.MustNew(rdb, dlock.WithDefaultOwner("indexer-2"))
	defer a.Close(ctx)
	defer b.Close(ctx)

	ra, _ := a.TryAcquire(ctx, "index", dlock.WithShared(), dlock.WithTTL(time.Minute))
	rb, _ := b.TryAcquire(ctx, "index", dlock.WithShared(), dlock.WithTTL(time.Minute))
	defer ra.Release(ctx)
	defer rb.Release(ctx)

	info, _ := a.Inspect(ctx, "index")
	fmt.Println(info.Kind, len(info.Readers))
	for _, r := range info.Readers {
		fmt.Println(r.Owner, r.Lease, r.TTL > 50*time.Second)
	}
	// Output:
	// shared 2
	// indexer-1 1m0s true
	// indexer-2 1m0s true
}
