package dlock_test

// A release hands the lock to the next waiter in line. Each test here forces
// a fault around one hand-off (its message lost, its confirmation failed, a
// queued attempt sent twice); none leaves a lock held by nobody, or a holder
// that believes in a longer lease than Redis has.

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// TestHandOffFailedRefreshLeavesNoLock: a lock handed to a waiter that must
// refresh it before work starts (too little of the hand-off's lease is known
// to be left) and whose Refresh fails is released before the waiter's Acquire
// returns the error: it is not left held, and renewed, by nobody.
func TestHandOffFailedRefreshLeavesNoLock(t *testing.T) {
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
				if v, _ := c.Slice(); len(v) >= 3 && v[0] == int64(0) && armed.CompareAndSwap(true, false) {
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

// TestLostHandOffLeaseDatedFromHandOff: a hand-off whose message is lost (the
// pub/sub connections killed) is picked up by the waiter's timer re-attempt;
// the lease stays dated from the hand-off, not from that attempt, so the
// waiter's context has ended by the time Redis drops the key.
func TestLostHandOffLeaseDatedFromHandOff(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	holder := newLocker(t, plain)
	attempted := make(chan struct{}, 100)
	h := &hook{after: func(cmd redis.Cmder) {
		if isScript(cmd, scripts.Acquire) {
			if c, ok := cmd.(*redis.Cmd); ok {
				if v, _ := c.Slice(); len(v) >= 3 && v[0] == int64(0) {
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

// TestReleaseDoesNotHandOffToItself: a waiter's queued attempt that go-redis
// sends twice (a re-send after a lost reply: resendHook) puts its token in
// line twice; once the lock is handed to it, its own release does not hand
// the lock back to that token: the lock is free after it.
func TestReleaseDoesNotHandOffToItself(t *testing.T) {
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
