package dlock_test

// Tests from the second adversarial review of issue 11's changes: each
// failed on the code it reviewed.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// a queued waiter gets an error reply (BUSY: another client's
// script is running). waitInLine withdraws synchronously, but the withdraw
// meets the same BUSY and fails; nothing retries it. The entry stays alive
// (3 s for this TTL); the holder's release right after the script is killed
// hands the lock to the waiter that has left: stranded for the waiter's TTL.
func TestErrorReplyWithdrawRetried(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	loadScripts(t, plain)
	holder := newLocker(t, plain)
	h, err := holder.Acquire(bg, "busyw", dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wrdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = wrdb.Close() })
	w := newLocker(t, wrdb)
	res := acquireAsync(w, "busyw", dlock.WithTTL(time.Minute), dlock.WithWait(20*time.Second))
	waitFor(t, "W queued", func() bool { return plain.ZCard(bg, "dlock:{busyw}:q").Val() == 1 })

	if err := plain.ConfigSet(bg, "busy-reply-threshold", "20").Err(); err != nil {
		t.Fatal(err)
	}
	blocker := srv.Client(t)
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = blocker.Eval(context.Background(), "while true do end", nil).Err()
	})
	var r acquired
	select {
	case r = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("W did not return")
	}
	t.Logf("W: %v", r.err)
	if r.err == nil || !strings.Contains(r.err.Error(), "BUSY") {
		t.Fatalf("W: %v, want a BUSY error reply", r.err)
	}
	killer := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = killer.Close() })
	waitFor(t, "SCRIPT KILL", func() bool { return killer.ScriptKill(bg).Err() == nil })
	wg.Wait()
	_ = plain.ConfigSet(bg, "busy-reply-threshold", "5000").Err()
	// W's withdrawal is retried in the background, at most 1 s apart: it
	// must leave the queue before the holder's release looks for the next
	// in line. 2 s, well inside the queue's 6 s: without the retry the
	// entry is still there.
	waitUntil(t, 2*time.Second, func() string {
		return fmt.Sprintf("W's entry still queued: %v", plain.ZRange(bg, "dlock:{busyw}:q", 0, -1).Val())
	}, func() bool { return plain.ZCard(bg, "dlock:{busyw}:q").Val() == 0 })
	if err := h.Release(bg); err != nil {
		t.Fatal(err)
	}
	if l, err := newLocker(t, plain).TryAcquire(bg, "busyw"); err != nil {
		t.Fatalf("lock stranded after W left with an error reply: held for %v more: %v",
			plain.PTTL(bg, "dlock:{busyw}").Val(), err)
	} else {
		_ = l.Release(bg)
	}
}

// slowOldVersion delays the server check's pipeline and makes INFO server
// report an old redis_version (the harness has one Redis, 7.0).
type slowOldVersion struct {
	delay   time.Duration
	version string
}

func (v slowOldVersion) DialHook(next redis.DialHook) redis.DialHook { return next }
func (v slowOldVersion) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (v slowOldVersion) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		isInfo := false
		for _, cmd := range cmds {
			if cmd.Name() == "info" {
				isInfo = true
			}
		}
		if isInfo {
			time.Sleep(v.delay)
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			info, ok := cmd.(*redis.StringCmd)
			if ok && cmd.Name() == "info" && len(cmd.Args()) == 2 && cmd.Args()[1] == "server" {
				info.SetVal(strings.Replace(info.Val(), "redis_version:", "redis_version:"+v.version+"\r\nreal_redis_version:", 1))
			}
		}
		return err
	}
}

// the background verdict arrives while a waiter is queued.
// Its next queued attempt renews the entry in Redis, finds the lock busy,
// and attempt returns ErrUnsupportedServer without withdrawing (withdraw is
// only done for a grant). waitInLine does not withdraw either (not an error
// reply). The holder's release hands the lock to the waiter that left.
func TestVerdictErrorWithdrawsQueuedEntry(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	loadScripts(t, plain)
	h, err := newLocker(t, plain).Acquire(bg, "verdict", dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wrdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	wrdb.AddHook(slowOldVersion{delay: 1500 * time.Millisecond, version: "4.0.14"})
	t.Cleanup(func() { _ = wrdb.Close() })
	w := newLocker(t, wrdb)
	_, err = w.Acquire(bg, "verdict", dlock.WithTTL(time.Minute), dlock.WithWait(10*time.Second))
	t.Logf("W: %v", err)
	if !errors.Is(err, dlock.ErrUnsupportedServer) {
		t.Fatalf("W: %v, want ErrUnsupportedServer", err)
	}
	// W's entry is withdrawn in the background (giveBack): at once, and
	// well inside the queue's 6 s, unless nothing withdraws it.
	waitUntil(t, time.Second, func() string {
		return fmt.Sprintf("W's entry still queued: %v", plain.ZRange(bg, "dlock:{verdict}:q", 0, -1).Val())
	}, func() bool { return plain.ZCard(bg, "dlock:{verdict}:q").Val() == 0 })
	if err := h.Release(bg); err != nil {
		t.Fatal(err)
	}
	if l, err := newLocker(t, plain).TryAcquire(bg, "verdict"); err != nil {
		t.Fatalf("lock handed to a waiter that left with ErrUnsupportedServer: held for %v more: %v",
			plain.PTTL(bg, "dlock:{verdict}").Val(), err)
	} else {
		_ = l.Release(bg)
	}
}

// WithMaxHold shorter than the TTL. The first lease is not cut
// at the hold limit (only renewals and Refresh are), so the lock's context,
// documented to end at the limit, lives on for the whole TTL.
func TestMaxHoldBelowTTL(t *testing.T) {
	c, rdb, _ := setup(t)
	l, err := c.Acquire(bg, "shorthold", dlock.WithTTL(2*time.Second), dlock.WithMaxHold(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	select {
	case <-l.Context().Done():
		t.Logf("ended after the limit: %v", context.Cause(l.Context()))
	case <-time.After(time.Second):
		t.Fatalf("WithMaxHold(200ms): context still alive after 1s, Redis lease %v", rdb.PTTL(bg, "dlock:{shorthold}").Val())
	}
}
