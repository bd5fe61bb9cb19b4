package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// A scheduled job that runs once per tick across instances: each instance
// tries the tick's lock and skips the run when it is busy. The job is quick,
// but the lock stays taken for the min hold after its release, so an
// instance whose clock or scheduler is late still skips the same tick.
func ExampleWithMinHold() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	tick := func(instance string) {
		err := locker.Do(ctx, "job:report", func(ctx context.Context) error {
			fmt.Println(instance, "runs the report")
			return nil // done in a few ms
		}, dlock.WithWait(0), dlock.WithTTL(30*time.Second), dlock.WithMinHold(time.Minute))
		if errors.Is(err, dlock.ErrNotObtained) {
			fmt.Println(instance, "skips the tick")
		}
	}
	tick("instance A")
	tick("instance B") // a second late: the run is over, the lock is not
	// Output:
	// instance A runs the report
	// instance B skips the tick
}
