package dlockgocron_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockgocron"
)

// Two instances run the same job; the second fires after the first's run is
// over, as an instance whose clock is late does. The min hold keeps the lock
// taken, so the second skips the run.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	instance := func(name string) {
		jobs, err := dlockgocron.New(locker, time.Minute, 10*time.Minute)
		if err != nil {
			fmt.Println(err)
			return
		}
		done := make(chan struct{})
		s, _ := gocron.NewScheduler(gocron.WithDistributedLocker(jobs))
		_, err = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
			gocron.NewTask(func() { fmt.Println(name, "sends the report") }),
			gocron.WithName("report:daily"),
			gocron.WithEventListeners(
				gocron.AfterJobRuns(func(uuid.UUID, string) { close(done) }),
				gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
					fmt.Println(name, "skips the run, busy:", errors.Is(err, dlock.ErrNotObtained))
					close(done)
				})))
		if err != nil {
			fmt.Println(err)
			return
		}
		s.Start()
		<-done
		_ = s.Shutdown()
	}
	instance("instance A")
	instance("instance B")
	// Output:
	// instance A sends the report
	// instance B skips the run, busy: true
}
