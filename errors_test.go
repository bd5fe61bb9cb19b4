package dlock_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// opOf returns the *dlock.Error in err, failing the test without one.
func opOf(t *testing.T, err error) *dlock.Error {
	t.Helper()
	var de *dlock.Error
	if !errors.As(err, &de) {
		t.Fatalf("%v (%T) is not a *dlock.Error", err, err)
	}
	return de
}

// Every error names the operation and the lock, matches one sentinel, and
// only the failures of reaching Redis match ErrUnavailable.
func TestErrorsNameOperationAndLock(t *testing.T) {
	c, rdb, _ := setup(t)
	held := mustAcquire(t, c, "inv:1")

	_, err := c.TryAcquire(bg, "inv:1")
	de := opOf(t, err)
	var busy *dlock.NotObtainedError
	if de.Op != "acquire" || de.Name != "inv:1" || !errors.As(err, &busy) || busy.Name != "inv:1" || busy.HolderTTL <= 0 {
		t.Fatalf("busy: %#v (%v)", de, err)
	}
	if !errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("busy matches the wrong sentinels: %v", err)
	}
	if !strings.HasPrefix(err.Error(), `dlock: acquire "inv:1": not obtained: held by "`) || !strings.Contains(err.Error(), " (lease left ") {
		t.Fatalf("busy text %q", err)
	}

	if err := held.Release(bg); err != nil {
		t.Fatal(err)
	}
	err = held.Release(bg)
	if de := opOf(t, err); de.Op != "release" || de.Name != "inv:1" || !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second release: %v", err)
	}
	if err := held.Refresh(bg, time.Second); opOf(t, err).Op != "refresh" || !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("refresh after release: %v", err)
	}
	if _, err := held.TTL(bg); opOf(t, err).Op != "ttl" || !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("ttl after release: %v", err)
	}
	if _, err := c.Inspect(bg, "inv:1"); opOf(t, err).Op != "inspect" || !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("inspect of a free lock: %v", err)
	}

	rdb.Set(bg, "dlock:{str}", "x", 0)
	_, err = c.TryAcquire(bg, "str")
	if de := opOf(t, err); de.Name != "str" || !errors.Is(err, dlock.ErrWrongType) || errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("wrong type: %v", err)
	}
	if _, err := c.TryAcquire(bg, ""); opOf(t, err).Op != "acquire" || !errors.Is(err, dlock.ErrInvalidName) || errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("empty name: %v", err)
	}

	// A wait ended by the caller's context matches the context's error too.
	held = mustAcquire(t, c, "inv:2")
	defer held.Release(bg)
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	_, err = c.Acquire(ctx, "inv:2")
	if opOf(t, err).Name != "inv:2" || !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait ended by ctx: %v", err)
	}
}

func TestErrUnavailable(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		c := newLocker(t, rdb)
		_, err = c.TryAcquire(bg, "job")
		if de := opOf(t, err); de.Op != "acquire" || de.Name != "job" || !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("connection refused: %v", err)
		}
		if errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("connection refused reads as busy: %v", err)
		}
	})
	t.Run("not the caller's context", func(t *testing.T) {
		c, _, _ := setup(t)
		held := mustAcquire(t, c, "busy")
		defer held.Release(bg)
		ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
		defer cancel()
		_, err := c.Acquire(ctx, "busy")
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("a busy lock's wait ended by the caller's deadline: %v; want DeadlineExceeded, not ErrUnavailable", err)
		}
		<-ctx.Done()
		_, err = c.TryAcquire(ctx, "free")
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("TryAcquire with an expired context: %v; want DeadlineExceeded, not ErrUnavailable", err)
		}
	})
	t.Run("read-only replica", func(t *testing.T) {
		primary := redistest.Start(t)
		replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
		c := newLocker(t, replica.Client(t))
		_, err := c.TryAcquire(bg, "job")
		if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "READONLY") {
			t.Fatalf("a write to a replica: %v, want ErrUnavailable naming READONLY", err)
		}
	})
}

// A caller's deadline that passes while the release is on its way does not
// cut the release short: a cut release would leave the lock in Redis, no
// longer renewed, blocking others for the rest of its TTL.
func TestReleaseOutlivesCallersDeadline(t *testing.T) {
	srv := redistest.Start(t)
	rdb, proxy := proxied(t, srv, redis.Options{})
	c := newLocker(t, rdb)
	l := mustAcquire(t, c, "slow", dlock.WithTTL(5*time.Second))
	proxy.Delay(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release past the caller's deadline: %v", err)
	}
	proxy.Pass()
	if n := srv.Client(t).Exists(bg, "dlock:{slow}").Val(); n != 0 {
		t.Fatal("the lock is still in Redis")
	}
}

// Release and Close still release when the caller's context has ended.
func TestReleaseWithEndedContext(t *testing.T) {
	c, rdb, _ := setup(t)
	l := mustAcquire(t, c, "rel")
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release with a cancelled context: %v", err)
	}
	if n := rdb.Exists(bg, "dlock:{rel}").Val(); n != 0 {
		t.Fatal("the lock is still in Redis")
	}

	mustAcquire(t, c, "close")
	if err := c.Close(ctx); err != nil {
		t.Fatalf("close with a cancelled context: %v", err)
	}
	if n := rdb.Exists(bg, "dlock:{close}").Val(); n != 0 {
		t.Fatal("Close left the lock in Redis")
	}
}
