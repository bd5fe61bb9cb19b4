package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/scripts"
)

// serverMs reads the Redis server's clock in ms: the clock the lock hash's
// since field is written with.
func serverMs(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	now, err := rdb.Time(bg).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

func sinceOf(t *testing.T, rdb *redis.Client, key string) int64 {
	t.Helper()
	v, err := rdb.HGet(bg, key, "since").Int64()
	if err != nil {
		t.Fatalf("since of %s: %v", key, err)
	}
	return v
}

// A job that finished early releases before its min hold: the lock stays
// in Redis, owned by nobody, until grant + min hold on the server's clock,
// keeps everyone else out until then and lets them in after.
func TestMinHoldReleaseKeepsOthersOut(t *testing.T) {
	_, rdb, srv := setup(t)
	a, b := newLocker(t, srv.Client(t)), newLocker(t, rdb)
	const name, key = "minhold", "dlock:{minhold}"
	const minHold = 1500 * time.Millisecond
	l, err := a.TryAcquire(bg, name, dlock.WithTTL(5*time.Second), dlock.WithMinHold(minHold))
	if err != nil {
		t.Fatal(err)
	}
	since := sinceOf(t, rdb, key)
	if err := l.Release(bg); err != nil {
		t.Fatalf("release before the min hold: %v", err)
	}
	end := since + minHold.Milliseconds()
	pttl := rdb.PTTL(bg, key).Val()
	now := serverMs(t, rdb)
	// The lease in Redis ends at grant + min hold (a few ms of
	// rounding and of the time between the two reads aside).
	if pttl <= 0 || now+pttl.Milliseconds() > end+20 || now+pttl.Milliseconds() < end-100 {
		t.Fatalf("after release: PTTL %v at server time %d, want the lease to end at since+min hold = %d", pttl, now, end)
	}
	if tok := rdb.HGet(bg, key, "token").Val(); tok == l.Token() {
		t.Fatalf("the lock kept after the release is still the released token's")
	}
	// No longer ours.
	if _, err := l.TTL(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("TTL after release: %v, want ErrNotHeld", err)
	}
	if err := l.Refresh(bg, 5*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Refresh after release: %v, want ErrNotHeld", err)
	}
	if c := context.Cause(l.Context()); !errors.Is(c, dlock.ErrReleased) {
		t.Fatalf("context cause %v, want ErrReleased", c)
	}
	// Others are kept out...
	_, err = b.TryAcquire(bg, name)
	var busy *dlock.NotObtainedError
	if !errors.As(err, &busy) || busy.HolderTTL <= 0 || busy.HolderTTL > minHold {
		t.Fatalf("other client during the min hold: %v, want busy with at most %v left", err, minHold)
	}
	// ...and a waiter gets the lock once the min hold has passed, not
	// before (server clock) and not much later.
	l2, err := b.Acquire(bg, name, dlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("waiter: %v", err)
	}
	defer l2.Release(bg)
	got := sinceOf(t, rdb, key)
	if got < end {
		t.Fatalf("waiter granted at server time %d, before the min hold ended at %d", got, end)
	}
	if got > end+1000 {
		t.Fatalf("waiter granted at server time %d, %d ms after the min hold ended", got, got-end)
	}
	// The released lock gave up nothing twice.
	if err := l.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second release: %v, want ErrNotHeld", err)
	}
}

// A release that go-redis sends again after its reply was lost still
// reports success, and the second run extends nothing.
func TestMinHoldResentRelease(t *testing.T) {
	_, rdb, srv := setup(t)
	hook := &resender{}
	twice := srv.Client(t)
	twice.AddHook(hook)
	a := newLocker(t, twice)
	const name, key = "minhold-resend", "dlock:{minhold-resend}"
	l, err := a.TryAcquire(bg, name, dlock.WithTTL(5*time.Second), dlock.WithMinHold(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var between time.Duration
	look := func() { between = rdb.PTTL(bg, key).Val() }
	hook.between.Store(&look)
	if err := l.Release(bg); err != nil {
		t.Fatalf("re-sent release reported %v", err)
	}
	hook.between.Store(nil)
	after := rdb.PTTL(bg, key).Val()
	if between <= 0 || between > 2*time.Second {
		t.Fatalf("PTTL after the first run %v, want within the min hold", between)
	}
	if after <= 0 || after > between {
		t.Fatalf("PTTL after the re-sent run %v, after the first %v: extended", after, between)
	}
}

// Once the min hold has passed, Release is a plain release: the lock goes
// straight to the waiter in line.
func TestMinHoldPassedHandsOff(t *testing.T) {
	_, rdb, srv := setup(t)
	a, b := newLocker(t, srv.Client(t)), newLocker(t, rdb)
	const name, key = "minhold-passed", "dlock:{minhold-passed}"
	const minHold = 300 * time.Millisecond
	l, err := a.TryAcquire(bg, name, dlock.WithTTL(5*time.Second), dlock.WithMinHold(minHold))
	if err != nil {
		t.Fatal(err)
	}
	since := sinceOf(t, rdb, key)
	type acquired struct {
		l   dlock.Lock
		err error
	}
	got := make(chan acquired, 1)
	go func() {
		l, err := b.Acquire(bg, name, dlock.WithWait(10*time.Second))
		got <- acquired{l, err}
	}()
	waitUntil(t, 3*time.Second, func() string { return "waiter in line" }, func() bool {
		return rdb.ZCard(bg, key+":q").Val() == 1
	})
	waitUntil(t, 3*time.Second, func() string { return "min hold over" }, func() bool {
		return serverMs(t, rdb) > since+minHold.Milliseconds()+50
	})
	released := time.Now()
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		defer r.l.Release(bg)
		if took := time.Since(released); took > 2*time.Second {
			t.Fatalf("waiter got the lock %v after the release: not handed over", took)
		}
		if tok := rdb.HGet(bg, key, "token").Val(); tok != r.l.Token() {
			t.Fatalf("lock in Redis is not the waiter's")
		}
	case <-time.After(4 * time.Second):
		t.Fatal("waiter not handed the lock")
	}
}

// The release of a token whose lease ran out, with a min hold of its own,
// changes nothing of the next holder's lock.
func TestMinHoldStaleRelease(t *testing.T) {
	_, rdb, srv := setup(t)
	a, b := newLocker(t, srv.Client(t)), newLocker(t, rdb)
	const name, key = "minhold-stale", "dlock:{minhold-stale}"
	old, err := a.TryAcquire(bg, name, dlock.WithTTL(300*time.Millisecond), dlock.WithoutRenewal(),
		dlock.WithMinHold(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 3*time.Second, func() string { return "lease over" }, func() bool {
		return rdb.Exists(bg, key).Val() == 0
	})
	cur, err := b.TryAcquire(bg, name, dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Release(bg)
	before := rdb.HGetAll(bg, key).Val()
	if err := old.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("stale release: %v, want ErrNotHeld", err)
	}
	if after := rdb.HGetAll(bg, key).Val(); after["token"] != before["token"] || after["since"] != before["since"] {
		t.Fatalf("stale release changed the holder's lock: %v -> %v", before, after)
	}
	if pttl := rdb.PTTL(bg, key).Val(); pttl < 4*time.Second {
		t.Fatalf("stale release shortened the holder's lease to %v", pttl)
	}
}

// A holder that crashes releases nothing: the first lease is at least the
// min hold, so the tick stays blocked for it even with a short TTL.
func TestMinHoldFirstLease(t *testing.T) {
	c, rdb, _ := setup(t)
	const key = "dlock:{minhold-crash}"
	l, err := c.TryAcquire(bg, "minhold-crash", dlock.WithTTL(300*time.Millisecond), dlock.WithMinHold(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	if pttl := rdb.PTTL(bg, key).Val(); pttl < 1500*time.Millisecond {
		t.Fatalf("first lease %v, want at least the min hold less a margin", pttl)
	}
}

func TestMinHoldBounds(t *testing.T) {
	c, _, _ := setup(t)
	for _, tc := range []struct {
		name string
		opts []dlock.AcquireOption
		want string
	}{
		{"negative", []dlock.AcquireOption{dlock.WithMinHold(-time.Second)}, "min hold -1s is not positive"},
		{"sub-ms", []dlock.AcquireOption{dlock.WithMinHold(time.Microsecond)}, "below 1ms"},
		{"above max TTL", []dlock.AcquireOption{dlock.WithMinHold(25 * time.Hour)}, "above the maximum TTL 24h0m0s"},
		{"above max hold", []dlock.AcquireOption{dlock.WithMinHold(2 * time.Second), dlock.WithMaxHold(time.Second)},
			"min hold 2s is above the max hold 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.TryAcquire(bg, "bounds", tc.opts...)
			var e *dlock.Error
			if !errors.Is(err, dlock.ErrInvalidOption) || !errors.As(err, &e) || e.Name != "bounds" {
				t.Fatalf("got %v, want an *Error of bounds matching ErrInvalidOption", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
	// Min and max hold compose: equal is allowed.
	l, err := c.TryAcquire(bg, "bounds", dlock.WithMinHold(time.Second), dlock.WithMaxHold(time.Second))
	if err != nil {
		t.Fatalf("min hold = max hold: %v", err)
	}
	_ = l.Release(bg)
}

// pipeGate holds the first pipeline that carries a refresh (the renewal
// loop's) before it is sent, until gate is closed, and closes done once it
// has run.
type pipeGate struct {
	armed         atomic.Bool
	held, gate    chan struct{}
	done          chan struct{}
	refreshScript *redis.Script
}

func (g *pipeGate) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (g *pipeGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *pipeGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || !isScript(cmds[0], g.refreshScript) || !g.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		close(g.held)
		<-g.gate
		err := next(ctx, cmds)
		close(g.done)
		return err
	}
}

// A renewal sent before the min-hold release and run after it extends
// nothing: the kept lock is nobody's.
func TestMinHoldRenewalInFlight(t *testing.T) {
	_, rdb, srv := setup(t)
	if err := scripts.Refresh.Load(bg, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	g := &pipeGate{held: make(chan struct{}), gate: make(chan struct{}), done: make(chan struct{}), refreshScript: scripts.Refresh}
	g.armed.Store(true)
	gated := srv.Client(t)
	gated.AddHook(g)
	var open sync.Once
	t.Cleanup(func() { open.Do(func() { close(g.gate) }) })
	a := newLocker(t, gated)
	const key = "dlock:{minhold-renew}"
	l, err := a.TryAcquire(bg, "minhold-renew", dlock.WithTTL(time.Second), dlock.WithMinHold(1300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.held: // the first renewal, a third of the TTL in
	case <-time.After(3 * time.Second):
		t.Fatal("no renewal sent")
	}
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	kept := rdb.PTTL(bg, key).Val()
	if kept <= 0 || kept >= time.Second {
		t.Fatalf("PTTL after the release %v, want the rest of the min hold, below the 1s TTL", kept)
	}
	open.Do(func() { close(g.gate) })
	select {
	case <-g.done:
	case <-time.After(3 * time.Second):
		t.Fatal("held renewal did not run")
	}
	if after := rdb.PTTL(bg, key).Val(); after > kept {
		t.Fatalf("PTTL %v after the late renewal, %v before: the renewal extended the kept lock", after, kept)
	}
}

// A waiter handed the lock with a min hold of its own keeps it for the min
// hold from the hand-off (the since the hand-off wrote), not from its
// attempt.
func TestMinHoldFromHandOff(t *testing.T) {
	_, rdb, srv := setup(t)
	a, b := newLocker(t, srv.Client(t)), newLocker(t, rdb)
	const name, key = "minhold-handoff", "dlock:{minhold-handoff}"
	first, err := a.TryAcquire(bg, name, dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan dlock.Lock, 1)
	go func() {
		l, err := b.Acquire(bg, name, dlock.WithWait(10*time.Second), dlock.WithMinHold(time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitUntil(t, 3*time.Second, func() string { return "waiter in line" }, func() bool {
		return rdb.ZCard(bg, key+":q").Val() == 1
	})
	time.Sleep(500 * time.Millisecond) // the waiter's attempt is this much older than the hand-off
	if err := first.Release(bg); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	since := sinceOf(t, rdb, key)
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	end := serverMs(t, rdb) + rdb.PTTL(bg, key).Val().Milliseconds()
	if want := since + 1000; end < want-50 || end > want+20 {
		t.Fatalf("kept lease ends at %d, want the hand-off %d + the 1s min hold", end, since)
	}
}
