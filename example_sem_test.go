package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// At most two encoders at once across every process: each takes one of two
// permits of the name. The third is refused (TryAcquire) or waits
// (Acquire) until a permit comes back; a holder that crashed gives its
// permit back when its TTL runs out.
func ExampleWithPermits() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	a, _ := locker.TryAcquire(ctx, "encoder", dlock.WithPermits(2), dlock.WithTTL(10*time.Second))
	b, _ := locker.TryAcquire(ctx, "encoder", dlock.WithPermits(2), dlock.WithTTL(10*time.Second))
	fmt.Println("two permits held, fences grow:", b.Fence() > a.Fence())

	_, err := locker.TryAcquire(ctx, "encoder", dlock.WithPermits(2))
	fmt.Println("a third:", errors.Is(err, dlock.ErrNotObtained))

	_, err = locker.TryAcquire(ctx, "encoder", dlock.WithPermits(3))
	fmt.Println("another n while permits are held:", errors.Is(err, dlock.ErrMismatch))

	info, _ := locker.Inspect(ctx, "encoder")
	fmt.Println(info.Kind, len(info.Holders), "of", info.Permits)

	_ = a.Release(ctx)
	c, err := locker.TryAcquire(ctx, "encoder", dlock.WithPermits(2))
	fmt.Println("after a release:", err == nil)
	_ = b.Release(ctx)
	_ = c.Release(ctx)
	// Output:
	// two permits held, fences grow: true
	// a third: true
	// another n while permits are held: true
	// semaphore 2 of 2
	// after a release: true
}
