package dlock_test

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// lostPipelinedReply lets the first times matching commands run in Redis,
// in a pipeline (the batcher's) or alone, then loses their replies, as a
// read timeout after the write would.
type lostPipelinedReply struct {
	match func(redis.Cmder) bool
	times int32
	n     atomic.Int32
}

func (h *lostPipelinedReply) lose(cmd redis.Cmder) bool {
	if h.match(cmd) && cmd.Err() == nil && h.n.Add(1) <= h.times {
		cmd.SetErr(&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded})
		return true
	}
	return false
}

func (h *lostPipelinedReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lostPipelinedReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && h.lose(cmd) {
			return cmd.Err()
		}
		return err
	}
}
func (h *lostPipelinedReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if h.lose(c) && err == nil {
				err = c.Err()
			}
		}
		return err
	}
}

// A Release that ran in Redis while the lock was ours, but whose reply was
// lost, is no loss: the lock ends released (its context's cause is
// ErrReleased), no OnLost is reported, and the caller's Release tried again
// reports success, as the record of the first release in Redis says.
func TestReleaseWhoseReplyWasLostIsNoLoss(t *testing.T) {
	for _, retry := range []struct {
		name   string
		before func(t *testing.T, l dlock.Lock) // what happens before the caller tries again
	}{
		// The caller tries again at once.
		{"retried at once", func(*testing.T, dlock.Lock) {}},
		// The caller tries again after the lease would have ended.
		{"retried after the lease", func(t *testing.T, l dlock.Lock) {
			select {
			case <-l.Context().Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the lock's context did not end within 5s of a 1s lease")
			}
		}},
	} {
		t.Run(retry.name, func(t *testing.T) {
			srv := redistest.Start(t)
			loadScripts(t, srv.Client(t)) // EVALSHA from the first call: what the hook matches
			rec := &recorder{}
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
			rdb.AddHook(&lostPipelinedReply{match: func(cmd redis.Cmder) bool { return isScript(cmd, scripts.Release) }, times: 1})
			t.Cleanup(func() { _ = rdb.Close() })
			c := newLocker(t, rdb, dlock.WithObserver(rec))
			acquired := time.Now()
			l, err := c.Acquire(bg, "released", dlock.WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(bg); err == nil {
				t.Fatal("Release reported success though its reply was lost")
			}
			retry.before(t, l)
			if err := l.Release(bg); err != nil {
				t.Fatalf("Release tried again: %v; want success, the first release ran", err)
			}
			select {
			case <-l.Context().Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the lock's context did not end after its release")
			}
			if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrReleased) {
				t.Errorf("the lock's context ended with %v; want ErrReleased", cause)
			}
			// Past the lease deadline, when a loss would be reported: in
			// the good case no event comes at all, so the clock is the
			// condition.
			waitFor(t, "the lease deadline to pass", func() bool { return time.Since(acquired) > 1500*time.Millisecond })
			rec.mu.Lock()
			losses := len(rec.losses)
			rec.mu.Unlock()
			if losses != 0 {
				t.Errorf("%d OnLost for a lock released fine", losses)
			}
			// Nothing was left held: another client takes it at once.
			other := newLocker(t, srv.Client(t))
			if o, err := other.TryAcquire(bg, "released"); err != nil {
				t.Fatalf("after the release: %v", err)
			} else {
				_ = o.Release(bg)
			}
		})
	}
}
