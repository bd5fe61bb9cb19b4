package dlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestBadInputChangesNothing(t *testing.T) {
	c, rdb, _ := setup(t)
	long := strings.Repeat("x", dlock.MaxNameLength+1)
	tests := []struct {
		name    string
		lock    string
		opts    []dlock.AcquireOption
		want    error
		mention string // the bound the message must name
	}{
		{"empty name", "", nil, dlock.ErrInvalidName, "empty"},
		{"name too long", long, nil, dlock.ErrInvalidName, "512"},
		{"ttl zero", "a", []dlock.AcquireOption{dlock.WithTTL(0)}, dlock.ErrInvalidTTL, "not positive"},
		{"ttl negative", "a", []dlock.AcquireOption{dlock.WithTTL(-time.Second)}, dlock.ErrInvalidTTL, "not positive"},
		{"ttl below minimum", "a", []dlock.AcquireOption{dlock.WithTTL(10)}, dlock.ErrInvalidTTL, "minimum 10ms"},
		{"ttl above maximum", "a", []dlock.AcquireOption{dlock.WithTTL(1000 * time.Hour)}, dlock.ErrInvalidTTL, "maximum 24h"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := c.TryAcquire(bg, tt.lock, tt.opts...)
			if !errors.Is(err, tt.want) || l != nil {
				t.Fatalf("TryAcquire: %v, %v; want %v", l, err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("error %q does not name %q", err, tt.mention)
			}
			if n := rdb.DBSize(bg).Val(); n != 0 {
				t.Fatalf("bad input wrote %d keys", n)
			}
		})
	}

	l := mustAcquire(t, c, "held")
	for _, ttl := range []time.Duration{0, -1, time.Microsecond, 25 * time.Hour} {
		if err := l.Refresh(bg, ttl); !errors.Is(err, dlock.ErrInvalidTTL) {
			t.Fatalf("Refresh(%v): %v, want ErrInvalidTTL", ttl, err)
		}
	}
	if left := rdb.PTTL(bg, "dlock:{held}").Val(); left <= 9*time.Second {
		t.Fatalf("refused Refresh changed the lease to %v", left)
	}
}

func TestBadClientOptions(t *testing.T) {
	_, rdb, _ := setup(t)
	for _, tc := range []struct {
		opt  dlock.Option
		want error
		text string // the bound or value the error names
	}{
		{dlock.WithPrefix("a{b"), dlock.ErrInvalidOption, `prefix "a{b"`},
		{dlock.WithPrefix(""), dlock.ErrInvalidOption, `prefix "" would leave the keys bare`},
		{dlock.WithTTLBounds(time.Second, time.Millisecond), dlock.ErrInvalidTTL, "[1s, 1ms]"},
		{dlock.WithReleaseTimeout(0), dlock.ErrInvalidOption, "release timeout 0s"},
		{dlock.WithFenceLifetime(time.Millisecond), dlock.ErrInvalidOption, "fence lifetime 1ms"},
		{dlock.WithDefaultTTL(48 * time.Hour), dlock.ErrInvalidTTL, "48h0m0s is above the maximum 24h0m0s (WithDefaultTTL)"},
	} {
		// New refuses at once: no sticky error found at the first call.
		c, err := dlock.New(rdb, tc.opt)
		if c != nil || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Fatalf("New with a bad option: %v, %v; want nil and %v naming %s", c, err, tc.want, tc.text)
		}
		var de *dlock.Error
		if !errors.As(err, &de) || de.Op != "new" {
			t.Fatalf("New's error %v is not a *dlock.Error of op new", err)
		}
		func() {
			defer func() {
				if p := recover(); p == nil {
					t.Fatal("MustNew with a bad option did not panic")
				}
			}()
			dlock.MustNew(rdb, tc.opt)
		}()
	}
	if _, err := dlock.New(nil); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Fatalf("New(nil): %v, want ErrInvalidOption", err)
	}
	if n := rdb.DBSize(bg).Val(); n != 0 {
		t.Fatalf("bad options wrote %d keys", n)
	}
	c := newLocker(t, rdb, dlock.WithTTLBounds(time.Second, time.Minute), dlock.WithDefaultTTL(30*time.Second), dlock.WithPrefix("app:"))
	if _, err := c.TryAcquire(bg, "x", dlock.WithTTL(500*time.Millisecond)); !errors.Is(err, dlock.ErrInvalidTTL) {
		t.Fatalf("TTL under a custom minimum: %v", err)
	}
	mustAcquire(t, c, "x")
	if left := rdb.PTTL(bg, "app:{x}").Val(); left <= 29*time.Second {
		t.Fatalf("default TTL not applied under the custom prefix: %v", left)
	}
}

func TestWrongTypeKeys(t *testing.T) {
	c, rdb, _ := setup(t)
	cases := []struct {
		name  string
		setup func()
		keep  string // a key whose value must be unchanged
	}{
		{"lock key is a string", func() { rdb.Set(bg, "dlock:{s}", "v", 0) }, "dlock:{s}"},
		{"lock key is a list", func() { rdb.RPush(bg, "dlock:{l}", "v") }, "dlock:{l}"},
		{"fence is a hash", func() { rdb.HSet(bg, "dlock:{f}:fence", "a", "b") }, "dlock:{f}:fence"},
		{"fence not a number", func() { rdb.Set(bg, "dlock:{n}:fence", "abc", 0) }, "dlock:{n}:fence"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup()
			before, _ := rdb.Dump(bg, tc.keep).Result()
			keysBefore := rdb.DBSize(bg).Val()
			lockName := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(tc.keep, ":fence"), "dlock:{"), "}")
			_, err := c.TryAcquire(bg, lockName)
			if !errors.Is(err, dlock.ErrWrongType) {
				t.Fatalf("TryAcquire(%q): %v, want ErrWrongType", lockName, err)
			}
			if !strings.Contains(err.Error(), lockName) {
				t.Fatalf("error %q does not name the lock", err)
			}
			after, _ := rdb.Dump(bg, tc.keep).Result()
			if after != before || rdb.DBSize(bg).Val() != keysBefore {
				t.Fatalf("a refused acquire changed Redis")
			}
		})
	}
}

func TestUnreachableRedis(t *testing.T) {
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// Nothing listens on the port: every dial is refused.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newLocker(t, rdb)
	ctx, cancel := context.WithTimeout(bg, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.TryAcquire(ctx, "order:7")
	if err == nil || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryAcquire with Redis down: %v, want a connection error", err)
	}
	if !strings.Contains(err.Error(), `acquire "order:7"`) {
		t.Fatalf("error %q does not name the operation and the lock", err)
	}
	// Generous: the point is that the caller's deadline bounds the call, not
	// go-redis' own retries and timeouts.
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("TryAcquire took %v past a 500ms deadline", d)
	}
}

func TestBlackholedRedisHonoursDeadline(t *testing.T) {
	srv := redistest.Start(t)
	rdb, proxy := proxied(t, srv, redis.Options{})
	c := newLocker(t, rdb)
	// Connection and script in place; nothing left to release through the cut.
	if err := mustAcquire(t, c, "warm").Release(bg); err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()

	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.TryAcquire(ctx, "order:8")
	if err == nil || !strings.Contains(err.Error(), `acquire "order:8"`) {
		t.Fatalf("TryAcquire through a blackhole: %v, want an error naming the lock", err)
	}
	// Generous bound: the point is the caller's deadline, not ReadTimeout (3s).
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("TryAcquire took %v past a 300ms deadline", d)
	}
}
