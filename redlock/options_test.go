package redlock_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/observe"
	"github.com/dlock-go/dlock/redlock"
)

// TestNewRefusesInvalidConfiguration: invalid configuration is an error
// from New, never a panic or an error at first use.
func TestNewRefusesInvalidConfiguration(t *testing.T) {
	a := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	b := redis.NewClient(&redis.Options{Addr: "127.0.0.1:2"})
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	var nilClient *redis.Client
	two := []redis.UniversalClient{a, b}
	for _, tc := range []struct {
		name string
		rdbs []redis.UniversalClient
		opts []redlock.Option
		want error
	}{
		{"no clients", nil, nil, dlock.ErrInvalidOption},
		{"nil client", []redis.UniversalClient{a, nil}, nil, dlock.ErrInvalidOption},
		{"nil *redis.Client", []redis.UniversalClient{a, nilClient}, nil, dlock.ErrInvalidOption},
		{"same client twice", []redis.UniversalClient{a, b, a}, nil, dlock.ErrInvalidOption},
		{"prefix with a brace", two, []redlock.Option{redlock.WithPrefix("a{b")}, dlock.ErrInvalidOption},
		{"empty prefix", two, []redlock.Option{redlock.WithPrefix("")}, dlock.ErrInvalidOption},
		{"release timeout 0", two, []redlock.Option{redlock.WithReleaseTimeout(0)}, dlock.ErrInvalidOption},
		{"fence lifetime below 1s", two, []redlock.Option{redlock.WithFenceLifetime(time.Millisecond)}, dlock.ErrInvalidOption},
		{"TTL bounds below 1ms", two, []redlock.Option{redlock.WithTTLBounds(0, time.Second)}, dlock.ErrInvalidTTL},
		{"TTL bounds reversed", two, []redlock.Option{redlock.WithTTLBounds(time.Second, time.Millisecond)}, dlock.ErrInvalidTTL},
		{"default TTL above the bounds", two, []redlock.Option{redlock.WithTTLBounds(time.Millisecond, time.Second), redlock.WithDefaultTTL(2 * time.Second)}, dlock.ErrInvalidTTL},
		{"default TTL 0", two, []redlock.Option{redlock.WithDefaultTTL(0)}, dlock.ErrInvalidTTL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := redlock.New(tc.rdbs, tc.opts...)
			if r != nil || !errors.Is(err, tc.want) {
				t.Fatalf("New: %v, %v; want no Redlock and %v", r, err, tc.want)
			}
			var derr *dlock.Error
			if !errors.As(err, &derr) || derr.Op != "new" {
				t.Fatalf("error %v (%T), want a *dlock.Error of op new", err, err)
			}
		})
	}
	r, err := redlock.New(two, redlock.WithPrefix("app:"), redlock.WithDefaultOwner("me"), redlock.WithDefaultTTL(time.Minute),
		redlock.WithTTLBounds(time.Millisecond, time.Hour), redlock.WithReleaseTimeout(time.Second),
		redlock.WithFenceLifetime(time.Hour), redlock.WithObserver(observe.BaseObserver{}))
	if err != nil {
		t.Fatalf("valid options: %v", err)
	}
	if err := r.Close(bg); err != nil {
		t.Fatal(err)
	}
}

// TestAcquireOptionsReadAsTheCore: names and TTLs are checked by the
// core's rules and the Redlock's bounds, before anything is sent.
func TestAcquireOptionsReadAsTheCore(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs, redlock.WithTTLBounds(100*time.Millisecond, 10*time.Second), redlock.WithDefaultTTL(time.Second))
	for _, tc := range []struct {
		name string
		lock string
		opts []dlock.AcquireOption
		want error
	}{
		{"empty name", "", nil, dlock.ErrInvalidName},
		{"TTL below the bound", "x", []dlock.AcquireOption{dlock.WithTTL(50 * time.Millisecond)}, dlock.ErrInvalidTTL},
		{"TTL above the bound", "x", []dlock.AcquireOption{dlock.WithTTL(time.Minute)}, dlock.ErrInvalidTTL},
		{"negative wait", "x", []dlock.AcquireOption{dlock.WithWait(-time.Second)}, dlock.ErrInvalidOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Acquire(bg, tc.lock, tc.opts...)
			var derr *dlock.Error
			if !errors.Is(err, tc.want) || !errors.As(err, &derr) || derr.Op != "acquire" {
				t.Fatalf("Acquire: %v, want an acquire error matching %v", err, tc.want)
			}
		})
	}
	l, err := r.TryAcquire(bg, "default")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	if left, err := l.TTL(bg); err != nil || left <= 500*time.Millisecond || left > time.Second {
		t.Fatalf("lock with the default TTL of 1s: %v left, %v", left, err)
	}
}

// TestRefreshChecksTTL: Refresh takes the Redlock's bounds, so Refresh(ctx,
// 0) is refused before anything is sent (it used to reach the nodes and
// report ErrNoQuorum), and later renewals use the refreshed TTL.
func TestRefreshChecksTTL(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs)
	l, err := r.TryAcquire(bg, "refresh", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	for _, ttl := range []time.Duration{0, -time.Second, time.Microsecond, 25 * time.Hour} {
		err := l.Refresh(bg, ttl)
		var derr *dlock.Error
		if !errors.Is(err, dlock.ErrInvalidTTL) || !errors.As(err, &derr) || derr.Op != "refresh" || derr.Name != "refresh" {
			t.Fatalf("Refresh(%v): %v, want a refresh error matching ErrInvalidTTL", ttl, err)
		}
	}
	if err := l.Refresh(bg, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if left, err := l.TTL(bg); err != nil || left < 2*time.Second {
		t.Fatalf("after Refresh(3s): %v left, %v", left, err)
	}
	// Renewals now ask for 3s, every second: after 1.5s a node's lease is
	// well above what the first TTL of 300ms would give.
	time.Sleep(1500 * time.Millisecond)
	if pttl := rdbs[0].PTTL(bg, "dlock:{refresh}").Val(); pttl < 2*time.Second {
		t.Fatalf("node 0's lease %v after a renewal following Refresh(3s)", pttl)
	}
}

// TestRefreshInvalidTTLSendsNothing (issue 17, item 4): Refresh(ctx, 0)
// used to send PEXPIRE 0, deleting the lock on every node while its context
// lived on. It is refused before anything is sent, and the lock lives on.
func TestRefreshInvalidTTLSendsNothing(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs)
	// No renewal: the only commands would be the Refreshes'.
	l, err := r.TryAcquire(bg, "refresh0", dlock.WithTTL(10*time.Second), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	waitFor(t, "every node in the lock", func() bool { return !slices.Contains(asLock(t, l).Fences(), 0) })
	sent := &counter{}
	for _, rdb := range rdbs {
		rdb.AddHook(sent)
	}
	for _, ttl := range []time.Duration{0, -time.Millisecond} {
		if err := l.Refresh(bg, ttl); !errors.Is(err, dlock.ErrInvalidTTL) {
			t.Fatalf("Refresh(%v): %v, want ErrInvalidTTL", ttl, err)
		}
	}
	if n := sent.n.Load(); n != 0 {
		t.Fatalf("%d commands sent by refused Refreshes", n)
	}
	if n := exists(rdbs, "dlock:{refresh0}"); n != 3 || l.Context().Err() != nil {
		t.Fatalf("after refused Refreshes: on %d nodes, context %v", n, context.Cause(l.Context()))
	}
}

// counter is a go-redis hook that counts the commands and pipelines sent.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}
