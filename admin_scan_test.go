package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/inspect"
	"github.com/dlock-go/dlock/internal/redistest"
)

// scanAll runs a Scan and returns the locks it handed over, by name, failing
// on one handed over twice.
func scanAll(t *testing.T, c *dlock.Client, opts inspect.ScanOptions) (map[string]inspect.LockInfo, int, inspect.ScanStats, error) {
	t.Helper()
	got := map[string]inspect.LockInfo{}
	batches := 0
	st, err := c.Scan(bg, opts, func(infos []inspect.LockInfo) {
		batches++
		for _, i := range infos {
			if _, dup := got[i.Name]; dup {
				t.Errorf("Scan handed %s over twice", i.Name)
			}
			got[i.Name] = i
		}
	})
	return got, batches, st, err
}

// Scan finds what List finds, every kind, in batches, and leaves out the
// keys that are not held locks, a key of another type under the prefix
// included.
func TestScanFindsWhatListFinds(t *testing.T) {
	c, rdb, _ := setup(t, dlock.WithDefaultOwner("api-1"))
	const n = 250 // more than one batch of 200
	for i := range n {
		mustAcquire(t, c, fmt.Sprintf("order:%d", i), dlock.WithTTL(5*time.Second))
	}
	mustAcquire(t, c, "report", dlock.WithShared())
	mustAcquire(t, c, "pool", dlock.WithPermits(3))
	rdb.Set(bg, "dlock:{not-a-lock}", "x", 0) // another type under the prefix
	rdb.Set(bg, "unrelated", "x", 0)

	got, batches, st, err := scanAll(t, c, inspect.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.List(bg, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n+2 || len(list) != n+2 || st.Locks != n+2 {
		t.Fatalf("Scan found %d locks (stats %d), List %d; want %d", len(got), st.Locks, len(list), n+2)
	}
	for _, l := range list {
		s := got[l.Name]
		if s.Kind != l.Kind || s.Fence != l.Fence || s.Owner != l.Owner || !s.Since.Equal(l.Since) || len(s.Readers) != len(l.Readers) || len(s.Holders) != len(l.Holders) {
			t.Errorf("Scan's %s = %+v, List's %+v", l.Name, s, l)
		}
	}
	if got["report"].Kind != dlock.KindShared || got["pool"].Kind != dlock.KindSemaphore || got["order:1"].Kind != dlock.KindExclusive {
		t.Errorf("kinds: report %s, pool %s, order:1 %s", got["report"].Kind, got["pool"].Kind, got["order:1"].Kind)
	}
	if batches < 2 || st.Truncated || st.Calls < 1 || st.Examined != st.Calls*1000 || st.Keys < n {
		t.Errorf("%d batches, stats %+v", batches, st)
	}
	if d := time.Since(st.Now); d < -time.Second || d > time.Second {
		t.Errorf("stats' server clock %v is %v from this machine's", st.Now, d)
	}

	orders, _, _, err := scanAll(t, c, inspect.ScanOptions{Match: "order:1*"})
	if err != nil || len(orders) != 1+10+100 { // order:1, order:10-19, order:100-199
		t.Fatalf("Scan of order:1* found %d, %v; want 111", len(orders), err)
	}
}

// A budget of keys stops the walk over a big keyspace of other data, with
// no error, and says so.
func TestScanBudget(t *testing.T) {
	c, rdb, _ := setup(t)
	pipe := rdb.Pipeline()
	for i := range 5000 {
		pipe.Set(bg, fmt.Sprintf("cache:%d", i), "x", 0)
	}
	if _, err := pipe.Exec(bg); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, c, "order:1")
	_, _, st, err := scanAll(t, c, inspect.ScanOptions{MaxKeys: 1500})
	if err != nil || !st.Truncated || st.Calls != 2 || st.Examined != 1500 {
		t.Fatalf("Scan with a budget of 1500 keys over 5000: %+v, %v; want 2 calls (1000, 500), truncated", st, err)
	}
	got, _, st, err := scanAll(t, c, inspect.ScanOptions{})
	if err != nil || st.Truncated || len(got) != 1 {
		t.Fatalf("Scan without a budget: %d locks, %+v, %v", len(got), st, err)
	}
}

func TestScanBadInputAndContext(t *testing.T) {
	c, _, _ := setup(t)
	if _, err := c.Scan(bg, inspect.ScanOptions{MaxKeys: -1}, nil); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("MaxKeys -1: %v, want ErrInvalidOption", err)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := c.Scan(ctx, inspect.ScanOptions{}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v, want context.Canceled", err)
	}
}

// On a Cluster the primaries are walked one after another, sharing the
// budget.
func TestScanCluster(t *testing.T) {
	cs := redistest.StartCluster(t, redistest.WithReplicas(0))
	rdb := cs.ClusterClient(t)
	c := newLocker(t, rdb)
	const n = 60 // spread over the three primaries' slots
	for i := range n {
		mustAcquire(t, c, fmt.Sprintf("job:%d", i))
	}
	got, _, st, err := scanAll(t, c, inspect.ScanOptions{})
	if err != nil || len(got) != n || st.Truncated || st.Calls < 3 {
		t.Fatalf("Scan on a Cluster: %d locks, %+v, %v; want %d from one call or more per primary", len(got), st, err, n)
	}
	pipe := rdb.Pipeline() // split by slot, so spread over the primaries
	for i := range 9000 {
		pipe.Set(bg, fmt.Sprintf("cache:%d", i), "x", 0)
	}
	if _, err := pipe.Exec(bg); err != nil {
		t.Fatal(err)
	}
	_, _, st, err = scanAll(t, c, inspect.ScanOptions{MaxKeys: 2500})
	if err != nil || !st.Truncated || st.Examined != 2500 {
		t.Fatalf("Scan on a Cluster with a budget of 2500 keys: %+v, %v", st, err)
	}
}

// A health check or a metrics scrape must not wait on a big keyspace: Scan
// stops at a budget of keys looked at, or at ctx's deadline, and says
// whether it saw everything.
func ExampleClient_Scan() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker := dlock.MustNew(rdb, dlock.WithPrefix("example-scan:"))
	defer locker.Close(ctx)
	for _, name := range []string{"invoice:1", "invoice:2", "report"} {
		if _, err := locker.TryAcquire(ctx, name); err != nil {
			fmt.Println(err)
			return
		}
	}

	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	held := 0
	st, err := locker.Scan(ctx, inspect.ScanOptions{Match: "invoice:*", MaxKeys: 100_000}, func(infos []inspect.LockInfo) {
		held += len(infos)
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("invoices held:", held, "complete:", !st.Truncated)
	// Output: invoices held: 2 complete: true
}

// Brief counts the waiters of each kind as the full read does, without
// their entries.
func TestScanBrief(t *testing.T) {
	c, rdb, _ := setup(t, dlock.WithDefaultOwner("holder"))
	waiter := newLocker(t, rdb, dlock.WithDefaultOwner("waiter"))
	mustAcquire(t, c, "order:1")
	mustAcquire(t, c, "pool", dlock.WithPermits(1))
	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{}, 2)
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
	})
	for _, w := range []struct {
		name string
		opts []dlock.AcquireOption
	}{{"order:1", nil}, {"pool", []dlock.AcquireOption{dlock.WithPermits(1)}}} {
		go func() {
			defer func() { done <- struct{}{} }()
			if l, err := waiter.Acquire(ctx, w.name, append(w.opts, dlock.WithWait(time.Minute))...); err == nil {
				_ = l.Release(bg)
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		full, _, _, err := scanAll(t, c, inspect.ScanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(full["order:1"].Queue) == 1 && len(full["pool"].Queue) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiters never in line: %+v", full)
		}
		time.Sleep(10 * time.Millisecond)
	}
	brief, _, _, err := scanAll(t, c, inspect.ScanOptions{Brief: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"order:1", "pool"} {
		if b := brief[name]; b.Waiters != 1 || b.Queue != nil || b.Owner == "" {
			t.Errorf("brief %s: waiters %d, queue %v, owner %q; want 1 waiter, no queue, the holder", name, b.Waiters, b.Queue, b.Owner)
		}
	}
}
