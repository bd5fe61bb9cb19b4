package dlock_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Waiters are handed the lock in arrival order across processes: two
// waiters of one process do not both go before a waiter of another process
// that arrived between them. Each waiter takes its own place in the Redis
// queue when it arrives; a goroutine that waited in its process's line
// behind another entered the Redis queue only when its turn came, behind
// every other process' waiters (A, C, B for A and B of process 1 and C of
// process 2 arriving in that order).
func TestArrivalOrderAcrossProcesses(t *testing.T) {
	c, rdb, srv := setup(t)
	holder := mustAcquire(t, c, "arrival", dlock.WithTTL(10*time.Second))
	procs := newClients(t, srv, 2)         // two processes
	arrivals := []int{0, 0, 1, 0, 1, 1, 0} // the process of each waiter, in arrival order
	var mu sync.Mutex
	var order []int
	locks := make(chan dlock.Lock, len(arrivals))
	var wg sync.WaitGroup
	for i, p := range arrivals {
		wg.Go(func() {
			l, err := procs[p].Acquire(bg, "arrival", dlock.WithWait(30*time.Second), dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Error(err)
				locks <- nil
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			locks <- l
		})
		// The next one arrives once this one has its place in line.
		deadline := time.Now().Add(5 * time.Second)
		for rdb.ZCard(bg, "dlock:{arrival}:q").Val() != int64(i+1) {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d (process %d) has no place of its own in the Redis queue 5s after it arrived: %v",
					i, p, rdb.ZRange(bg, "dlock:{arrival}:q", 0, -1).Val())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := holder.Release(bg); err != nil {
		t.Fatal(err)
	}
	for range arrivals {
		if l := <-locks; l != nil {
			if err := l.Release(bg); err != nil {
				t.Fatal(err)
			}
		}
	}
	wg.Wait()
	want := make([]int, len(arrivals))
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(order, want) {
		t.Fatalf("hand-off order %v, want arrival order %v (processes %v)", order, want, fmt.Sprint(arrivals))
	}
}
