package dlock_test

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

var bg = context.Background()

func mustAcquire(t *testing.T, c *dlock.Client, name string, opts ...dlock.AcquireOption) dlock.Lock {
	t.Helper()
	l, err := c.TryAcquire(bg, name, opts...)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", name, err)
	}
	return l
}

func TestDataModel(t *testing.T) {
	c, rdb, _ := setup(t, dlock.WithDefaultOwner("worker-7"))
	l := mustAcquire(t, c, "order:42", dlock.WithTTL(2*time.Second))
	h, err := rdb.HGetAll(bg, "dlock:{order:42}").Result()
	if err != nil {
		t.Fatal(err)
	}
	if h["token"] != l.Token() || h["owner"] != "worker-7" || h["ttl"] != "2000" {
		t.Fatalf("lock hash = %v, want token %s, owner worker-7, ttl 2000", h, l.Token())
	}
	if h["fence"] == "" || h["fence"] != rdb.Get(bg, "dlock:{order:42}:fence").Val() {
		t.Fatalf("fence field %q does not match the counter", h["fence"])
	}
	// since is the server's clock in ms: 13 digits until the year 2286.
	if ms := h["since"]; len(ms) != 13 || ms < "1577836800000" {
		t.Fatalf("since = %q, want milliseconds since the epoch after 2020", ms)
	}
	// The counter lives for its idle lifetime after the last grant: names
	// locked once do not stay in Redis for good.
	if got := rdb.PTTL(bg, "dlock:{order:42}:fence").Val(); got <= dlock.DefaultFenceLifetime-time.Minute || got > dlock.DefaultFenceLifetime {
		t.Fatalf("fence counter TTL = %v, want about %v", got, dlock.DefaultFenceLifetime)
	}
	if l.Name() != "order:42" {
		t.Fatalf("Name() = %q", l.Name())
	}
}

func TestMillisecondPrecision(t *testing.T) {
	c, rdb, _ := setup(t)
	l := mustAcquire(t, c, "ms", dlock.WithTTL(1500*time.Millisecond))
	check := func(when string) {
		t.Helper()
		left, err := l.TTL(bg)
		if err != nil {
			t.Fatal(err)
		}
		pttl := rdb.PTTL(bg, "dlock:{ms}").Val()
		// A TTL cut to whole seconds would read 1000 ms or less here.
		if left <= 1400*time.Millisecond || left > 1500*time.Millisecond || pttl <= 1400*time.Millisecond {
			t.Fatalf("%s: TTL = %v, PTTL = %v, want in (1400ms, 1500ms]", when, left, pttl)
		}
	}
	check("after acquire")
	time.Sleep(300 * time.Millisecond)
	if err := l.Refresh(bg, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	check("after refresh")
	if got := rdb.HGet(bg, "dlock:{ms}", "ttl").Val(); got != "1500" {
		t.Fatalf("ttl field after refresh = %q, want 1500", got)
	}
}

func TestTokensAreRandomAndUnique(t *testing.T) {
	c, _, _ := setup(t)
	seen := map[string]bool{}
	for i := range 200 {
		l := mustAcquire(t, c, "tok")
		b, err := hex.DecodeString(l.Token())
		if err != nil || len(b) != 16 {
			t.Fatalf("token %q is not 128 bits of hex", l.Token())
		}
		if seen[l.Token()] {
			t.Fatalf("token repeated on acquisition %d", i)
		}
		seen[l.Token()] = true
		if err := l.Release(bg); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFencesIncrease(t *testing.T) {
	c, rdb, _ := setup(t)
	var last int64
	for i := range 20 {
		l := mustAcquire(t, c, "fence", dlock.WithTTL(time.Second))
		if l.Fence() <= last {
			t.Fatalf("acquisition %d: fence %d not above %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if i%2 == 0 {
			if err := l.Release(bg); err != nil {
				t.Fatal(err)
			}
			continue
		}
		// Let the lease run out instead of releasing: the next holder must
		// still get a larger fence.
		rdb.PExpire(bg, "dlock:{fence}", time.Millisecond)
		waitGone(t, rdb, "dlock:{fence}")
	}
}

func waitGone(t *testing.T, rdb *redis.Client, key string) {
	t.Helper()
	for range 200 {
		if rdb.Exists(bg, key).Val() == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("key %s did not expire", key)
}

func TestFencesSurviveEmptyRestart(t *testing.T) {
	c, rdb, srv := setup(t)
	var last int64
	for range 5 {
		l := mustAcquire(t, c, "restart")
		last = l.Fence()
		if err := l.Release(bg); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Restart(bg); err != nil {
		t.Fatal(err)
	}
	if n := rdb.DBSize(bg).Val(); n != 0 {
		t.Fatalf("restarted server holds %d keys, want an empty one", n)
	}
	l := mustAcquire(t, c, "restart")
	if l.Fence() <= last {
		t.Fatalf("fence after restart %d not above %d from before", l.Fence(), last)
	}
}

// expireNow ends a lease on the server at once, as a clock jump or a long
// pause of the holder would.
func expireNow(t *testing.T, rdb *redis.Client, key string) {
	t.Helper()
	rdb.PExpire(bg, key, time.Millisecond)
	waitGone(t, rdb, key)
}

func TestStaleHolderCannotTouchNewHolder(t *testing.T) {
	c, rdb, _ := setup(t)
	a := mustAcquire(t, c, "stale", dlock.WithTTL(time.Second))
	expireNow(t, rdb, "dlock:{stale}")
	b := mustAcquire(t, c, "stale", dlock.WithTTL(time.Second))

	if err := a.Refresh(bg, 5*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("stale Refresh: %v, want ErrNotHeld", err)
	}
	if _, err := a.TTL(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("stale TTL: %v, want ErrNotHeld", err)
	}
	if err := a.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("stale Release: %v, want ErrNotHeld", err)
	}
	if got := rdb.HGet(bg, "dlock:{stale}", "token").Val(); got != b.Token() {
		t.Fatalf("new holder's token replaced: %q", got)
	}
	if left, err := b.TTL(bg); err != nil || left > time.Second {
		t.Fatalf("new holder's lease changed by stale holder: %v, %v", left, err)
	}
}

func TestDoubleReleaseDeletesNothing(t *testing.T) {
	c, rdb, _ := setup(t)
	a := mustAcquire(t, c, "twice")
	if err := a.Release(bg); err != nil {
		t.Fatal(err)
	}
	b := mustAcquire(t, c, "twice")
	if err := a.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
	if got := rdb.HGet(bg, "dlock:{twice}", "token").Val(); got != b.Token() {
		t.Fatalf("second Release touched the next holder's lock")
	}
	if err := a.Refresh(bg, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Refresh after Release: %v, want ErrNotHeld", err)
	}
}

func TestBusyReportsHolderTTL(t *testing.T) {
	c, _, _ := setup(t)
	mustAcquire(t, c, "busy", dlock.WithTTL(3*time.Second))
	_, err := c.TryAcquire(bg, "busy")
	var busy *dlock.NotObtainedError
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.As(err, &busy) {
		t.Fatalf("TryAcquire on a held lock: %v, want *NotObtainedError", err)
	}
	if busy.Name != "busy" || busy.HolderTTL <= 2*time.Second || busy.HolderTTL > 3*time.Second {
		t.Fatalf("busy = %+v, want name busy and holder TTL near 3s", busy)
	}
	if !strings.Contains(err.Error(), `"busy"`) {
		t.Fatalf("error %q does not name the lock", err)
	}
}

func TestScriptFlushMidRun(t *testing.T) {
	c, rdb, _ := setup(t)
	flush := func() {
		t.Helper()
		if err := rdb.ScriptFlush(bg).Err(); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	l := mustAcquire(t, c, "flush")
	flush()
	if _, err := l.TTL(bg); err != nil {
		t.Fatal(err)
	}
	flush()
	if err := l.Refresh(bg, time.Second); err != nil {
		t.Fatal(err)
	}
	flush()
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	flush()
	if _, err := c.TryAcquire(bg, "flush"); err != nil {
		t.Fatal(err)
	}
}
