// Command first is the README's first program: Do for work that must not
// overlap, then TryAcquire with its errors handled before the lock is used.
// It reads the Redis address from DLOCK_URL (host:port), as the dlock CLI
// does, or uses 127.0.0.1:6379:
//
//	DLOCK_URL=127.0.0.1:6390 go run ./examples/first
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

func main() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close(ctx)

	// Do waits for the lock (up to 10 s), runs the function, renews the
	// lease meanwhile and releases it. ctx ends if the lock is lost.
	err = locker.Do(ctx, "order:42", func(ctx context.Context) error {
		lock, _ := dlock.FromContext(ctx)
		fmt.Println("processing order 42, fence", lock.Fence())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}

	// TryAcquire makes one attempt. Handle the error before using the lock.
	lock, err := locker.TryAcquire(ctx, "report:nightly", dlock.WithTTL(30*time.Second))
	if errors.Is(err, dlock.ErrNotObtained) {
		fmt.Println("busy:", err) // the error names the holder
		return
	}
	if err != nil {
		log.Fatal(err) // Redis down, a bad name or TTL: no lock to release
	}
	defer lock.Release(ctx)
	fmt.Println("writing the nightly report, fence", lock.Fence())
}

// addr is DLOCK_URL (host:port), or Redis' default address.
func addr() string {
	if a := os.Getenv("DLOCK_URL"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}
