package dlock_test

// Each test here forces one interleaving of the waiting, hand-off, lease and
// release protocol that broke it before: a stale hand-off message read after
// a later reply, a refresh overtaken by a renewal, a reply lost after the
// script ran, a command sent twice. The faults are injected with go-redis
// hooks (delay, lose or re-send a reply) and a pub/sub connection that
// delivers late; the servers are real.

import (
	"context"
	"errors"
	"net"
	"strconv"
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

// scriptArg returns ARGV[i] (1-based) of an EVALSHA/EVAL command, whatever
// the number of keys.
func scriptArg(cmd redis.Cmder, i int) string {
	a := cmd.Args()
	if len(a) < 3 {
		return ""
	}
	var nkeys int
	switch n := a[2].(type) {
	case int:
		nkeys = n
	case int64:
		nkeys = int(n)
	}
	at := 3 + nkeys + i - 1
	if at >= len(a) {
		return ""
	}
	s, _ := a[at].(string)
	return s
}

// loadScripts loads dlock's scripts, so that hooks that match EVALSHA see
// each script run the first time too (not a NOSCRIPT and an EVAL).
func loadScripts(t *testing.T, rdb *redis.Client) {
	t.Helper()
	for _, s := range []*redis.Script{scripts.Acquire, scripts.Release, scripts.Refresh, scripts.PTTL} {
		if err := s.Load(bg, rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// queuedAcquire tells an acquire attempt that joins or renews the waiter
// queue (ARGV[4], the waiter's client id, is set) from a single attempt.
func queuedAcquire(cmd redis.Cmder) bool {
	return isScript(cmd, scripts.Acquire) && scriptArg(cmd, 4) != ""
}

func singleAcquire(cmd redis.Cmder) bool {
	return isScript(cmd, scripts.Acquire) && scriptArg(cmd, 4) == ""
}

// busyReply tells an acquire reply that found another holder.
func busyReply(cmd redis.Cmder) bool {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return false
	}
	v, err := c.Slice()
	return err == nil && len(v) >= 2 && v[0] == int64(0)
}

// hook is a go-redis hook: before runs before a command is sent (an error
// fails it unsent), after once its reply is in.
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

// isScript reports whether cmd runs s by its SHA (EVALSHA).
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

// netErr is a network error for a hook to fail a command with.
var netErr = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("injected")}

// TestStaleHandoffNotAccepted: a hand-off message read after a later busy
// reply is stale. Waiter W is queued; the holder hands the lock to W, but W
// stalls (here: inside the hook, as a paused process would) until the
// handed-over lease has expired and C has taken the lock. W's next attempt
// finds C holding it, and only then does W read the old message. W must not
// take it as a hand-off: C holds the lock.
func TestStaleHandoffNotAccepted(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	loadScripts(t, plain)
	holder, third := newLocker(t, plain), newLocker(t, plain)
	tap := &pubsubTap{} // holds back W's pub/sub reads on demand
	h1, err := holder.Acquire(bg, "stale", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var stage atomic.Int32
	var c3 atomic.Value
	h := &hook{after: func(cmd redis.Cmder) {
		if !queuedAcquire(cmd) || !busyReply(cmd) {
			return
		}
		switch stage.Add(1) {
		case 1: // W is queued behind the holder and now stalls.
			tap.hold()
			_ = h1.Release(bg) // hands the lock to W; the message is held back
			for i := 0; i < 400 && plain.Exists(bg, "dlock:{stale}").Val() == 1; i++ {
				time.Sleep(5 * time.Millisecond)
			}
			l, err := third.TryAcquire(bg, "stale", dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Errorf("C could not take the expired hand-off: %v", err)
				return
			}
			c3.Store(l)
		case 2: // W's attempt after the stall found C: now the old message arrives.
			tap.deliver()
		}
	}}
	wrdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Dialer: tap.dial})
	wrdb.AddHook(h)
	t.Cleanup(func() { tap.deliver(); _ = wrdb.Close() })
	waiter := newLocker(t, wrdb)

	wl, err := waiter.Acquire(bg, "stale", dlock.WithTTL(300*time.Millisecond), dlock.WithWait(1500*time.Millisecond))
	if stage.Load() < 2 {
		t.Fatalf("the interleaving did not happen (stage %d, err %v)", stage.Load(), err)
	}
	c, _ := c3.Load().(dlock.Lock)
	if c == nil {
		t.Fatal("C never held the lock")
	}
	if wl != nil {
		tok := plain.HGet(bg, "dlock:{stale}", "token").Val()
		t.Fatalf("two holders: W's Acquire returned a lock (context live: %v) while C holds it in Redis (C's token stored: %v)",
			wl.Context().Err() == nil, tok == c.Token())
	}
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("W: %v, want ErrNotObtained (C holds the lock)", err)
	}
	if tok := plain.HGet(bg, "dlock:{stale}", "token").Val(); tok != c.Token() {
		t.Fatal("C no longer holds the lock")
	}
}

// TestHandoffConfirmFailsWaitsOn: W takes a hand-off message as its own but
// the lease ran out while W stalled, and another client holds the lock by
// the time W confirms it. W must go back to waiting, not fail with
// ErrNotHeld, and get the lock when that client releases it.
func TestHandoffConfirmFailsWaitsOn(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	loadScripts(t, plain)
	holder, third := newLocker(t, plain), newLocker(t, plain)
	h1, err := holder.Acquire(bg, "confirm", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var stage atomic.Int32
	h := &hook{after: func(cmd redis.Cmder) {
		if !queuedAcquire(cmd) || !busyReply(cmd) || stage.Add(1) != 1 {
			return
		}
		_ = h1.Release(bg) // hands the lock to W, whose lease then runs out
		for i := 0; i < 400 && plain.Exists(bg, "dlock:{confirm}").Val() == 1; i++ {
			time.Sleep(5 * time.Millisecond)
		}
		l, err := third.TryAcquire(bg, "confirm", dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Errorf("C: %v", err)
			return
		}
		time.AfterFunc(300*time.Millisecond, func() { _ = l.Release(bg) })
	}}
	wrdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	wrdb.AddHook(h)
	t.Cleanup(func() { _ = wrdb.Close() })
	waiter := newLocker(t, wrdb)
	wl, err := waiter.Acquire(bg, "confirm", dlock.WithTTL(200*time.Millisecond), dlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("W gave up although C released the lock: %v", err)
	}
	if tok := plain.HGet(bg, "dlock:{confirm}", "token").Val(); tok != wl.Token() {
		t.Fatal("W returned a lock that Redis does not give to it")
	}
	_ = wl.Release(bg)
}

// TestRefreshOvertakenByRenewal: a renewal with the old TTL is sent, then a
// Refresh with a longer TTL overtakes it on the way to Redis. Redis must not
// end up with the shorter lease while the client believes the longer one:
// with every later renewal failing, the holder's context must have ended by
// the time Redis drops the key.
func TestRefreshOvertakenByRenewal(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	loadScripts(t, plain)
	renewing, refreshed := make(chan struct{}), make(chan struct{})
	var pipes atomic.Int32
	h := &hook{pipe: func(cmds []redis.Cmder) error {
		if len(cmds) == 0 || !isScript(cmds[0], scripts.Refresh) {
			return nil
		}
		switch pipes.Add(1) {
		case 1: // the renewal: held back until the Refresh has run
			close(renewing)
			<-refreshed
			return nil
		default: // from now on no renewal reaches Redis
			return netErr
		}
	}}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	rdb.AddHook(h)
	t.Cleanup(func() { _ = rdb.Close() })
	c := newLocker(t, rdb)
	l, err := c.Acquire(bg, "race", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-renewing
	if err := l.Refresh(bg, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	close(refreshed)
	deadline := time.Now().Add(5 * time.Second)
	for plain.Exists(bg, "dlock:{race}").Val() == 1 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	gone := l.Context().Err() != nil
	if !gone {
		other, err := newLocker(t, plain).TryAcquire(bg, "race")
		t.Fatalf("Redis dropped the lock while the holder's context is live; another TryAcquire: %v, %v", other != nil, err)
	}
}

// TestRefreshAfterDeadlineReportsLoss: a Refresh whose reply comes back
// after the lease deadline fired must not report success: the lock's
// context is already cancelled.
func TestRefreshAfterDeadlineReportsLoss(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(t, srv.Client(t))
	var slow atomic.Bool
	h := &hook{after: func(cmd redis.Cmder) {
		if isScript(cmd, scripts.Refresh) && cmd.Err() == nil && slow.CompareAndSwap(true, false) {
			time.Sleep(500 * time.Millisecond) // the reply is late
		}
	}}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	rdb.AddHook(h)
	t.Cleanup(func() { _ = rdb.Close() })
	l, err := newLocker(t, rdb).Acquire(bg, "late", dlock.WithTTL(400*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	slow.Store(true)
	err = l.Refresh(bg, 400*time.Millisecond)
	if l.Context().Err() == nil {
		t.Fatal("the deadline did not fire during the slow refresh")
	}
	if err == nil {
		t.Fatalf("Refresh reported success with the lock's context already ended (%v)", context.Cause(l.Context()))
	}
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Refresh: %v, want ErrNotHeld", err)
	}
}

// lostReplyHook lets a matching command run in Redis and then loses its
// reply, as a deadline or a reset after the write would.
func lostReplyHook(match func(redis.Cmder) bool, times int32) *hook {
	var n atomic.Int32
	return &hook{after: func(cmd redis.Cmder) {
		if match(cmd) && cmd.Err() == nil && n.Add(1) <= times {
			cmd.SetErr(context.DeadlineExceeded)
		}
	}}
}

// TestLostReplyGivesGrantBack: a single attempt whose script granted the
// lock but whose reply was lost must give the grant back, not leave the
// lock blocking everybody for its TTL.
func TestLostReplyGivesGrantBack(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	loadScripts(t, plain)
	for _, tc := range []struct {
		name string
		try  func(c *dlock.Client, name string) (dlock.Lock, error)
	}{
		{"TryAcquire", func(c *dlock.Client, name string) (dlock.Lock, error) {
			return c.TryAcquire(bg, name, dlock.WithTTL(time.Minute))
		}},
		{"WithWait0", func(c *dlock.Client, name string) (dlock.Lock, error) {
			return c.Acquire(bg, name, dlock.WithTTL(time.Minute), dlock.WithWait(0))
		}},
		{"AcquireFirstAttempt", func(c *dlock.Client, name string) (dlock.Lock, error) {
			return c.Acquire(bg, name, dlock.WithTTL(time.Minute), dlock.WithWait(200*time.Millisecond))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
			rdb.AddHook(lostReplyHook(singleAcquire, 1))
			t.Cleanup(func() { _ = rdb.Close() })
			c := newLocker(t, rdb)
			name := "lost-" + tc.name
			l, err := tc.try(c, name)
			if err == nil {
				_ = l.Release(bg)
				t.Fatal("the lost reply was not lost")
			}
			waitFor(t, "the lost grant to be given back", func() bool {
				return plain.Exists(bg, "dlock:{"+name+"}").Val() == 0
			})
			if _, err := newLocker(t, plain).TryAcquire(bg, name); err != nil {
				t.Fatalf("after the lost grant: %v", err)
			}
		})
	}
}

// TestQueuedReplyLostLeavesNoGhost: a queued attempt that ran in Redis but
// whose reply was lost must not leave a queue entry that a release then
// hands the lock to.
func TestQueuedReplyLostLeavesNoGhost(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	loadScripts(t, plain)
	holder := newLocker(t, plain)
	l, err := holder.Acquire(bg, "ghost-a", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	rdb.AddHook(lostReplyHook(queuedAcquire, 1))
	t.Cleanup(func() { _ = rdb.Close() })
	if _, err := newLocker(t, rdb).Acquire(bg, "ghost-a", dlock.WithTTL(time.Minute), dlock.WithWait(2*time.Second)); err == nil {
		t.Fatal("the waiter got a busy lock")
	}
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	// The lost attempt's entry is withdrawn in the background: a release in
	// the moment before may hand the lock to it, and the withdrawal then
	// frees it at once, not after the waiter's TTL (a minute).
	third := newLocker(t, plain)
	waitFor(t, "the lock to be free of the waiter that left", func() bool {
		l, err := third.TryAcquire(bg, "ghost-a")
		if err == nil {
			_ = l.Release(bg)
		}
		return err == nil
	})
}

// TestResentQueuedAttemptLeavesNoGhost: go-redis sends a queued attempt again
// after a lost reply. The waiter then gives up; no entry of it may stay.
func TestResentQueuedAttemptLeavesNoGhost(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	loadScripts(t, plain)
	holder := newLocker(t, plain)
	l, err := holder.Acquire(bg, "ghost-b", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var once atomic.Bool
	h := &hook{}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	rdb.AddHook(h)
	rdb.AddHook(&resendHook{once: &once, match: queuedAcquire})
	t.Cleanup(func() { _ = rdb.Close() })
	if _, err := newLocker(t, rdb).Acquire(bg, "ghost-b", dlock.WithTTL(10*time.Second), dlock.WithWait(300*time.Millisecond)); err == nil {
		t.Fatal("the waiter got a busy lock")
	}
	if !once.Load() {
		t.Fatal("no queued attempt was sent twice")
	}
	// The waiter leaves the line in the background; with a second entry
	// left behind, the queue would never empty.
	waitFor(t, "the waiter's entries to be withdrawn", func() bool {
		return plain.Exists(bg, "dlock:{ghost-b}:q").Val() == 0
	})
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := newLocker(t, plain).TryAcquire(bg, "ghost-b"); err != nil {
		t.Fatalf("the release handed the lock to a ghost entry: %v", err)
	}
	if n := plain.Exists(bg, "dlock:{ghost-b}:q").Val(); n != 0 {
		t.Fatalf("the waiter queue still exists (%d)", n)
	}
}

// TestResentReleaseOnContendedName: a release whose reply was lost is sent
// again after the waiter it handed the lock to has acquired and released it
// too. The re-sent release must still report success.
func TestResentReleaseOnContendedName(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	loadScripts(t, plain)
	next := newLocker(t, plain)
	var armed atomic.Bool
	handed := make(chan struct{})
	var wg sync.WaitGroup
	h := &resendHook{once: &armed, match: func(cmd redis.Cmder) bool { return isScript(cmd, scripts.Release) }, between: func() {
		<-handed // the waiter got the lock, used it and released it
	}}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	rdb.AddHook(h)
	t.Cleanup(func() { _ = rdb.Close() })
	first := newLocker(t, rdb)
	l, err := first.Acquire(bg, "resent", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		defer close(handed)
		nl, err := next.Acquire(bg, "resent", dlock.WithTTL(10*time.Second), dlock.WithWait(5*time.Second))
		if err != nil {
			t.Errorf("waiter: %v", err)
			return
		}
		if err := nl.Release(bg); err != nil {
			t.Errorf("waiter's release: %v", err)
		}
	})
	waitFor(t, "the waiter to queue", func() bool { return plain.Exists(bg, "dlock:{resent}:q").Val() == 1 })
	err = l.Release(bg)
	wg.Wait()
	if !armed.Load() {
		t.Fatal("the release was not sent twice")
	}
	if err != nil {
		t.Fatalf("a re-sent release reported %v; it had released the lock", err)
	}
}

// TestFenceCounterHasIdleLifetime: a fence counter does not live for ever,
// and fences still grow after it expired.
func TestFenceCounterHasIdleLifetime(t *testing.T) {
	c, rdb, _ := setup(t)
	loadScripts(t, rdb)
	l := mustAcquire(t, c, "counter")
	_ = l.Release(bg)
	ttl := rdb.PTTL(bg, "dlock:{counter}:fence").Val()
	if ttl <= 0 {
		t.Fatalf("fence counter has no expiry (PTTL %v)", ttl)
	}
	expireNow(t, rdb, "dlock:{counter}:fence")
	l2 := mustAcquire(t, c, "counter")
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence after the counter expired %d, not above %d", l2.Fence(), l.Fence())
	}
}

// TestFencingRejectsPausedHolder: two holders by design. A holder paused
// past its lease (here: the lease ended on the server while it did not run)
// still believes, for a moment after it resumes, what it believed before;
// a write already on its way when it resumes is stale. The resource refuses
// it because the next holder wrote with a larger fence.
func TestFencingRejectsPausedHolder(t *testing.T) {
	c, rdb, _ := setup(t)
	a := mustAcquire(t, c, "fenced", dlock.WithTTL(10*time.Second))
	expireNow(t, rdb, "dlock:{fenced}") // A is paused; its lease ends on the server
	b := mustAcquire(t, newLocker(t, rdb), "fenced", dlock.WithTTL(10*time.Second))
	if b.Fence() <= a.Fence() {
		t.Fatalf("fences: A %d, B %d; want B's larger", a.Fence(), b.Fence())
	}
	// fencedWrite (pause_test.go) is the resource: it refuses a fence below
	// the largest it has seen.
	write := func(l dlock.Lock) int64 {
		n, err := fencedWrite.Run(bg, rdb, []string{"resource"}, l.Fence()).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if write(b) != 1 {
		t.Fatal("the current holder's write was refused")
	}
	if write(a) != 0 {
		t.Fatal("the paused holder's stale write was accepted")
	}
}

// lateHook models a command whose bytes reach Redis late: the client gives
// up on it (an injected network error here; a deadline is the same to
// dlock), dlock gives the token back on another pooled connection, and only
// then does the delayed command arrive and run (a retransmitted segment; data
// written before a close still arrives). The delayed copy runs on late, a
// separate connection, after delay.
func lateHook(match func(redis.Cmder) bool, late *redis.Client, delay time.Duration, ran chan<- []any) *hook {
	var once atomic.Bool
	return &hook{before: func(cmd redis.Cmder) error {
		if !match(cmd) || !once.CompareAndSwap(false, true) {
			return nil
		}
		args := append([]any(nil), cmd.Args()...)
		go func() {
			time.Sleep(delay)
			v, err := late.Do(context.Background(), args...).Slice()
			if err != nil {
				ran <- []any{err}
				return
			}
			ran <- v
		}()
		return netErr
	}}
}
func TestLateAcquireAfterGiveBackGrantsNothing(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	loadScripts(t, plain)
	ran := make(chan []any, 1)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	rdb.AddHook(lateHook(singleAcquire, plain, 200*time.Millisecond, ran))
	t.Cleanup(func() { _ = rdb.Close() })
	c := newLocker(t, rdb)
	if l, err := c.TryAcquire(bg, "late1", dlock.WithTTL(30*time.Second)); err == nil {
		_ = l.Release(bg)
		t.Fatal("the reply was not lost")
	}
	select {
	case v := <-ran:
		t.Logf("late acquire executed, reply %v", v)
	case <-time.After(5 * time.Second):
		t.Fatal("the late command never ran")
	}
	time.Sleep(100 * time.Millisecond) // any background giveBack is long done
	other := newLocker(t, plain)
	if l, err := other.TryAcquire(bg, "late1"); err != nil {
		ttl := plain.PTTL(bg, "dlock:{late1}").Val()
		t.Fatalf("lock stranded after a lost reply: held by a token nobody has, for %v more: %v", ttl, err)
	} else {
		_ = l.Release(bg)
	}
}
func TestLateQueuedAttemptAfterGiveUpQueuesNothing(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	loadScripts(t, plain)
	holder := newLocker(t, plain)
	h, err := holder.Acquire(bg, "late2", dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan []any, 1)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	rdb.AddHook(lateHook(queuedAcquire, plain, 200*time.Millisecond, ran))
	t.Cleanup(func() { _ = rdb.Close() })
	w := newLocker(t, rdb)
	if l, err := w.Acquire(bg, "late2", dlock.WithTTL(30*time.Second), dlock.WithWait(2*time.Second)); err == nil {
		_ = l.Release(bg)
		t.Fatal("waiter got a held lock")
	} else {
		t.Logf("waiter: %v", err)
	}
	select {
	case v := <-ran:
		t.Logf("late queued acquire executed, reply %v", v)
	case <-time.After(5 * time.Second):
		t.Fatal("the late command never ran")
	}
	t.Logf("queue after the waiter left: %v", plain.ZRange(bg, "dlock:{late2}:q", 0, -1).Val())
	if err := h.Release(bg); err != nil {
		t.Fatal(err)
	}
	other := newLocker(t, plain)
	if l, err := other.TryAcquire(bg, "late2"); err != nil {
		ttl := plain.PTTL(bg, "dlock:{late2}").Val()
		t.Fatalf("release handed the lock to an abandoned token: stranded for %v: %v", ttl, err)
	} else {
		_ = l.Release(bg)
	}
}

// TestGiveUpReturnsAtWaitLimit: a waiter whose wait limit passes while Redis
// does not answer it returns at the limit; leaving the line must not hold it
// up for the release timeout.
func TestGiveUpReturnsAtWaitLimit(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	if _, err := newLocker(t, plain).Acquire(bg, "stalled", dlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	rdb, proxy := proxied(t, srv, redis.Options{})
	w := newLocker(t, rdb, dlock.WithReleaseTimeout(5*time.Second))
	// Shorter than a waiter's wake-up (0.8–1 s with this TTL): the limit
	// passes while W waits between attempts, not during one.
	const wait = 700 * time.Millisecond
	start := time.Now()
	res := acquireAsync(w, "stalled", dlock.WithTTL(time.Minute), dlock.WithWait(wait))
	waitFor(t, "W to queue", func() bool { return plain.ZCard(bg, "dlock:{stalled}:q").Val() == 1 })
	proxy.Blackhole() // Redis stops answering W while it waits between attempts
	var r acquired
	select {
	case r = <-res:
	case <-time.After(wait + 10*time.Second):
		t.Fatal("Acquire did not return")
	}
	took := time.Since(start)
	if !errors.Is(r.err, dlock.ErrNotObtained) {
		t.Fatalf("Acquire: %v, want ErrNotObtained", r.err)
	}
	// A bound far above scheduling noise and far below wait + the release
	// timeout (5.7 s), which the give-up used to take.
	if took > wait+2*time.Second {
		t.Fatalf("Acquire(WithWait(%v)) returned after %v: leaving the line held it up", wait, took)
	}
	proxy.Pass()
}

// A lease is extended only forward (extend in common.lua), but a lock key
// that lost its expiry (PERSIST by another client or an operator) must get
// one back at the next renewal: a key without one blocks the name for good
// once its holder dies. The check that Redis keeps the longer of two
// leases must not read "no expiry" as "longest".
func TestRenewalPutsBackAnExpiryTakenFromTheLock(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	c := newLocker(t, plain)
	l, err := c.Acquire(bg, "persisted", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(bg) }()
	if !plain.Persist(bg, "dlock:{persisted}").Val() {
		t.Fatal("PERSIST found no expiry to remove")
	}
	// A renewal is due every TTL/3 (100 ms).
	deadline := time.Now().Add(5 * time.Second)
	for plain.PTTL(bg, "dlock:{persisted}").Val() < 0 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	if left := plain.PTTL(bg, "dlock:{persisted}").Val(); left <= 0 || left > 300*time.Millisecond {
		t.Fatalf("after renewals the lock key's PTTL is %v; want a lease of at most the TTL back", left)
	}
	if l.Context().Err() != nil {
		t.Fatalf("the lock was lost: %v", context.Cause(l.Context()))
	}
}

// A Refresh with a shorter TTL leaves Redis the longer lease it has, and
// records the TTL asked for (what Inspect reports as the lease), while a
// longer one extends it.
func TestRefreshNeverShortensTheServerLease(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	l, err := newLocker(t, plain).Acquire(bg, "shorter", dlock.WithTTL(10*time.Second), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(bg) }()
	if err := l.Refresh(bg, time.Second); err != nil {
		t.Fatal(err)
	}
	if left := plain.PTTL(bg, "dlock:{shorter}").Val(); left < 5*time.Second {
		t.Fatalf("after a 1s Refresh of a 10s lease Redis has %v left; want the 10s lease kept", left)
	}
	if ttl := plain.HGet(bg, "dlock:{shorter}", "ttl").Val(); ttl != "1000" {
		t.Fatalf("ttl field %q after a 1s Refresh, want 1000", ttl)
	}
	if err := l.Refresh(bg, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if left := plain.PTTL(bg, "dlock:{shorter}").Val(); left < 20*time.Second {
		t.Fatalf("after a 30s Refresh Redis has %v left", left)
	}
	if ttl := plain.HGet(bg, "dlock:{shorter}", "ttl").Val(); ttl != "30000" {
		t.Fatalf("ttl field %q after a 30s Refresh, want 30000", ttl)
	}
}

// A refresh is a write even when it moves nothing (the lease in Redis is
// already longer, the ttl field unchanged): a WAIT or WAITAOF after it
// counts the writes of its own connection only, and covers another
// connection's write before it (the releaser's hand-off, confirmed by the
// waiter's refresh and a WAIT) only because the refresh wrote after it. A
// hand-off refreshed in the millisecond of its grant moves nothing.
func TestRefreshThatMovesNothingStillWrites(t *testing.T) {
	c, rdb, primary := setup(t)
	startReplica(t, primary)
	// The primary's pings to its replica move the offset too.
	if err := rdb.ConfigSet(bg, "repl-ping-replica-period", "3600").Err(); err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(bg, "still", dlock.WithTTL(10*time.Second), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(bg) }()
	// Another write makes the lease in Redis longer than any Refresh asks.
	if !rdb.PExpire(bg, "dlock:{still}", time.Minute).Val() {
		t.Fatal("PEXPIRE found no lock key")
	}
	offset := func() int64 {
		info := rdb.Info(bg, "replication").Val()
		_, v, _ := strings.Cut(info, "master_repl_offset:")
		n, _ := strconv.ParseInt(strings.TrimSpace(strings.SplitN(v, "\n", 2)[0]), 10, 64)
		return n
	}
	before := offset()
	if err := l.Refresh(bg, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if after := offset(); after == before {
		t.Fatalf("a Refresh that found a longer lease wrote nothing (replication offset %d unchanged)", before)
	}
	if left := rdb.PTTL(bg, "dlock:{still}").Val(); left < 30*time.Second {
		t.Fatalf("the Refresh shortened the lease to %v", left)
	}
}
