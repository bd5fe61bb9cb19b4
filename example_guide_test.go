package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// The examples of docs/ttl.md: each Go block there is taken from here, and
// TestGuideCodeBlocksAreTested keeps them the same.

// A lock in an HTTP handler: the default TTL (10s) renewed while the handler
// runs, a wait bounded by what the request can afford, and the request's
// context, so a client that goes away stops the wait.
func Example_ttlHandler() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // the request's context
	defer cancel()

	// Renewal on, TTL 10s: a crashed instance blocks order 42 for 10s at most.
	lock, err := locker.Acquire(ctx, "order:42", dlock.WithWait(2*time.Second))
	if errors.Is(err, dlock.ErrNotObtained) {
		fmt.Println("409: order 42 is being changed by another request")
		return
	}
	if err != nil {
		fmt.Println("503:", err)
		return
	}
	defer lock.Release(context.Background())
	fmt.Println("changing", lock.Name())
	// Output: changing order:42
}

// A batch job: a TTL short enough that a crashed run frees the name soon,
// renewed while the job runs, and WithMaxHold as the business limit of the
// whole run. WithWait(0): a run that finds the job running skips.
func Example_ttlBatch() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(context.Background())
	ctx := context.Background()
	maxRun := 300 * time.Millisecond // an hour, say, in a real job

	err := locker.Do(ctx, "report:daily", func(ctx context.Context) error {
		<-ctx.Done() // the job: it stops when ctx ends (lost, or the limit passed)
		return ctx.Err()
	}, dlock.WithTTL(30*time.Second), dlock.WithMaxHold(maxRun), dlock.WithWait(0))
	fmt.Println("stopped at the hold limit:", errors.Is(err, dlock.ErrHoldLimit))
	// Output: stopped at the hold limit: true
}

// Renewal off: the lease is fixed, so the TTL is 3–5 times the worst case
// measured for the work, and the work stops when the lock's context ends:
// at the TTL less a tenth.
func Example_ttlWithoutRenewal() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(context.Background())
	ctx := context.Background()

	// Measured: 80ms at worst. A fixed lease of 5 times that.
	lock, err := locker.TryAcquire(ctx, "cache:rebuild", dlock.WithTTL(400*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		fmt.Println(err)
		return
	}
	start := time.Now()
	<-lock.Context().Done() // work that overran its estimate
	ended := time.Since(start)
	fmt.Println("ended before the lease:", ended < 400*time.Millisecond, "lost:", errors.Is(context.Cause(lock.Context()), dlock.ErrLockLost))
	// Output: ended before the lease: true lost: true
}

// The go-redis settings that matter for locks (docs/requirements.md).
func Example_clientSettings() {
	rdb := redis.NewClient(&redis.Options{
		Addr: exampleAddr,
		// Acquire's wait and every call's deadline come from the context:
		// without this, go-redis waits for ReadTimeout on a dead link.
		ContextTimeoutEnabled: true,
		// About the lock calls in flight at once (acquire, release, the
		// renewal pipeline); waiters wait on one pub/sub connection.
		PoolSize: 32,
		// Retries are safe: every lock script recognises its own token.
		MaxRetries: 3,
	})
	defer rdb.Close()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
		ContextTimeoutEnabled: true,
		// A dead primary's slots are found on the new one within a second,
		// not the 60s default.
		ClusterStateReloadInterval: time.Second,
	})
	defer cluster.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(context.Background())
	fmt.Println("ready")
	// Output: ready
}
