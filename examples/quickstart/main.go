// Command quickstart shows dlock's core in a few lines: two workers race for
// the same order, exactly one processes it, and the loser learns how long to
// wait. Run it against a Redis on 127.0.0.1:6379, or name yours in
// DLOCK_URL as the dlock CLI reads it (host:port, or redis://host:port/db):
//
//	DLOCK_URL=127.0.0.1:6390 go run ./examples/quickstart
//
// (`make demo` runs another program: `dlock demo`, a naive lock against
// dlock.)
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

func main() {
	opts := &redis.Options{Addr: "127.0.0.1:6379"}
	if v := os.Getenv("DLOCK_URL"); strings.Contains(v, "://") {
		var err error
		if opts, err = redis.ParseURL(v); err != nil {
			log.Fatal(err)
		}
	} else if v != "" {
		opts.Addr = v // host:port
	}
	opts.ContextTimeoutEnabled = true
	ctx := context.Background()
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	locker, err := dlock.New(rdb, dlock.WithDefaultOwner("quickstart"))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close(ctx)

	var wg sync.WaitGroup
	for _, worker := range []string{"worker-a", "worker-b"} {
		wg.Go(func() { process(ctx, locker, worker, "order:42") })
	}
	wg.Wait()
}

// process handles an order if it can take the order's lock.
func process(ctx context.Context, locker dlock.Locker, worker, order string) {
	lock, err := locker.TryAcquire(ctx, order, dlock.WithTTL(5*time.Second))
	var busy *dlock.NotObtainedError
	switch {
	case errors.As(err, &busy):
		fmt.Printf("%s: %s is busy, held for another %v; skipping\n", worker, order, busy.HolderTTL.Round(time.Millisecond))
		return
	case err != nil:
		log.Fatalf("%s: %v", worker, err)
	}
	defer func() {
		if err := lock.Release(ctx); err != nil {
			log.Printf("%s: release: %v", worker, err)
		}
	}()
	fmt.Printf("%s: processing %s with fence %d\n", worker, order, lock.Fence())
	time.Sleep(200 * time.Millisecond) // the work
	fmt.Printf("%s: done with %s\n", worker, order)
}
