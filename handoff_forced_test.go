package dlock_test

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

// attemptGate holds a client's acquire attempts while shut: they wait,
// unsent, until it opens (or 10s pass). New connections wait too, so a
// pub/sub connection killed while shut cannot resubscribe, and hear a
// hand-off message, before the gate opens.
type attemptGate struct {
	shut atomic.Bool
	open chan struct{}
}

func newAttemptGate() *attemptGate { return &attemptGate{open: make(chan struct{})} }

func (g *attemptGate) wait(cmds ...redis.Cmder) {
	if !g.shut.Load() {
		return
	}
	for _, c := range cmds {
		if isScript(c, scripts.Acquire) {
			select {
			case <-g.open:
			case <-time.After(10 * time.Second):
			}
			return
		}
	}
}

func (g *attemptGate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if g.shut.Load() {
			select {
			case <-g.open:
			case <-time.After(10 * time.Second):
			}
		}
		return next(ctx, network, addr)
	}
}
func (g *attemptGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { g.wait(cmd); return next(ctx, cmd) }
}
func (g *attemptGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { g.wait(cmds...); return next(ctx, cmds) }
}

// A lock handed to a waiter whose hand-off message was lost, then
// force-unlocked by an operator before the waiter heard of it: the waiter's
// token is marked forced, so every later attempt of it is refused. The
// waiter starts over with a fresh token and takes the free lock, rather than
// waiting out its whole limit with a dead token and then reporting a holder
// "with no expiry".
func TestForcedHandOffStartsWaiterOver(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	loadScripts(t, plain)
	holderC := newLocker(t, plain)
	gate := newAttemptGate()
	wrdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	wrdb.AddHook(gate)
	t.Cleanup(func() { _ = wrdb.Close() })
	waiterC := newLocker(t, wrdb)
	holder, err := holderC.Acquire(bg, "forced", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   dlock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiterC.Acquire(bg, "forced", dlock.WithTTL(4*time.Second), dlock.WithWait(8*time.Second))
		got <- result{l, err}
	}()
	waitFor(t, "the waiter in line", func() bool {
		info, err := holderC.Inspect(bg, "forced")
		return err == nil && info.Waiters == 1
	})
	// From now on the waiter's attempts wait: the release hands the lock to
	// its token, and the operator forces it, before the waiter looks again.
	gate.shut.Store(true)
	// The hand-off message is lost with the pub/sub connections: the
	// waiter's cannot come back before the gate opens. (Before the dials
	// waited too, it sometimes resubscribed in time and took the lock from
	// the message before the force, a different case: CI.)
	if err := plain.Do(bg, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if err := holder.Release(bg); err != nil {
		t.Fatal(err)
	}
	info, err := holderC.Inspect(bg, "forced")
	if err != nil || info.Token == "" {
		t.Fatalf("after the release: %+v, %v; want the lock handed to the waiter", info, err)
	}
	if _, err := holderC.ForceUnlock(bg, "forced", info.Token); err != nil {
		t.Fatalf("forcing the handed-over lock: %v", err)
	}
	forced := time.Now()
	close(gate.open)
	var r result
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not return within its 8s wait")
	}
	if r.err != nil {
		t.Fatalf("the waiter did not take the free lock (%v after the forced unlock): %v", time.Since(forced).Round(time.Millisecond), r.err)
	}
	if d := time.Since(forced); d > 3*time.Second {
		t.Errorf("the waiter took the free lock %v after the forced unlock; it looks again within a second", d)
	}
	if _, err := r.l.TTL(bg); err != nil {
		t.Fatalf("the waiter's lock is not held in Redis: %v", err)
	}
	if err := r.l.Release(bg); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatal(err)
	}
}
