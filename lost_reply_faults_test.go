package dlock_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// replyFault: for the commands match accepts, mode decides what happens:
// "run+lose": run it, then lose the reply (after gate, if set);
// "fail": fail it unsent, after delay.
type replyFault struct {
	mu    sync.Mutex
	match func(redis.Cmder) bool
	mode  string
	delay time.Duration
	times int // 0: unlimited
	n     int
	gate  chan struct{} // run+lose: wait for it before losing the reply
	held  chan struct{} // closed when the first gated reply is held
	once  sync.Once
}

var errReset = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}

func (h *replyFault) take(cmds ...redis.Cmder) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mode == "" {
		return "", false
	}
	for _, c := range cmds {
		if h.match(c) {
			if h.times > 0 && h.n >= h.times {
				return "", false
			}
			h.n++
			return h.mode, true
		}
	}
	return "", false
}

func (h *replyFault) set(mode string) { h.mu.Lock(); h.mode = mode; h.mu.Unlock() }

func (h *replyFault) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *replyFault) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		mode, ok := h.take(cmd)
		if !ok {
			return next(ctx, cmd)
		}
		return h.apply(mode, func() error { return next(ctx, cmd) }, cmd)
	}
}
func (h *replyFault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		mode, ok := h.take(cmds...)
		if !ok {
			return next(ctx, cmds)
		}
		return h.apply(mode, func() error { return next(ctx, cmds) }, cmds...)
	}
}

func (h *replyFault) apply(mode string, next func() error, cmds ...redis.Cmder) error {
	h.mu.Lock()
	delay := h.delay // set by the test while commands run
	h.mu.Unlock()
	switch mode {
	case "run+lose":
		_ = next()
		if h.gate != nil {
			h.once.Do(func() { close(h.held) })
			<-h.gate
		}
	case "fail":
		time.Sleep(delay)
	case "late-run":
		time.Sleep(delay)
		return next()
	}
	for _, c := range cmds {
		c.SetErr(errReset)
	}
	return errReset
}

// A lock whose Refresh reply was lost (so the key may be leased beyond what
// was confirmed) and whose Release failed: when the deadline passes while a
// try of the background release confirmation is out, the deadline leaves
// the give-back of that lease to the release; the try fails, and the
// confirmation gives the key back itself, rather than leave it held by
// nobody until the unconfirmed lease ends.
func TestFailedReleaseConfirmationGivesLapsedLeaseBack(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{{"release fails fast (control)", 0}, {"release fails slowly", 500 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			loadScripts(t, srv.Client(t))
			refresh := &replyFault{match: func(c redis.Cmder) bool { return isScript(c, scripts.Refresh) }}
			release := &replyFault{match: func(c redis.Cmder) bool { return isScript(c, scripts.Release) }, delay: tc.delay}
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
			rdb.AddHook(refresh)
			rdb.AddHook(release)
			t.Cleanup(func() { _ = rdb.Close() })
			c := newLocker(t, rdb)
			other := newLocker(t, srv.Client(t))

			start := time.Now()
			l, err := c.Acquire(bg, "lapsed", dlock.WithTTL(2*time.Second), dlock.WithoutRenewal())
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(800 * time.Millisecond)
			refresh.set("run+lose") // the Refresh runs (10s lease in Redis), its reply is lost
			if err := l.Refresh(bg, 10*time.Second); err == nil {
				t.Fatal("refresh reported success")
			}
			refresh.set("")
			release.set("fail") // an outage: the release does not run
			if err := l.Release(bg); err == nil {
				t.Fatal("release reported success")
			}
			select {
			case <-l.Context().Done():
			case <-time.After(3 * time.Second):
				t.Fatal("no deadline")
			}
			t.Logf("lost at %v: %v", time.Since(start).Round(time.Millisecond), context.Cause(l.Context()))
			time.Sleep(time.Until(start.Add(2300 * time.Millisecond)))
			release.set("") // the outage is over
			time.Sleep(time.Until(start.Add(3500 * time.Millisecond)))
			o, err := other.TryAcquire(bg, "lapsed")
			if err != nil {
				t.Fatalf("1.5s after the lease's end, 1.2s after the outage: %v (the lapsed give-back never ran; the key is held by nobody until the lost Refresh's lease ends at ~10.8s)", err)
			}
			_ = o.Release(bg)
		})
	}
}

// A Release that failed while the lock was held, then the loss at the
// deadline, then the lapsed give-back, which writes the token's record: the
// caller's retried Release answered "released before" must not report
// success, since no release of the holder ran and another holder has the
// lock (a give-up writes the same record).
func TestRetriedReleaseAfterLossIsNoSuccessOnGiveUpRecord(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(t, srv.Client(t))
	refresh := &replyFault{match: func(c redis.Cmder) bool { return isScript(c, scripts.Refresh) }}
	release := &replyFault{match: func(c redis.Cmder) bool { return isScript(c, scripts.Release) && scriptArg(c, 3) == "0" }}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	rdb.AddHook(refresh)
	rdb.AddHook(release)
	t.Cleanup(func() { _ = rdb.Close() })
	rec := &recorder{}
	c := newLocker(t, rdb, dlock.WithObserver(rec))
	other := newLocker(t, srv.Client(t))

	l, err := c.Acquire(bg, "misreport", dlock.WithTTL(2*time.Second), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(800 * time.Millisecond)
	refresh.set("run+lose") // the key is leased for 3s more in Redis; asked > served
	_ = l.Refresh(bg, 3*time.Second)
	refresh.set("")
	release.set("fail") // the holder's releases (kind '0') never run; give-backs (kind '1') do
	if err := l.Release(bg); err == nil {
		t.Fatal("release reported success")
	}
	<-l.Context().Done()
	t.Logf("lock ended: %v", context.Cause(l.Context()))
	// The lapsed give-back (kind '1') frees the key and writes the record.
	var o dlock.Lock
	waitFor(t, "another client to take the lock", func() bool {
		o, err = other.TryAcquire(bg, "misreport")
		return err == nil
	})
	defer o.Release(bg)
	release.set("")
	if err := l.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("retried Release = %v while another client holds the lock and no release of ours ever ran; want ErrNotHeld", err)
	}
}

// A go-redis client closed under dlock (redis.ErrClosed) is no outage to
// wait out: a waiting Acquire fails at once.
func TestClosedRedisClientEndsWaitAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	c := newLocker(t, rdb)
	_ = rdb.Close()
	start := time.Now()
	_, err := c.Acquire(bg, "closed", dlock.WithWait(2*time.Second))
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Acquire on a closed go-redis client took %v (err %v): redis.ErrClosed retried as an outage", took.Round(time.Millisecond), err)
	}
}

// A waiter whose first queued attempt ran (it is in line) but whose reply
// was lost has heard no busy reply to date a hand-off from: a hand-off
// heard in the outage pause is dated from that attempt's send time, not
// from the zero time, so the Lock made for it is not lost at once (an
// OnLost for a lock the caller never saw) and the hand-off is kept.
func TestHandOffAfterLostQueuedReplyDatedFromQueuing(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(t, srv.Client(t))
	h := &replyFault{match: queuedAcquire, mode: "run+lose", times: 1, gate: make(chan struct{}), held: make(chan struct{})}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	rdb.AddHook(h)
	t.Cleanup(func() { _ = rdb.Close() })
	rec := &recorder{}
	waiterC := newLocker(t, rdb, dlock.WithObserver(rec))
	holderC := newLocker(t, srv.Client(t))
	holder := mustAcquire(t, holderC, "zero", dlock.WithTTL(10*time.Second))
	got := make(chan dlock.Lock, 1)
	go func() {
		l, err := waiterC.Acquire(bg, "zero", dlock.WithTTL(2*time.Second), dlock.WithWait(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	<-h.held // the waiter's first queued attempt put it in line; its reply is held
	if err := holder.Release(bg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the hand-off message reaches the waiter's subscription
	close(h.gate)
	l := <-got
	if l == nil {
		t.Fatal("no lock")
	}
	defer l.Release(bg)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.losses {
		t.Errorf("OnLost for a lock the caller never saw: %+v", e)
	}
	if l.Fence() <= holder.Fence()+0 {
		t.Logf("fence %d", l.Fence())
	}
	t.Logf("releases seen by the waiter's observer: %d", len(rec.releases))
}

// A background release confirmation sent before the deadline and answered
// after it leaves a lock already lost (OnLost reported) lost: no release
// event of success, and the caller's retried Release says "lost before the
// release", as a Release answered after the loss does.
func TestReleaseConfirmedAfterLossStaysLost(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(t, srv.Client(t))
	release := &replyFault{match: func(c redis.Cmder) bool { return isScript(c, scripts.Release) }}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	rdb.AddHook(release)
	t.Cleanup(func() { _ = rdb.Close() })
	rec := &recorder{}
	c := newLocker(t, rdb, dlock.WithObserver(rec))
	start := time.Now()
	l, err := c.Acquire(bg, "late", dlock.WithTTL(2*time.Second), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(start.Add(time.Second)))
	release.set("fail")
	if err := l.Release(bg); err == nil {
		t.Fatal("release reported success")
	}
	time.Sleep(time.Until(start.Add(1450 * time.Millisecond)))
	release.mu.Lock()
	release.mode, release.delay = "late-run", 250*time.Millisecond
	release.mu.Unlock()
	time.Sleep(time.Until(start.Add(2500 * time.Millisecond)))
	err = l.Release(bg)
	rec.mu.Lock()
	t.Logf("losses %d, releases %+v; cause %v", len(rec.losses), rec.releases, context.Cause(l.Context()))
	rec.mu.Unlock()
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("retried Release after OnLost = %v; release() reports a release that ran after the loss as ErrNotHeld", err)
	}
}
