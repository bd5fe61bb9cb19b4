package dlock_test

// A token that gave up (an attempt that failed or came too late, a wait that
// ended) is given back: in the background, retried while it may still hold
// something, any grant of it is released and its queue entry dropped, so
// that no lock is left held by nobody or handed to a waiter that has left.

import (
	"context"
	"errors"
	"fmt"
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

// TestErrorReplyAfterResendGivesGrantBack: a failed TryAcquire gives its
// token up after an error reply too: the error reply of a re-sent command
// (READONLY here) says nothing of the first send, which granted. The grant is
// given back, not held by nobody for its whole TTL.
func TestErrorReplyAfterResendGivesGrantBack(t *testing.T) {
	_, rdb, srv := setup(t)
	hook := &redistest.ReadOnlyOnResend{Admin: srv.Client(t)}
	hooked := srv.Client(t)
	hooked.AddHook(hook)
	c := newLocker(t, hooked)
	if l, err := c.TryAcquire(bg, "warm"); err == nil { // loads the script: one call each from now on
		_ = l.Release(bg)
	}
	hook.Armed.Store(true)
	if _, err := c.TryAcquire(bg, "strand", dlock.WithTTL(10*time.Second)); err == nil {
		t.Fatal("acquired though the reply was an error")
	} else {
		t.Logf("acquire: %v; the re-send's answer: %v", err, hook.Err.Load())
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) && rdb.Exists(bg, "dlock:{strand}").Val() == 1 {
		time.Sleep(20 * time.Millisecond)
	}
	if n := rdb.Exists(bg, "dlock:{strand}").Val(); n == 1 {
		t.Fatalf("the grant of a TryAcquire that failed is still in Redis, held by nobody, for %v more",
			rdb.PTTL(bg, "dlock:{strand}").Val())
	}
}

// TestLostGrantGivenBackAfterLongOutage: a grant whose reply was lost is
// given back in the background until it would have expired by itself, not
// only for as long as a waiter's queue entry lives (3 s at most): after an
// outage a little longer than that, the grant is given back all the same,
// not held by nobody for its whole TTL.
func TestLostGrantGivenBackAfterLongOutage(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	loadScripts(t, plain)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var down atomic.Bool
	rdb.AddHook(lostReplyHook(singleAcquire, 1))
	rdb.AddHook(&hook{before: func(cmd redis.Cmder) error {
		if down.Load() && isScript(cmd, scripts.Release) {
			return errors.New("injected: Redis unreachable")
		}
		return nil
	}})
	c := newLocker(t, rdb)
	down.Store(true)
	if _, err := c.TryAcquire(bg, "gb", dlock.WithTTL(2*time.Minute)); err == nil {
		t.Fatal("the lost reply was not lost")
	}
	time.Sleep(4 * time.Second) // the outage: longer than a queue entry lives
	down.Store(false)
	waitFor(t, "the lost grant given back", func() bool { return plain.Exists(bg, "dlock:{gb}").Val() == 0 })
}

// TestAttemptErrorInLineLeavesNoGhost: a waiter whose queued attempt fails
// (with an error before it is sent, here) gives its queue entry up as it
// returns: a release in the next seconds does not hand the lock to a waiter
// that has left, held by nobody.
func TestAttemptErrorInLineLeavesNoGhost(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	holder := newLocker(t, plain)
	var n atomic.Int32
	h := &hook{before: func(cmd redis.Cmder) error {
		if isScript(cmd, scripts.Acquire) {
			if queuedAcquire(cmd) && n.Add(1) == 2 {
				return context.DeadlineExceeded
			}
		}
		return nil
	}}
	wrdb := redis.NewClient(&redis.Options{Addr: plain.Options().Addr, MaxRetries: -1})
	wrdb.AddHook(h)
	waiter := newLocker(t, wrdb)
	l, err := holder.Acquire(bg, "x", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_, err = waiter.Acquire(bg, "x", dlock.WithTTL(10*time.Second), dlock.WithWait(5*time.Second))
	t.Logf("waiter gave up: %v", err)
	// The waiter leaves the line in the background.
	waitFor(t, "the waiter's entry to be withdrawn", func() bool { return plain.ZCard(bg, "dlock:{x}:q").Val() == 0 })
	_ = l.Release(bg)
	third := newLocker(t, plain)
	_, err = third.TryAcquire(bg, "x")
	pttl, _ := plain.PTTL(bg, "dlock:{x}").Result()
	t.Logf("after release, third TryAcquire: %v (pttl %v)", err, pttl)
	if err != nil {
		t.Errorf("BUG: lock handed to a waiter that already returned")
	}
}

// TestErrorReplyWithdrawRetried: a queued waiter gets error replies (BUSY:
// another client's script is running) until its wait ends, and gives up.
// Its withdrawal meets the same BUSY and fails; it is tried again in the
// background, with backoff, until it gets through. So the entry is out of the queue when the holder
// releases, right after the script is killed, and the lock is not handed to
// the waiter that has left, stranded for that waiter's TTL.
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
	// A wait that ends while the script still runs: BUSY is waited out
	// for as long as the wait lasts.
	res := acquireAsync(w, "busyw", dlock.WithTTL(time.Minute), dlock.WithWait(1500*time.Millisecond))
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
	if !errors.Is(r.err, dlock.ErrNotObtained) || !strings.Contains(r.err.Error(), "BUSY") {
		t.Fatalf("W: %v, want not obtained, during BUSY error replies", r.err)
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

// TestVerdictErrorWithdrawsQueuedEntry: the server check's verdict (too old a
// server: INFO faked to say 4.0.14) arrives in the background while a waiter
// is queued. Its next queued attempt renews the entry in Redis, finds the
// lock busy and fails with ErrUnsupportedServer; the attempt gives the place
// in line back, as it does a grant, so the holder's release does not hand
// the lock to the waiter that left.
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
