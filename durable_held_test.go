package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/observe"
)

// slowWAITAOF makes every WAITAOF 1 0 T sent in a pipeline block for T on
// the server, as Redis 8 under appendfsync everysec does until its next
// fsync (up to a second): it asks for one replica as well, which the
// server has not, so the server waits the whole timeout and answers [1, 0].
type slowWAITAOF struct{ waits atomic.Int64 }

func (s *slowWAITAOF) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (s *slowWAITAOF) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (s *slowWAITAOF) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if strings.EqualFold(c.Name(), "waitaof") {
				c.Args()[2] = int64(1)
				s.waits.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// renewsOf counts the successful renewals of one name.
type renewsOf struct {
	observe.BaseObserver
	name string
	ok   atomic.Int64
}

func (r *renewsOf) OnRenew(e observe.RenewEvent) {
	if e.Name == r.name && e.Result == observe.ResultOK {
		r.ok.Add(1)
	}
}

// A durable lock's renewals wait for the disk (WAITAOF, up to its
// timeout); the plain locks of the same Client do not wait with them: they
// are renewed in pipelines of their own, so a slow fsync cannot cost them
// their leases.
func TestSlowDurableRenewalDoesNotHoldUpPlainLocks(t *testing.T) {
	srv := redistest.StartFlavor(t, "valkey", aofAlways...)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	slow := &slowWAITAOF{}
	rdb.AddHook(slow)
	plain := &renewsOf{name: "plain"}
	c, err := dlock.New(rdb, dlock.WithObserver(plain))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	ctx := context.Background()

	// Scripts loaded first: a NOSCRIPT answer sends a pipeline, and its
	// WAITAOF, again, which waits twice.
	warm, err := c.TryAcquire(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Refresh(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	_ = warm.Release(ctx)
	// The durable lock's renewal is due every second and waits 900 ms.
	d, err := c.Acquire(ctx, "durable", dlock.WithTTL(3*time.Second), dlock.WithDurableGrant(900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Release(ctx)
	// The plain lock's renewal is due every 100 ms, its lease 300 ms: held
	// up behind one durable renewal, it is lost.
	p, err := c.Acquire(ctx, "plain", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)

	const renewals = 30 // 3 s of renewals, three durable ones
	deadline := time.Now().Add(15 * time.Second)
	for plain.ok.Load() < renewals {
		select {
		case <-p.Context().Done():
			t.Fatalf("the plain lock was lost after %d renewals, with %d slow WAITAOFs sent for the durable one: %v",
				plain.ok.Load(), slow.waits.Load(), context.Cause(p.Context()))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plain lock was renewed %d times in 15 s, want %d", plain.ok.Load(), renewals)
		}
	}
	if slow.waits.Load() < 3 {
		t.Fatalf("%d WAITAOFs held up, want 3 or more: the durable lock's renewals did not wait", slow.waits.Load())
	}
	if err := d.Context().Err(); err != nil {
		t.Errorf("the durable lock was lost: %v", context.Cause(d.Context()))
	}
}

// A nested WithReentry acquisition asking WithDurableGrant is refused on a
// lock its context holds that was not taken durable, and shares one that
// was: a handle on a grant never confirmed on disk is not what it asks for.
func TestReentryKeepsDurableGrant(t *testing.T) {
	c, _, h := durableSetup(t, "valkey", aofAlways...)
	ctx := context.Background()
	plain, err := c.Acquire(ctx, "plain", dlock.WithReentry())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Release(ctx)
	nested, err := c.Acquire(dlock.NewContext(ctx, plain), "plain", dlock.WithReentry(), dlock.WithDurableGrant(time.Second))
	if !errors.Is(err, dlock.ErrReentrant) {
		if nested != nil {
			_ = nested.Release(ctx)
		}
		t.Fatalf("nested durable acquisition on a plain lock: %v, want ErrReentrant (WAITAOF pipelines: %v)", err, h.pipelines)
	}
	if plain.Context().Err() != nil {
		t.Fatal("the refused nested acquisition ended the held lock")
	}
	durable, err := c.Acquire(ctx, "durable", dlock.WithReentry(), dlock.WithDurableGrant(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer durable.Release(ctx)
	nested, err = c.Acquire(dlock.NewContext(ctx, durable), "durable", dlock.WithReentry(), dlock.WithDurableGrant(time.Second))
	if err != nil {
		t.Fatalf("nested durable acquisition on a durable lock: %v", err)
	}
	if nested.Fence() != durable.Fence() {
		t.Errorf("nested fence %d, held %d: not a handle on the held lock", nested.Fence(), durable.Fence())
	}
	_ = nested.Release(ctx)
}

// A durable timeout longer than a third of the TTL is refused: every
// renewal, a third of the TTL after the last lease, may wait that long, and
// the lease would run out behind it.
func TestDurableTimeoutAboveAThirdOfTheTTLRefused(t *testing.T) {
	c, _, _ := durableSetup(t, "valkey", aofAlways...)
	ctx := context.Background()
	_, err := c.TryAcquire(ctx, "long-wait", dlock.WithTTL(time.Second), dlock.WithDurableGrant(700*time.Millisecond))
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "700ms") || !strings.Contains(err.Error(), "333ms") {
		t.Fatalf("TTL 1s with a 700ms durable wait: %v, want ErrInvalidOption naming 700ms and the bound 333ms", err)
	}
	l, err := c.TryAcquire(ctx, "long-wait", dlock.WithTTL(time.Second), dlock.WithDurableGrant(300*time.Millisecond))
	if err != nil {
		t.Fatalf("TTL 1s with a 300ms durable wait: %v", err)
	}
	// Refresh sets the TTL later renewals use: the same bound holds.
	err = l.Refresh(ctx, 600*time.Millisecond)
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "300ms") || !strings.Contains(err.Error(), "200ms") {
		t.Fatalf("Refresh to 600ms of a lock with a 300ms durable wait: %v, want ErrInvalidOption naming 300ms and the bound 200ms", err)
	}
	if err := l.Context().Err(); err != nil {
		t.Fatalf("the refused Refresh ended the lock: %v", context.Cause(l.Context()))
	}
	if err := l.Refresh(ctx, 900*time.Millisecond); err != nil {
		t.Fatalf("Refresh to 900ms, within the bound: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// An ACL that forbids WAITAOF is told apart from AOF off by its error code
// (NOPERM): the error names the command to allow, not appendonly.
func TestDurableGrantNoPermNamesTheACL(t *testing.T) {
	srv := redistest.StartFlavor(t, "valkey", aofAlways...)
	admin := srv.Client(t)
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "nowaitaof", "on", ">pw", "~*", "&*", "+@all", "-waitaof").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "nowaitaof", Password: "pw"})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctx) })
	_, err = c.TryAcquire(ctx, "acl", dlock.WithDurableGrant(100*time.Millisecond))
	if !errors.Is(err, dlock.ErrNotDurable) || !strings.Contains(err.Error(), "+waitaof") || strings.Contains(err.Error(), "appendonly") {
		t.Fatalf("durable acquisition under an ACL without WAITAOF: %v, want ErrNotDurable naming +waitaof", err)
	}
	if n, err := admin.Exists(ctx, "dlock:{acl}").Result(); err != nil || n != 0 {
		t.Errorf("the unconfirmed grant was left in Redis (exists %d, %v)", n, err)
	}
}
