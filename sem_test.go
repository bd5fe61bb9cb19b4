package dlock_test

// Counting semaphores (WithPermits): each test forces one situation of the
// protocol on a real redis-server: n holders and the n+1st waiting, FIFO
// hand-off, a permit whose holder stopped renewing, a command sent twice, a
// stale hand-off message, and input that must be refused.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// semKey is the zset of a name's permits, semQueue its waiter queue.
func semKey(name string) string   { return "dlock:{" + name + "}:sem" }
func semQueue(name string) string { return "dlock:{" + name + "}:sem:q" }

// expirePermit ends token's lease in Redis now, as a holder's TTL running
// out would: the permit's score is its lease end on the server clock.
func expirePermit(t *testing.T, rdb *redis.Client, name, token string) {
	t.Helper()
	if err := rdb.ZAddXX(bg, semKey(name), redis.Z{Score: 1, Member: token}).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestSemaphoreNHoldersAndTheNextWaits(t *testing.T) {
	_, rdb, srv := setup(t)
	clients := newClients(t, srv, 4)
	const n = 3
	var held []dlock.Lock
	for i := range n {
		l, err := clients[i].TryAcquire(bg, "pool", dlock.WithPermits(n), dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatalf("permit %d of %d: %v", i+1, n, err)
		}
		held = append(held, l)
	}
	if got := rdb.ZCard(bg, semKey("pool")).Val(); got != n {
		t.Fatalf("%d permits in Redis, want %d", got, n)
	}
	for i := 1; i < n; i++ {
		if held[i].Fence() <= held[i-1].Fence() {
			t.Fatalf("fences %d then %d: not growing", held[i-1].Fence(), held[i].Fence())
		}
	}
	_, err := clients[3].TryAcquire(bg, "pool", dlock.WithPermits(n))
	var busy *dlock.NotObtainedError
	if !errors.As(err, &busy) || busy.HolderTTL <= 0 || busy.HolderTTL > 10*time.Second {
		t.Fatalf("4th of 3 permits: %v, want ErrNotObtained with the earliest lease end", err)
	}
	got := make(chan dlock.Lock, 1)
	go func() {
		l, err := clients[3].Acquire(bg, "pool", dlock.WithPermits(n), dlock.WithWait(5*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, "waiter queued", func() bool { return rdb.ZCard(bg, semQueue("pool")).Val() == 1 })
	select {
	case <-got:
		t.Fatal("the 4th holder got a permit while 3 were held")
	case <-time.After(200 * time.Millisecond):
	}
	if err := held[1].Release(bg); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Fence() <= held[2].Fence() {
		t.Fatalf("handed-over permit has fence %d, not above the last grant %d", l.Fence(), held[2].Fence())
	}
	if left, err := l.TTL(bg); err != nil || left <= 0 {
		t.Fatalf("handed-over permit's TTL: %v, %v", left, err)
	}
	if got := rdb.ZCard(bg, semKey("pool")).Val(); got != n {
		t.Fatalf("%d permits in Redis after the hand-off, want %d", got, n)
	}
	for _, x := range []dlock.Lock{held[0], held[2], l} {
		if err := x.Release(bg); err != nil {
			t.Fatal(err)
		}
	}
	if k := rdb.Keys(bg, "dlock:{pool}:sem*").Val(); len(k) != 0 {
		t.Fatalf("keys left after every permit was released: %v", k)
	}
}

func TestSemaphoreHandOffInArrivalOrder(t *testing.T) {
	c, rdb, srv := setup(t)
	const n = 2
	first := []dlock.Lock{
		mustAcquire(t, c, "sfifo", dlock.WithPermits(n), dlock.WithTTL(10*time.Second)),
		mustAcquire(t, c, "sfifo", dlock.WithPermits(n), dlock.WithTTL(10*time.Second)),
	}
	const waiters = 5
	clients := newClients(t, srv, waiters)
	// Grant order is fence order: each grant takes the next fence in the
	// script that makes it. The order the goroutines wake in is not: two
	// waiters granted by two quick releases both hold a permit (n = 2)
	// before either returns.
	var mu sync.Mutex
	fences := make([]int64, waiters)
	locks := make(chan dlock.Lock, waiters)
	var wg sync.WaitGroup
	for i, w := range clients {
		wg.Go(func() {
			l, err := w.Acquire(bg, "sfifo", dlock.WithPermits(n), dlock.WithWait(30*time.Second), dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			fences[i] = l.Fence()
			mu.Unlock()
			locks <- l
		})
		waitFor(t, "waiter queued", func() bool { return rdb.ZCard(bg, semQueue("sfifo")).Val() == int64(i+1) })
	}
	// One permit at a time: each release hands its permit to the next in line.
	if err := first[0].Release(bg); err != nil {
		t.Fatal(err)
	}
	next := first[1]
	for range waiters {
		if err := next.Release(bg); err != nil {
			t.Fatal(err)
		}
		next = <-locks
	}
	_ = next.Release(bg)
	wg.Wait()
	if !slices.IsSorted(fences) {
		t.Fatalf("fences by arrival %v: permits not handed out in arrival order", fences)
	}
}

// TestSemaphoreNewcomerDoesNotOvertake: a permit that came back by expiry
// goes to the live waiter in line, not to a newcomer whose attempt happened
// to run first.
func TestSemaphoreNewcomerDoesNotOvertake(t *testing.T) {
	c, rdb, srv := setup(t)
	holder := mustAcquire(t, c, "over", dlock.WithPermits(1), dlock.WithTTL(10*time.Second))
	clients := newClients(t, srv, 2)
	got := make(chan dlock.Lock, 1)
	go func() {
		l, err := clients[0].Acquire(bg, "over", dlock.WithPermits(1), dlock.WithWait(5*time.Second), dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, "waiter queued", func() bool { return rdb.ZCard(bg, semQueue("over")).Val() == 1 })
	// The holder's lease ends now; the waiter would only look again at its
	// next wake-up (about a second later with this TTL).
	expirePermit(t, rdb, "over", holder.Token())
	if l, err := clients[1].TryAcquire(bg, "over", dlock.WithPermits(1)); !errors.Is(err, dlock.ErrNotObtained) {
		if l != nil {
			_ = l.Release(bg)
		}
		t.Fatalf("newcomer with a live waiter ahead: %v, want ErrNotObtained", err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		_ = l.Release(bg)
	case <-time.After(500 * time.Millisecond):
		t.Fatal("the freed permit did not reach the waiter in line")
	}
}

// TestSemaphoreCrashedHolderPermitComesBack: a holder that stops renewing
// (renewal off, never released) loses its permit after its TTL, and a waiter
// gets it; the other permit is untouched.
func TestSemaphoreCrashedHolderPermitComesBack(t *testing.T) {
	c, rdb, srv := setup(t)
	const ttl = 400 * time.Millisecond
	alive := mustAcquire(t, c, "crashs", dlock.WithPermits(2), dlock.WithTTL(10*time.Second))
	crashed := mustAcquire(t, c, "crashs", dlock.WithPermits(2), dlock.WithTTL(ttl), dlock.WithoutRenewal())
	other := newClients(t, srv, 1)[0]
	start := time.Now()
	l, err := other.Acquire(bg, "crashs", dlock.WithPermits(2), dlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("waiter after a holder's TTL: %v", err)
	}
	if took := time.Since(start); took < ttl-100*time.Millisecond || took > ttl+time.Second {
		t.Fatalf("the permit came back after %v, want about the TTL %v", took, ttl)
	}
	if crashed.Context().Err() == nil {
		t.Fatal("the crashed holder's context is still live after its lease")
	}
	if err := crashed.Refresh(bg, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("refresh after loss: %v, want ErrNotHeld", err)
	}
	if _, err := alive.TTL(bg); err != nil {
		t.Fatalf("the live permit: %v", err)
	}
	if got := rdb.ZCard(bg, semKey("crashs")).Val(); got != 2 {
		t.Fatalf("%d permits in Redis, want 2", got)
	}
	_ = l.Release(bg)
	_ = alive.Release(bg)
}

// TestSemaphoreRefreshAfterLoss: once a permit's lease has ended in Redis,
// Refresh, TTL and Release report ErrNotHeld and change nothing.
func TestSemaphoreRefreshAfterLoss(t *testing.T) {
	c, rdb, _ := setup(t)
	l := mustAcquire(t, c, "sloss", dlock.WithPermits(2), dlock.WithTTL(10*time.Second))
	other := mustAcquire(t, c, "sloss", dlock.WithPermits(2), dlock.WithTTL(10*time.Second))
	expirePermit(t, rdb, "sloss", l.Token())
	if err := l.Refresh(bg, 5*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("refresh of an expired permit: %v, want ErrNotHeld", err)
	}
	if l.Context().Err() == nil {
		t.Fatal("lock's context live after a refresh found the permit gone")
	}
	if _, err := l.TTL(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("TTL: %v, want ErrNotHeld", err)
	}
	if err := l.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("release: %v, want ErrNotHeld", err)
	}
	if _, err := other.TTL(bg); err != nil {
		t.Fatalf("the other permit was touched: %v", err)
	}
	_ = other.Release(bg)
}

// TestSemaphoreResentAcquireAndRelease: go-redis sends a script again after
// a lost reply. A re-sent acquire takes exactly one permit and one fence; a
// re-sent release returns exactly one permit, reports success, and hands on
// exactly one permit even with waiters in line.
func TestSemaphoreResentAcquireAndRelease(t *testing.T) {
	_, rdb, srv := setup(t)
	twice := srv.Client(t)
	twice.AddHook(&resender{})
	a := newLocker(t, twice)
	l, err := a.TryAcquire(bg, "sresend", dlock.WithPermits(2))
	if err != nil {
		t.Fatalf("re-sent acquire: %v", err)
	}
	if got := rdb.ZCard(bg, semKey("sresend")).Val(); got != 1 {
		t.Fatalf("a re-sent acquire took %d permits", got)
	}
	if got, _ := rdb.Get(bg, "dlock:{sresend}:fence").Int64(); got != l.Fence() {
		t.Fatalf("fence counter %d, the permit's fence %d: the re-send took a second fence", got, l.Fence())
	}
	// Second permit held elsewhere; two waiters in line.
	clients := newClients(t, srv, 3)
	b := mustAcquire(t, clients[0], "sresend", dlock.WithPermits(2), dlock.WithTTL(10*time.Second))
	got := make(chan dlock.Lock, 2)
	for i, w := range clients[1:] {
		go func() {
			l, err := w.Acquire(bg, "sresend", dlock.WithPermits(2), dlock.WithWait(3*time.Second), dlock.WithTTL(10*time.Second))
			if err == nil {
				got <- l
			}
		}()
		waitFor(t, "waiter queued", func() bool { return rdb.ZCard(bg, semQueue("sresend")).Val() == int64(i+1) })
	}
	if err := l.Release(bg); err != nil {
		t.Fatalf("re-sent release reported %v", err)
	}
	first := <-got
	select {
	case second := <-got:
		_ = second.Release(bg)
		t.Fatal("one re-sent release handed on two permits")
	case <-time.After(300 * time.Millisecond):
	}
	if n := rdb.ZCard(bg, semKey("sresend")).Val(); n != 2 {
		t.Fatalf("%d permits held, want 2", n)
	}
	_ = b.Release(bg)
	second := <-got
	_ = first.Release(bg)
	_ = second.Release(bg)
}

// TestSemaphoreMismatch: all holders of a name agree on n, and a name is a
// semaphore or an exclusive lock at a time.
func TestSemaphoreMismatch(t *testing.T) {
	c, _, _ := setup(t)
	l := mustAcquire(t, c, "mis", dlock.WithPermits(3))
	_, err := c.TryAcquire(bg, "mis", dlock.WithPermits(4))
	if !errors.Is(err, dlock.ErrMismatch) || !strings.Contains(err.Error(), "3") || !strings.Contains(err.Error(), "4") {
		t.Fatalf("WithPermits(4) on a name held with 3: %v, want ErrMismatch naming 3 and 4", err)
	}
	// Acquire refuses at once, not after the wait.
	start := time.Now()
	if _, err := c.Acquire(bg, "mis", dlock.WithPermits(2), dlock.WithWait(3*time.Second)); !errors.Is(err, dlock.ErrMismatch) || time.Since(start) > time.Second {
		t.Fatalf("Acquire with WithPermits(2): %v after %v", err, time.Since(start))
	}
	_ = l.Release(bg)
	// Nobody holds a permit: another n is fine now.
	l4 := mustAcquire(t, c, "mis", dlock.WithPermits(4))
	_ = l4.Release(bg)

	x := mustAcquire(t, c, "excl")
	if _, err := c.TryAcquire(bg, "excl", dlock.WithPermits(2)); !errors.Is(err, dlock.ErrMismatch) || !strings.Contains(err.Error(), "exclusive") {
		t.Fatalf("Permits on a name held as an exclusive lock: %v, want ErrMismatch", err)
	}
	_ = x.Release(bg)

	r := mustAcquire(t, c, "read", dlock.WithShared())
	if _, err := c.TryAcquire(bg, "read", dlock.WithPermits(2)); !errors.Is(err, dlock.ErrMismatch) ||
		!strings.Contains(err.Error(), "read lock") || strings.Contains(err.Error(), "exclusive") {
		t.Fatalf("Permits on a name held by readers: %v, want ErrMismatch naming the read lock", err)
	}
	_ = r.Release(bg)
}

func TestSemaphoreInvalidPermits(t *testing.T) {
	c, rdb, _ := setup(t)
	for _, n := range []int{0, -1, dlock.MaxPermits + 1} {
		_, err := c.TryAcquire(bg, "bad", dlock.WithPermits(n))
		var e *dlock.Error
		if !errors.Is(err, dlock.ErrInvalidOption) || !errors.As(err, &e) || e.Name != "bad" || !strings.Contains(err.Error(), fmt.Sprint(n)) {
			t.Errorf("WithPermits(%d): %v, want ErrInvalidOption naming %d", n, err, n)
		}
	}
	if k := rdb.Keys(bg, "*").Val(); len(k) != 0 {
		t.Fatalf("refused input wrote %v", k)
	}
}

// TestSemaphoreStaleHandoffNotAccepted: as TestStaleHandoffNotAccepted, on
// two permits. A holds one permit for long; W waits; H releases the other,
// handing it to W, but W stalls until that lease has run out and C has
// taken the permit. W's next attempt is busy, and only then does W read the
// old message. W must not take it: A and C hold both permits. The busy
// reply's fence must be above every grant made before the attempt (A's
// fence, the earliest lease's, is not).
func TestSemaphoreStaleHandoffNotAccepted(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	holder, third := newLocker(t, plain), newLocker(t, plain)
	tap := &pubsubTap{}
	const n = 2
	a, err := third.Acquire(bg, "sstale", dlock.WithPermits(n), dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	h1, err := holder.Acquire(bg, "sstale", dlock.WithPermits(n), dlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var stage atomic.Int32
	var c3 atomic.Value
	semQueued := func(cmd redis.Cmder) bool {
		return strings.HasPrefix(scriptArg(cmd, 1), "S") && scriptArg(cmd, 4) != ""
	}
	h := &hook{after: func(cmd redis.Cmder) {
		if !semQueued(cmd) || !busyReply(cmd) {
			return
		}
		switch stage.Add(1) {
		case 1: // W is queued and now stalls.
			tap.hold()
			_ = h1.Release(bg) // hands the permit to W; the message is held back
			time.Sleep(450 * time.Millisecond)
			l, err := third.TryAcquire(bg, "sstale", dlock.WithPermits(n), dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Errorf("C could not take the expired hand-off: %v", err)
				return
			}
			c3.Store(l)
		case 2: // W's attempt after the stall found A and C: now the old message arrives.
			tap.deliver()
		}
	}}
	wrdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Dialer: tap.dial})
	wrdb.AddHook(h)
	t.Cleanup(func() { tap.deliver(); _ = wrdb.Close() })
	waiter := newLocker(t, wrdb)

	wl, err := waiter.Acquire(bg, "sstale", dlock.WithPermits(n), dlock.WithTTL(300*time.Millisecond), dlock.WithWait(1500*time.Millisecond))
	if stage.Load() < 2 {
		t.Fatalf("the interleaving did not happen (stage %d, err %v)", stage.Load(), err)
	}
	c, _ := c3.Load().(dlock.Lock)
	if c == nil {
		t.Fatal("C never held a permit")
	}
	if wl != nil {
		t.Fatalf("three holders of two permits: W's Acquire returned a lock (context live: %v) while A and C hold both",
			wl.Context().Err() == nil)
	}
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("W: %v, want ErrNotObtained (A and C hold both permits)", err)
	}
	for _, x := range []dlock.Lock{a, c} {
		if _, err := x.TTL(bg); err != nil {
			t.Fatalf("a holder lost its permit: %v", err)
		}
	}
}

// TestSemaphoreLostReplyGivesPermitBack: an acquire whose script granted a
// permit but whose reply was lost gives the permit back at once, and a
// queued attempt whose reply was lost leaves no entry that a release then
// hands a permit to.
func TestSemaphoreLostReplyGivesPermitBack(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	// Loaded, so that every run is an EVALSHA the hook can tell apart.
	if err := scripts.SemAcquire.Load(bg, plain).Err(); err != nil {
		t.Fatal(err)
	}
	isSemAcquire := func(cmd redis.Cmder) bool { return isScript(cmd, scripts.SemAcquire) }
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	rdb.AddHook(lostReplyHook(isSemAcquire, 1))
	t.Cleanup(func() { _ = rdb.Close() })
	c := newLocker(t, rdb)
	if l, err := c.TryAcquire(bg, "slost", dlock.WithPermits(1), dlock.WithTTL(time.Minute)); err == nil {
		_ = l.Release(bg)
		t.Fatal("the lost reply was not lost")
	}
	waitFor(t, "the lost permit to be given back", func() bool { return plain.Exists(bg, semKey("slost")).Val() == 0 })

	// Now a queued attempt's reply is lost while the one permit is held.
	holder := mustAcquire(t, newLocker(t, plain), "slost", dlock.WithPermits(1), dlock.WithTTL(10*time.Second))
	rdb2 := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	rdb2.AddHook(lostReplyHook(func(cmd redis.Cmder) bool { return isSemAcquire(cmd) && scriptArg(cmd, 4) != "" }, 1))
	t.Cleanup(func() { _ = rdb2.Close() })
	if _, err := newLocker(t, rdb2).Acquire(bg, "slost", dlock.WithPermits(1), dlock.WithTTL(time.Minute), dlock.WithWait(time.Second)); err == nil {
		t.Fatal("the waiter got a held permit")
	}
	if err := holder.Release(bg); err != nil {
		t.Fatal(err)
	}
	third := newLocker(t, plain)
	waitFor(t, "the permit to be free of the waiter that left", func() bool {
		l, err := third.TryAcquire(bg, "slost", dlock.WithPermits(1))
		if err == nil {
			_ = l.Release(bg)
		}
		return err == nil
	})
}
