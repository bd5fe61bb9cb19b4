package dlock_test

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
)

// batchHook holds the lock call of the name in hold (a script call whose
// keys carry "{"+hold+"}") until release is closed, so that the calls made
// meanwhile queue and leave in one pipeline (WithBatchDepth(1)); and does
// pipe to every pipeline of script calls in place of sending it.
type batchHook struct {
	hold    string
	release chan struct{}
	held    chan struct{}
	armed   atomic.Bool // hold the next call of hold, once
	pipe    func(ctx context.Context, next redis.ProcessPipelineHook, cmds []redis.Cmder) error
	pipes   atomic.Int64
}

func (h *batchHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *batchHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.armed.Load() && strings.Contains(fmt.Sprint(cmd.Args()...), "{"+h.hold+"}") && h.armed.CompareAndSwap(true, false) {
			h.held <- struct{}{}
			<-h.release
		}
		return next(ctx, cmd)
	}
}

func (h *batchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() != "evalsha" {
			return next(ctx, cmds) // a connection's set-up
		}
		h.pipes.Add(1)
		return h.pipe(ctx, next, cmds)
	}
}

// inOneBatch runs each of calls on its own goroutine while a call on the
// name hold is out, so that they leave together in one pipeline; it
// returns when all have returned.
func inOneBatch(t *testing.T, c *dlock.Client, h *batchHook, hold string, calls []func()) {
	t.Helper()
	dlock.HoldBatches(c)
	h.hold, h.release, h.held = hold, make(chan struct{}), make(chan struct{}, 1)
	h.armed.Store(true)
	holder := make(chan struct{})
	go func() {
		defer close(holder)
		if l, err := c.TryAcquire(bg, hold); err == nil {
			_ = l.Release(bg)
		}
	}()
	<-h.held
	var wg sync.WaitGroup
	for _, call := range calls {
		wg.Add(1)
		go func() { defer wg.Done(); call() }()
	}
	waitFor(t, "the calls to queue", func() bool { return dlock.QueuedCalls(c) == len(calls) })
	before := h.pipes.Load()
	close(h.release)
	wg.Wait()
	<-holder
	if h.pipes.Load() == before {
		t.Fatal("the calls did not leave in a pipeline: the test exercised nothing")
	}
}

// A batch whose replies are lost (the scripts ran, the connection broke
// before the replies came back): every grant in it is given back, as a
// single call's would be, so that none blocks its name for the whole TTL.
func TestBatchedLostRepliesAreGivenBack(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	var lose atomic.Bool
	h := &batchHook{pipe: func(ctx context.Context, next redis.ProcessPipelineHook, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if lose.CompareAndSwap(true, false) {
			lost := errors.New("i/o timeout: reply lost after the scripts ran")
			for _, c := range cmds {
				c.SetErr(lost)
			}
			return lost
		}
		return err
	}}
	rdb.AddHook(h)
	c := newLocker(t, rdb, dlock.WithBatchDepth(1))

	const n = 8
	errs := make([]error, n)
	calls := make([]func(), n)
	for i := range calls {
		calls[i] = func() {
			l, err := c.TryAcquire(bg, fmt.Sprint("lost", i), dlock.WithTTL(time.Minute))
			if err == nil {
				err = fmt.Errorf("got the lock (fence %d) from a lost reply", l.Fence())
			}
			errs[i] = err
		}
	}
	lose.Store(true)
	inOneBatch(t, c, h, "hold", calls)
	other := newLocker(t, srv.Client(t))
	for i, err := range errs {
		if errors.Is(err, dlock.ErrNotObtained) || strings.Contains(err.Error(), "got the lock") {
			t.Fatalf("call %d: %v; want the lost reply's error", i, err)
		}
		name := fmt.Sprint("lost", i)
		waitFor(t, name+" given back", func() bool {
			l, err := other.TryAcquire(bg, name, dlock.WithTTL(time.Minute))
			if err != nil {
				return false
			}
			_ = l.Release(bg)
			return true
		})
	}
}

// go-redis sends a pipeline again after a network error: every script in a
// batch can run twice. The acquires must still each report their grant,
// and the releases success, never a false ErrNotHeld.
func TestBatchedPipelineSentTwice(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	h := &batchHook{pipe: func(ctx context.Context, next redis.ProcessPipelineHook, cmds []redis.Cmder) error {
		_ = next(ctx, cmds)
		for _, c := range cmds {
			c.SetErr(nil)
		}
		return next(ctx, cmds)
	}}
	rdb.AddHook(h)
	c := newLocker(t, rdb, dlock.WithBatchDepth(1))

	const n = 8
	locks := make([]dlock.Lock, n)
	errs := make([]error, n)
	calls := make([]func(), n)
	for i := range calls {
		calls[i] = func() { locks[i], errs[i] = c.TryAcquire(bg, fmt.Sprint("twice", i), dlock.WithTTL(time.Minute)) }
	}
	inOneBatch(t, c, h, "hold", calls)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("acquire %d sent twice: %v", i, err)
		}
		got, _ := rdb.HMGet(bg, "dlock:{"+fmt.Sprint("twice", i)+"}", "token", "fence").Result()
		if want := []any{locks[i].Token(), fmt.Sprint(locks[i].Fence())}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("lock %d in Redis is %v, the holder has %v: each call must get its own reply", i, got, want)
		}
	}
	for i := range calls {
		calls[i] = func() { errs[i] = locks[i].Release(bg) }
	}
	inOneBatch(t, c, h, "hold2", calls)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("release %d sent twice: %v", i, err)
		}
		if n, _ := rdb.Exists(bg, "dlock:{"+fmt.Sprint("twice", i)+"}").Result(); n != 0 {
			t.Fatalf("lock %d still in Redis after its release", i)
		}
	}
}
