package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/observe"
)

// The quickstart: one Client per process, one TryAcquire per critical
// section, and a deferred Release that works even after ctx is cancelled.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := dlock.New(rdb)
	if err != nil {
		fmt.Println("bad options:", err)
		return
	}
	defer locker.Close(ctx)

	lock, err := locker.TryAcquire(ctx, "order:42", dlock.WithTTL(10*time.Second))
	if errors.Is(err, dlock.ErrNotObtained) {
		fmt.Println("someone else is processing order 42")
		return
	}
	if err != nil {
		fmt.Println("redis trouble:", err)
		return
	}
	defer lock.Release(ctx)

	// Pass the fence to the protected resource so it can refuse a writer
	// whose lease ran out.
	fmt.Println("processing", lock.Name(), "with a fence:", lock.Fence() > 0)
	// Output: processing order:42 with a fence: true
}

// A second acquirer is refused and told how long the holder's lease runs.
func ExampleNotObtainedError() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	first, _ := locker.TryAcquire(ctx, "report:daily", dlock.WithTTL(time.Minute))
	defer first.Release(ctx)

	_, err := locker.TryAcquire(ctx, "report:daily")
	var busy *dlock.NotObtainedError
	if errors.As(err, &busy) {
		fmt.Println("busy:", busy.Name, "retry after less than a minute:", busy.HolderTTL <= time.Minute)
	}
	// Output: busy: report:daily retry after less than a minute: true
}

// Release and Refresh act only while the lock is still ours: after the lease
// ran out and another holder took the lock, the old holder gets ErrNotHeld
// and the new holder keeps its lock.
func ExampleLock_Release() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	// A fixed lease, so the stall below outlives it (renewal would keep a
	// live holder's lock).
	lock, _ := locker.TryAcquire(ctx, "job:cleanup", dlock.WithTTL(50*time.Millisecond), dlock.WithoutRenewal())
	time.Sleep(100 * time.Millisecond) // the holder stalls past its lease
	fmt.Println("holder told:", errors.Is(context.Cause(lock.Context()), dlock.ErrLockLost))
	next, _ := locker.TryAcquire(ctx, "job:cleanup")

	err := lock.Release(ctx)
	fmt.Println("stale release:", errors.Is(err, dlock.ErrNotHeld))
	fmt.Println("new holder's release:", next.Release(ctx))
	// Output:
	// holder told: true
	// stale release: true
	// new holder's release: <nil>
}

// Do runs a function under the lock: acquire (waiting), run, release, also
// on panic. fn's context ends if the lock is lost, and Do's error then
// matches ErrLockLost.
func ExampleClient_Do() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	err := locker.Do(ctx, "job:nightly", func(ctx context.Context) error {
		fmt.Println("running the nightly job alone")
		return nil
	}, dlock.WithTTL(30*time.Second), dlock.WithWait(5*time.Second))
	fmt.Println("lost while running:", errors.Is(err, dlock.ErrLockLost), "error:", err)
	// Output:
	// running the nightly job alone
	// lost while running: false error: <nil>
}

// Acquire waits for a busy lock; the holder's release hands it straight to
// the first waiter, with a larger fence.
func ExampleClient_Acquire() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	first, _ := locker.TryAcquire(ctx, "stock:sku-1")
	go func() {
		time.Sleep(50 * time.Millisecond) // the first holder's work
		first.Release(ctx)
	}()
	second, err := locker.Acquire(ctx, "stock:sku-1", dlock.WithWait(5*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer second.Release(ctx)
	fmt.Println("handed over, fence grew:", second.Fence() > first.Fence())
	// Output: handed over, fence grew: true
}

// The function Do runs finds its lock in its context, for the fence the
// store checks: a writer whose lease ran out unnoticed is refused there.
func ExampleFromContext() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	_ = locker.Do(ctx, "invoice:7", func(ctx context.Context) error {
		lock, ok := dlock.FromContext(ctx)
		fmt.Println("holding", lock.Name(), ok, "with a fence:", lock.Fence() > 0)
		return nil // e.g. store.Write(ctx, lock.Fence(), invoice)
	})
	_, ok := dlock.FromContext(ctx)
	fmt.Println("outside Do:", ok)
	// Output:
	// holding invoice:7 true with a fence: true
	// outside Do: false
}

// Run runs a function under a lock acquired earlier, with Do's guarantees:
// the function's context ends when the lock is lost, the lock is released
// afterwards, also on panic.
func ExampleRun() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	lock, err := locker.TryAcquire(ctx, "batch:12")
	if err != nil {
		fmt.Println(err)
		return
	}
	err = dlock.Run(ctx, lock, func(ctx context.Context) error {
		fmt.Println("running under", lock.Name())
		return nil
	})
	fmt.Println("run:", err, "released:", errors.Is(context.Cause(lock.Context()), dlock.ErrReleased))
	// Output:
	// running under batch:12
	// run: <nil> released: true
}

// Every error names the operation and the lock, and matches one sentinel:
// errors.As finds the *Error, errors.Is the meaning.
func ExampleError() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	_, err := locker.TryAcquire(ctx, "report", dlock.WithTTL(time.Nanosecond))
	var de *dlock.Error
	if errors.As(err, &de) {
		fmt.Println(de.Op, de.Name, errors.Is(err, dlock.ErrInvalidTTL))
	}
	fmt.Println(err)
	// Output:
	// acquire report true
	// dlock: acquire "report": invalid ttl: 1ns is below the minimum 10ms
}

// An invalid option is refused by New, before anything runs.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	_, err := dlock.New(rdb, dlock.WithPrefix("app{1}:"))
	fmt.Println(errors.Is(err, dlock.ErrInvalidOption))
	fmt.Println(err)
	// Output:
	// true
	// dlock: new: invalid option: prefix "app{1}:" must not contain '{' or '}'
}

// Acquiring a lock the caller's context already holds fails at once:
// waiting would be waiting for the caller itself.
func ExampleErrReentrant() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	_ = locker.Do(ctx, "order:9", func(ctx context.Context) error {
		_, err := locker.Acquire(ctx, "order:9") // e.g. a helper that locks the order too
		fmt.Println(errors.Is(err, dlock.ErrReentrant), errors.Is(err, dlock.ErrNotObtained))
		return nil
	})
	// Output: true false
}

// Opt-in re-entry: a helper that locks the order itself can also run under
// a caller that holds the order already, when both say WithReentry. The
// lock is released with the last handle.
func ExampleWithReentry() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	ship := func(ctx context.Context) error { // locks the order on its own when called alone
		return locker.Do(ctx, "order:10", func(ctx context.Context) error {
			l, _ := dlock.FromContext(ctx)
			fmt.Println("shipping under fence", l.Fence() > 0)
			return nil
		}, dlock.WithReentry())
	}
	_ = locker.Do(ctx, "order:10", func(ctx context.Context) error {
		if err := ship(ctx); err != nil { // re-enters: no wait, no ErrReentrant
			return err
		}
		_, err := locker.TryAcquire(context.Background(), "order:10") // anyone else: busy
		fmt.Println("held after the nested release:", errors.Is(err, dlock.ErrNotObtained))
		return nil
	}, dlock.WithReentry())
	// Output:
	// shipping under fence true
	// held after the nested release: true
}

// Readers share a name; a writer waits for them, and while it waits, new
// readers wait behind it.
func ExampleWithShared() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	r1, _ := locker.TryAcquire(ctx, "catalog", dlock.WithShared())
	r2, err := locker.TryAcquire(ctx, "catalog", dlock.WithShared())
	fmt.Println("two readers at once:", err == nil)

	_, err = locker.TryAcquire(ctx, "catalog")
	fmt.Println("writer while they read:", errors.Is(err, dlock.ErrNotObtained))

	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	w, err := locker.TryAcquire(ctx, "catalog")
	fmt.Println("writer once they left:", err == nil, "fence above the readers':", err == nil && w.Fence() > r2.Fence())
	_ = w.Release(ctx)
	// Output:
	// two readers at once: true
	// writer while they read: true
	// writer once they left: true fence above the readers': true
}

// holdLog prints hold warnings: in a service, dlockprom counts them and
// WithLogger logs them at Warn.
type holdLog struct{ observe.BaseObserver }

func (holdLog) OnHoldWarning(e observe.HoldWarningEvent) {
	fmt.Printf("%s held past %v (TTL %v)\n", e.Name, e.Threshold, e.TTL)
}

// A job that runs past what its TTL was sized for is reported once: here
// at its release, as the lock is not renewed; a renewed lock is reported by
// the first renewal past the threshold, while it still runs.
func ExampleWithHoldWarning() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb, dlock.WithObserver(holdLog{}))
	defer locker.Close(ctx)

	l, err := locker.Acquire(ctx, "report:daily", dlock.WithTTL(time.Second), dlock.WithoutRenewal(),
		dlock.WithHoldWarning(20*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	time.Sleep(40 * time.Millisecond) // the work, slower than planned
	_ = l.Release(ctx)
	// Output: report:daily held past 20ms (TTL 1s)
}

// Many goroutines locking through one Client: calls made while others are
// out leave together in one pipeline (WithBatchDepth, on by default). A
// program whose redis.Hook must see every lock call as a command of its own
// turns it off with WithBatchDepth(0).
func ExampleWithBatchDepth() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb, dlock.WithBatchDepth(dlock.DefaultBatchDepth))
	defer locker.Close(ctx)

	var wg sync.WaitGroup
	var done atomic.Int64
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := locker.Do(ctx, fmt.Sprintf("order:%d", i), func(ctx context.Context) error {
				done.Add(1)
				return nil
			})
			if err != nil {
				fmt.Println(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println(done.Load(), "orders, each under its own lock")

	_, err := dlock.New(rdb, dlock.WithBatchDepth(-1))
	fmt.Println(err)
	// Output:
	// 32 orders, each under its own lock
	// dlock: new: invalid option: batch depth -1 is negative (0 turns batching off)
}
