package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
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
