package dlock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// newClients returns n dlock clients, each with its own connection, as n
// processes would have.
func newClients(t *testing.T, srv *redistest.Server, n int, hooks ...redis.Hook) []*dlock.Client {
	t.Helper()
	out := make([]*dlock.Client, n)
	for i := range out {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 2, ContextTimeoutEnabled: true})
		for _, h := range hooks {
			rdb.AddHook(h)
		}
		c := dlock.MustNew(rdb)
		t.Cleanup(func() { _ = c.Close(bg); _ = rdb.Close() })
		out[i] = c
	}
	return out
}

func TestAcquireWaitsForRelease(t *testing.T) {
	c, _, srv := setup(t)
	holder := mustAcquire(t, c, "wait", dlock.WithTTL(10*time.Second))
	other := newClients(t, srv, 1)[0]
	got := make(chan dlock.Lock, 1)
	go func() {
		l, err := other.Acquire(bg, "wait", dlock.WithWait(5*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("Acquire returned while the lock was held")
	case <-time.After(200 * time.Millisecond):
	}
	if err := holder.Release(bg); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil || l.Fence() <= holder.Fence() {
		t.Fatalf("waiter got %v after release", l)
	}
	// The lock was handed over, so it is the waiter's in Redis.
	if _, err := l.TTL(bg); err != nil {
		t.Fatalf("handed-over lock: %v", err)
	}
}

func TestAcquireWaitLimit(t *testing.T) {
	c, rdb, _ := setup(t)
	mustAcquire(t, c, "limit", dlock.WithTTL(10*time.Second))
	start := time.Now()
	_, err := c.Acquire(bg, "limit", dlock.WithWait(300*time.Millisecond))
	var busy *dlock.NotObtainedError
	if !errors.As(err, &busy) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire past its wait limit: %v; want ErrNotObtained and no context error", err)
	}
	if busy.HolderTTL <= 9*time.Second {
		t.Fatalf("HolderTTL = %v, want the holder's lease", busy.HolderTTL)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("gave up after %v, before the 300ms wait limit", d)
	}
	// The entry is withdrawn in the background, right after the wait ended.
	waitFor(t, "no waiter entries left in Redis after giving up", func() bool {
		return rdb.ZCard(bg, "dlock:{limit}:q").Val() == 0
	})
}

func TestAcquireWaitZeroIsOneAttempt(t *testing.T) {
	c, _, srv := setup(t)
	mustAcquire(t, c, "zero")
	var sent atomic.Int64
	other := newClients(t, srv, 1, countHook(&sent))[0]
	// The client's first acquisition also checks the server, once.
	if l, err := other.TryAcquire(bg, "zero-first"); err != nil {
		t.Fatal(err)
	} else {
		_ = l.Release(bg)
	}
	sent.Store(0)
	if _, err := other.Acquire(bg, "zero", dlock.WithWait(0)); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Acquire(WithWait(0)): %v", err)
	}
	if n := sent.Load(); n != 1 {
		t.Fatalf("WithWait(0) sent %d commands, want one attempt", n)
	}
	if _, err := other.Acquire(bg, "zero", dlock.WithWait(-time.Second)); err == nil || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("negative wait: %v, want a usage error", err)
	}
}

func TestAcquireCancelIsPromptAndClean(t *testing.T) {
	c, rdb, srv := setup(t)
	mustAcquire(t, c, "cancel", dlock.WithTTL(10*time.Second))
	waiters := newClients(t, srv, 3)
	ctx, cancel := context.WithCancel(bg)
	var wg sync.WaitGroup
	var cancelled atomic.Int64
	for _, w := range waiters {
		wg.Go(func() {
			_, err := w.Acquire(ctx, "cancel", dlock.WithWait(time.Minute))
			if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled Acquire: %v, want ErrNotObtained and context.Canceled", err)
			}
			cancelled.Add(1)
		})
	}
	waitFor(t, "3 waiters queued", func() bool { return rdb.ZCard(bg, "dlock:{cancel}:q").Val() == 3 })
	start := time.Now()
	cancel()
	wg.Wait()
	if d := time.Since(start); d > time.Second {
		t.Fatalf("cancelled waiters took %v to return", d)
	}
	// The entries are withdrawn in the background, right after the waits
	// returned.
	waitFor(t, "no waiter entries left after cancel", func() bool {
		return rdb.ZCard(bg, "dlock:{cancel}:q").Val() == 0
	})
	// Closing the clients drops their subscriptions at once.
	for _, w := range waiters {
		_ = w.Close(bg)
	}
	waitFor(t, "no subscribers left", func() bool {
		return len(rdb.PubSubChannels(bg, "dlock:{cancel}*").Val()) == 0
	})
}

func TestCrashedHolderWakesWaiter(t *testing.T) {
	c, _, srv := setup(t)
	// The holder never releases, as if it crashed: only its TTL frees the
	// lock, and nobody publishes anything.
	mustAcquire(t, c, "crash", dlock.WithTTL(400*time.Millisecond), dlock.WithoutRenewal())
	other := newClients(t, srv, 1)[0]
	l, err := other.Acquire(bg, "crash", dlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("waiter after the holder's TTL: %v", err)
	}
	_ = l.Release(bg)
}

func TestHandOffInArrivalOrder(t *testing.T) {
	c, rdb, srv := setup(t)
	first := mustAcquire(t, c, "fifo", dlock.WithTTL(10*time.Second))
	const n = 6
	clients := newClients(t, srv, n)
	var mu sync.Mutex
	var order []int
	locks := make(chan dlock.Lock, n)
	var wg sync.WaitGroup
	for i, w := range clients {
		wg.Go(func() {
			l, err := w.Acquire(bg, "fifo", dlock.WithWait(30*time.Second), dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			locks <- l
		})
		// Line them up one by one so arrival order is known.
		waitFor(t, "waiter queued", func() bool { return rdb.ZCard(bg, "dlock:{fifo}:q").Val() == int64(i+1) })
	}
	if err := first.Release(bg); err != nil {
		t.Fatal(err)
	}
	for range n {
		l := <-locks
		if err := l.Release(bg); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if !slices.Equal(order, []int{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("hand-off order %v, want arrival order", order)
	}
}

func TestDeadWaiterIsSkipped(t *testing.T) {
	c, rdb, srv := setup(t)
	holder := mustAcquire(t, c, "dead", dlock.WithTTL(10*time.Second))
	// A waiter that died long ago: first in line, entry no longer renewed.
	const ghost = "gone|deadbeef|10000|1|ghost"
	rdb.ZAdd(bg, "dlock:{dead}:q", redis.Z{Score: 1, Member: ghost})
	got := make(chan error, 1)
	live := newClients(t, srv, 1)[0]
	go func() {
		l, err := live.Acquire(bg, "dead", dlock.WithWait(5*time.Second))
		if err == nil {
			err = l.Release(bg)
		}
		got <- err
	}()
	waitFor(t, "live waiter queued", func() bool { return rdb.ZCard(bg, "dlock:{dead}:q").Val() == 2 })
	if err := holder.Release(bg); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("live waiter behind a dead one: %v", err)
	}
	if rdb.ZScore(bg, "dlock:{dead}:q", ghost).Err() == nil {
		t.Fatal("dead waiter's entry not dropped")
	}
}

// A release wakes one waiter, whatever the number waiting: the others send
// nothing until their own timers.
func TestReleaseWakesOneWaiter(t *testing.T) {
	c, rdb, srv := setup(t)
	holder := mustAcquire(t, c, "herd", dlock.WithTTL(20*time.Second))
	const n = 16
	var sent atomic.Int64
	clients := newClients(t, srv, n, countHook(&sent))
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	got := make(chan dlock.Lock, n)
	var wg sync.WaitGroup
	for _, w := range clients {
		wg.Go(func() {
			if l, err := w.Acquire(ctx, "herd", dlock.WithWait(time.Minute), dlock.WithTTL(20*time.Second)); err == nil {
				got <- l
			}
		})
	}
	waitFor(t, "all queued", func() bool { return rdb.ZCard(bg, "dlock:{herd}:q").Val() == n })
	// Renewals of waiter entries come at most once a second with a 20s TTL;
	// measure right after one round of them.
	before := sent.Load()
	if err := holder.Release(bg); err != nil {
		t.Fatal(err)
	}
	l := <-got
	woken := sent.Load() - before
	cancel()
	wg.Wait()
	_ = l.Release(bg)
	if woken > 2 {
		t.Fatalf("a release with %d waiters made them send %d commands; want at most the one hand-off", n, woken)
	}
}

func TestNoStarvation(t *testing.T) {
	_, rdb, srv := setup(t)
	const contenders, rounds = 32, 8
	clients := newClients(t, srv, contenders)
	var mu sync.Mutex
	var waits []time.Duration
	var wg sync.WaitGroup
	for _, w := range clients {
		wg.Go(func() {
			for range rounds {
				start := time.Now()
				l, err := w.Acquire(bg, "fair", dlock.WithWait(time.Minute))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				waits = append(waits, time.Since(start))
				mu.Unlock()
				v, _ := rdb.Incr(bg, "fair-count").Result()
				time.Sleep(time.Millisecond)
				rdb.Decr(bg, "fair-count")
				if v != 1 {
					t.Errorf("%d holders at once", v)
				}
				_ = l.Release(bg)
			}
		})
	}
	wg.Wait()
	var sum, slowest time.Duration
	for _, w := range waits {
		sum += w
		slowest = max(slowest, w)
	}
	mean := sum / time.Duration(len(waits))
	t.Logf("%d acquisitions: mean wait %v, slowest %v", len(waits), mean, slowest)
	// FIFO hand-off keeps every wait near one round of the line; polling
	// libraries show slowest waits of 10-100x the mean here.
	if slowest > 5*mean {
		t.Fatalf("slowest wait %v is more than 5x the mean %v: some contender starved", slowest, mean)
	}
}

func countHook(n *atomic.Int64) redis.Hook { return &cmdCounter{n: n} }

// counter counts commands and pipelines a client sends: its round trips.
type cmdCounter struct{ n *atomic.Int64 }

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, handshake) {
			c.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// handshake tells the commands go-redis sends on a new connection: they are
// not round trips of the lock.
func handshake(cmd redis.Cmder) bool {
	name := cmd.Name()
	// info and config: the client's one background check of the server;
	// pubsub: a session's check of its subscriptions, once a second on a
	// timer of its own while anyone waits (session.go).
	return name == "hello" || name == "client" || name == "auth" || name == "select" || name == "info" || name == "config" ||
		name == "pubsub"
}

// contendDo runs rounds of Do on name from a goroutine per client (a
// client may be given more than once) and returns how often a holder found
// another inside: zero while exclusion holds.
func contendDo(t *testing.T, clients []*dlock.Client, name string, rounds int) int64 {
	t.Helper()
	var inside, overlaps atomic.Int64
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			for range rounds {
				err := c.Do(bg, name, func(context.Context) error {
					if inside.Add(1) > 1 {
						overlaps.Add(1)
					}
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					return nil
				}, dlock.WithWait(10*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return overlaps.Load()
}

// waitFor polls cond, bounded, for state that other goroutines set up.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
