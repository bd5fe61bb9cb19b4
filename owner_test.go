package dlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/inspect"
)

// inspector is what the Client and the double share for reading a holder.
type inspector interface {
	Inspect(ctx context.Context, name string) (inspect.LockInfo, error)
}

// WithOwner's text is the holder's, on a plain grant and on a lock
// handed over by a release to a waiter that asked for it; without it, the
// Locker's own.
func TestWithAcquireOwner(t *testing.T) {
	_, rdb, _ := setup(t)
	c := newLocker(t, rdb, dlock.WithDefaultOwner("client-owner"))
	double := dlocktest.MustNew()
	t.Cleanup(func() { _ = double.Close(bg) })
	for name, l := range map[string]dlock.Locker{"redis": c, "dlocktest": double} {
		t.Run(name, func(t *testing.T) {
			in := l.(inspector)
			first, err := l.Acquire(bg, "owned", dlock.WithOwner("first"))
			if err != nil {
				t.Fatal(err)
			}
			if info, err := in.Inspect(bg, "owned"); err != nil || info.Owner != "first" {
				t.Fatalf("Inspect = %+v, %v; want owner first", info, err)
			}
			got := make(chan dlock.Lock, 1)
			go func() {
				l, _ := l.Acquire(bg, "owned", dlock.WithOwner("second"), dlock.WithWait(5*time.Second))
				got <- l
			}()
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if info, _ := in.Inspect(bg, "owned"); info.Waiters > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the second never lined up")
				}
			}
			_ = first.Release(bg)
			second := <-got
			if second == nil {
				t.Fatal("the second did not get the lock")
			}
			defer second.Release(bg)
			if info, err := in.Inspect(bg, "owned"); err != nil || info.Owner != "second" || info.Fence != second.Fence() {
				t.Fatalf("after the hand-off Inspect = %+v, %v; want owner second", info, err)
			}
			plain, err := l.Acquire(bg, "plain")
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Release(bg)
			want := "client-owner"
			if name == "dlocktest" {
				want = "dlocktest"
			}
			if info, _ := in.Inspect(bg, "plain"); info.Owner != want {
				t.Fatalf("without WithOwner the owner is %q; want %q", info.Owner, want)
			}
		})
	}
}

// Several workers share one Client; each acquisition says which one holds.
func ExampleWithOwner() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb, dlock.WithDefaultOwner("billing"))
	defer locker.Close(ctx)

	lock, _ := locker.Acquire(ctx, "invoice:7", dlock.WithOwner(locker.Owner()+"/worker-3"))
	defer lock.Release(ctx)
	info, _ := locker.Inspect(ctx, "invoice:7")
	fmt.Println(info.Owner)
	// Output: billing/worker-3
}
