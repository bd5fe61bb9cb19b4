package dlock_test

// Regression tests for bugs found in review: each one injected a fault
// (a lost reply, a lost hand-off message, a re-sent enqueue) that left a
// lock held by nobody, or let two holders overlap, before it was fixed.

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

type hook struct {
	before func(cmd redis.Cmder) error
	after  func(cmd redis.Cmder)
	// pipe runs before a pipeline (the renewal loop's) is sent; an error
	// fails the whole pipeline unsent.
	pipe func(cmds []redis.Cmder) error
}

func (h *hook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.before != nil {
			if err := h.before(cmd); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		// go-redis sets a command's error from what the hooks return, so
		// after sees it set here, and an error after sets is returned.
		if err := next(ctx, cmd); err != nil {
			cmd.SetErr(err)
		}
		if h.after != nil {
			h.after(cmd)
		}
		return cmd.Err()
	}
}
func (h *hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.pipe != nil {
			if err := h.pipe(cmds); err != nil {
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		return next(ctx, cmds)
	}
}

func isScript(cmd redis.Cmder, s *redis.Script) bool {
	a := cmd.Args()
	if len(a) < 2 {
		return false
	}
	n, _ := a[0].(string)
	if n == "evalsha" || n == "EVALSHA" {
		x, _ := a[1].(string)
		return x == s.Hash()
	}
	return false
}

var netErr = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("injected")}

// Finding: handedOver's Refresh fails -> Acquire returns error, but the lock
// stays held and renewed forever.
func TestRegressionHandedOverRefreshLeak(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	holder := newLocker(t, plain)
	var failRefresh, armed atomic.Bool
	var l dlock.Lock
	h := &hook{before: func(cmd redis.Cmder) error {
		if isScript(cmd, scripts.Refresh) && failRefresh.CompareAndSwap(true, false) {
			return netErr
		}
		return nil
	}, after: func(cmd redis.Cmder) {
		if isScript(cmd, scripts.Acquire) && armed.Load() {
			if c, ok := cmd.(*redis.Cmd); ok {
				if v, _ := c.Slice(); len(v) == 3 && v[2] != "" && armed.CompareAndSwap(true, false) {
					failRefresh.Store(true)
					_ = l.Release(bg)
					time.Sleep(22 * time.Millisecond) // a slow reply / scheduling delay
				}
			}
		}
	}}
	wrdb := redis.NewClient(&redis.Options{Addr: plain.Options().Addr, MaxRetries: -1})
	wrdb.AddHook(h)
	waiter := newLocker(t, wrdb)
	ttl := 40 * time.Millisecond
	var err error
	l, err = holder.Acquire(bg, "x", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	_, err = waiter.Acquire(bg, "x", dlock.WithTTL(ttl), dlock.WithWait(5*time.Second))
	t.Logf("waiter Acquire returned err=%v", err)
	time.Sleep(2 * time.Second)
	tok, _ := plain.HGet(bg, "dlock:{x}", "token").Result()
	pttl, _ := plain.PTTL(bg, "dlock:{x}").Result()
	t.Logf("2s later (TTL 40ms): token=%.8s pttl=%v", tok, pttl)
	if err != nil && tok != "" {
		t.Errorf("BUG: Acquire failed but the lock is still held and renewed")
	}
}

// Finding: a hand-off whose message is lost is picked up by the timer
// re-attempt, which dates the lease from that attempt, not from the hand-off.
func TestRegressionLostHandoffLeaseTooLong(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	holder := newLocker(t, plain)
	attempted := make(chan struct{}, 100)
	h := &hook{after: func(cmd redis.Cmder) {
		if isScript(cmd, scripts.Acquire) {
			if c, ok := cmd.(*redis.Cmd); ok {
				if v, _ := c.Slice(); len(v) == 3 {
					select {
					case attempted <- struct{}{}:
					default:
					}
				}
			}
		}
	}}
	wrdb := redis.NewClient(&redis.Options{Addr: plain.Options().Addr})
	wrdb.AddHook(h)
	waiter := newLocker(t, wrdb)
	ttl := 4 * time.Second
	l, err := holder.Acquire(bg, "x", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		l   dlock.Lock
		err error
		at  time.Time
	}
	done := make(chan res, 1)
	go func() {
		wl, err := waiter.Acquire(bg, "x", dlock.WithTTL(ttl), dlock.WithWait(10*time.Second), dlock.WithoutRenewal())
		done <- res{wl, err, time.Now()}
	}()
	// wait for the second queued attempt (subscription confirmed by then)
	<-attempted
	for len(attempted) > 0 {
		<-attempted
	}
	<-attempted
	// kill pub/sub connections, then release at once: the hand-off message is lost
	kr := plain.Do(bg, "CLIENT", "KILL", "TYPE", "pubsub")
	t.Logf("kill: %v", kr)
	handoff := time.Now()
	_ = l.Release(bg)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("waiter learned of the hand-off %v after it", r.at.Sub(handoff))
	// wait until Redis drops the key
	for {
		n, _ := plain.Exists(bg, "dlock:{x}").Result()
		if n == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("key expired in Redis %v after hand-off; waiter ctx err=%v", time.Since(handoff), r.l.Context().Err())
	if r.l.Context().Err() == nil {
		other := newLocker(t, plain)
		ol, err := other.TryAcquire(bg, "x")
		t.Errorf("BUG: Redis expired the lock, holder's context still live; another TryAcquire: lock=%v err=%v", ol != nil, err)
	}
}

// Finding: two queue entries with the holder's own token (a re-sent queued
// attempt) make its own release hand the lock back to itself.
func TestRegressionSelfHandoff(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	holder := newLocker(t, plain)
	var once atomic.Bool
	wrdb := redis.NewClient(&redis.Options{Addr: plain.Options().Addr})
	wrdb.AddHook(&resendHook{once: &once})
	waiter := newLocker(t, wrdb)
	l, err := holder.Acquire(bg, "x", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(300 * time.Millisecond); _ = l.Release(bg) }()
	wl, err := waiter.Acquire(bg, "x", dlock.WithTTL(10*time.Second), dlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := wl.Release(bg); err != nil {
		t.Fatal(err)
	}
	tok, _ := plain.HGet(bg, "dlock:{x}", "token").Result()
	t.Logf("after waiter released: token in redis=%.8s (waiter token %.8s)", tok, wl.Token())
	if tok != "" {
		t.Errorf("BUG: released lock still held in Redis by its own token")
	}
}

// resendHook runs the first command that match accepts (by default a
// queued acquire attempt) twice, as go-redis does after a lost reply;
// between, when set, runs in the gap.
type resendHook struct {
	once    *atomic.Bool
	match   func(redis.Cmder) bool
	between func()
}

func (h *resendHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *resendHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		match := h.match
		if match == nil {
			match = queuedAcquire
		}
		if match(cmd) && err == nil && h.once.CompareAndSwap(false, true) {
			time.Sleep(3 * time.Millisecond)
			if h.between != nil {
				h.between()
			}
			err = next(ctx, cmd) // the reply was lost; go-redis sends it again
		}
		return err
	}
}
func (h *resendHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
