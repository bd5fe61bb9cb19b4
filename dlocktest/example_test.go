package dlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// runNightly is code under test: it writes the nightly report unless
// another instance is writing it, and hands the fence to the store.
func runNightly(ctx context.Context, locker dlock.Locker, write func(ctx context.Context, fence int64) error) (ran bool, err error) {
	err = locker.Do(ctx, "report:nightly", func(ctx context.Context) error {
		lock, _ := dlock.FromContext(ctx)
		return write(ctx, lock.Fence())
	}, dlock.WithWait(0))
	if errors.Is(err, dlock.ErrNotObtained) {
		return false, nil // another instance has it: not an error
	}
	return err == nil, err
}

// A unit test of a function that takes a dlock.Locker: the double stands
// for Redis, and the test holds the lock itself to play the other instance.
func Example() {
	ctx := context.Background()
	locker := dlocktest.MustNew()
	defer locker.Close(ctx)
	write := func(ctx context.Context, fence int64) error {
		fmt.Println("report written with fence", fence)
		return nil
	}

	ran, err := runNightly(ctx, locker, write)
	fmt.Println("alone:", ran, err)

	other, _ := locker.TryAcquire(ctx, "report:nightly") // another instance
	ran, err = runNightly(ctx, locker, write)
	fmt.Println("while another instance runs:", ran, err)
	other.Release(ctx)
	// Output:
	// report written with fence 1
	// alone: true <nil>
	// while another instance runs: false <nil>
}

// Expire ends a lease while the work runs, as a holder cut off from Redis
// would see it: the work's context ends, and Do reports the loss.
func ExampleLocker_Expire() {
	ctx := context.Background()
	locker := dlocktest.MustNew()
	defer locker.Close(ctx)

	err := locker.Do(ctx, "queue:emails", func(ctx context.Context) error {
		locker.Expire("queue:emails") // in a real test: from the test, while the worker runs
		<-ctx.Done()                  // the worker stops
		return nil
	})
	fmt.Println("Do reports the loss:", errors.Is(err, dlock.ErrLockLost))
	fmt.Println("free again:", !locker.Held("queue:emails"))
	// Output:
	// Do reports the loss: true
	// free again: true
}

// fencedStore keeps the largest fence it has seen and refuses writes with a
// smaller one: the resource side of fencing.
type fencedStore struct {
	mu    sync.Mutex
	fence int64
}

func (s *fencedStore) write(fence int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.fence {
		return fmt.Errorf("fence %d is below %d", fence, s.fence)
	}
	s.fence = fence
	return nil
}

// ForceUnlock leaves two holders for a while, as a key deleted in Redis
// does: the stale one learns at its next renewal. The fence is what keeps
// the store safe meanwhile.
func ExampleLocker_ForceUnlock() {
	ctx := context.Background()
	clock := dlocktest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	locker := dlocktest.MustNew(dlocktest.WithClock(clock))
	defer locker.Close(ctx)
	store := &fencedStore{}

	stale, _ := locker.TryAcquire(ctx, "account:7", dlock.WithTTL(3*time.Second))
	locker.ForceUnlock("account:7")
	fresh, _ := locker.TryAcquire(ctx, "account:7")
	fmt.Println("fresh write:", store.write(fresh.Fence()))
	fmt.Println("stale holder still believes it holds:", stale.Context().Err() == nil)
	fmt.Println("stale write:", store.write(stale.Fence()))

	clock.Advance(time.Second) // the stale holder's next renewal
	fmt.Println("stale holder told:", context.Cause(stale.Context()))
	// Output:
	// fresh write: <nil>
	// stale holder still believes it holds: true
	// stale write: fence 1 is below 2
	// stale holder told: dlock: lock lost: renewal found the lock gone or taken over
}

// A manual clock moves only when told: a lease without renewal ends exactly
// at its TTL, and the waiter gets the lock at that instant.
func ExampleNewClock() {
	ctx := context.Background()
	clock := dlocktest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	locker := dlocktest.MustNew(dlocktest.WithClock(clock))
	defer locker.Close(ctx)

	lock, _ := locker.TryAcquire(ctx, "cron:hourly", dlock.WithTTL(time.Minute), dlock.WithoutRenewal())
	clock.Advance(59 * time.Second)
	left, _ := lock.TTL(ctx)
	fmt.Println("after 59s:", lock.Context().Err() == nil, left)
	clock.Advance(time.Second)
	fmt.Println("after 60s:", context.Cause(lock.Context()))
	fmt.Println("release:", errors.Is(lock.Release(ctx), dlock.ErrNotHeld))
	// Output:
	// after 59s: true 1s
	// after 60s: dlock: lock lost: lease of 1m0s ran out (renewal off)
	// release: true
}

func ExampleLocker_Waiters() {
	locker := dlocktest.MustNew()
	defer locker.Close(bg)
	lock, _ := locker.TryAcquire(bg, "printer")
	done := make(chan struct{})
	go func() {
		defer close(done)
		next, err := locker.Acquire(bg, "printer")
		fmt.Println("second in line got it:", err == nil, next.Fence())
		next.Release(bg)
	}()
	for locker.Waiters("printer") == 0 {
		time.Sleep(time.Millisecond) // until the goroutine is in line
	}
	lock.Release(bg)
	<-done
	// Output: second in line got it: true 2
}

// Run the conformance suite against a Locker of your own, from a test in
// its package. Here the Locker is the double itself: put your constructor in
// New, and in Expire make your backend forget the lock the way it does when
// a lease runs out.
func ExampleConformance() {
	_ = func(t *testing.T) { // func TestConformance(t *testing.T)
		dlocktest.Conformance(t, dlocktest.Harness{
			New: func(t *testing.T) dlock.Locker {
				l := dlocktest.MustNew()
				t.Cleanup(func() { l.Close(context.Background()) })
				return l
			},
			Expire: func(t *testing.T, l dlock.Locker, name string) {
				l.(*dlocktest.Locker).Expire(name)
			},
			// For what your Locker does not support, with the reason:
			// Skip: map[string]string{"MaxHold": "WithMaxHold is refused"},
		})
	}
}

// Inspect tells who holds a name, as the Client's does: code that shows or
// checks the holder (an election's Leader) runs on the double too.
func ExampleLocker_Inspect() {
	ctx := context.Background()
	locker := dlocktest.MustNew()
	defer locker.Close(ctx)

	lock, _ := locker.Acquire(ctx, "leader", dlock.WithOwner("pod-a"))
	info, _ := locker.Inspect(ctx, "leader")
	fmt.Println(info.Owner, info.Fence == lock.Fence())
	_ = lock.Release(ctx)
	_, err := locker.Inspect(ctx, "leader")
	fmt.Println(errors.Is(err, dlock.ErrNotHeld))
	// Output:
	// pod-a true
	// true
}
