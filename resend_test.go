package dlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// resender runs every script twice, as go-redis does when a reply is lost
// to a read timeout after the server already ran the command. between, when
// set, runs after the first execution: another client acting in the gap.
type resender struct {
	between atomic.Pointer[func()]
}

func (r *resender) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *resender) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (r *resender) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name != "evalsha" && name != "eval" {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		if f := r.between.Load(); f != nil {
			(*f)()
		}
		return next(ctx, cmd) // the reply of the first run is lost
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

func TestResentAcquireAndRelease(t *testing.T) {
	_, rdb, srv := setup(t)
	hook := &resender{}
	twice := srv.Client(t)
	twice.AddHook(hook)
	a := newLocker(t, twice)
	b := newLocker(t, rdb)

	// A re-sent acquire finds its own token: success, not a stranded lock.
	l, err := a.TryAcquire(bg, "resend")
	if err != nil {
		t.Fatalf("re-sent acquire: %v", err)
	}
	if got := rdb.HGet(bg, "dlock:{resend}", "token").Val(); got != l.Token() {
		t.Fatalf("lock in Redis has token %q, the returned Lock %q", got, l.Token())
	}
	if got, _ := rdb.Get(bg, "dlock:{resend}:fence").Int64(); got != l.Fence() {
		t.Fatalf("fence counter %d, lock's fence %d: the re-send took a second fence", got, l.Fence())
	}

	// A re-sent release, with another holder taking the lock in between:
	// no false failure, and the new holder keeps its lock.
	var other dlock.Lock
	takeOver := func() {
		var err error
		if other, err = b.TryAcquire(bg, "resend"); err != nil {
			t.Errorf("second holder between the two sends: %v", err)
		}
	}
	hook.between.Store(&takeOver)
	if err := l.Release(bg); err != nil {
		t.Fatalf("re-sent release reported %v", err)
	}
	hook.between.Store(nil)
	if other == nil {
		t.FailNow()
	}
	if got := rdb.HGet(bg, "dlock:{resend}", "token").Val(); got != other.Token() {
		t.Fatalf("re-sent release touched the next holder's lock")
	}
	if err := other.Release(bg); err != nil {
		t.Fatal(err)
	}

	// And a plain re-sent release with nobody in between.
	l2, err := a.TryAcquire(bg, "resend")
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(bg); err != nil {
		t.Fatalf("re-sent release reported %v", err)
	}
	if rdb.Exists(bg, "dlock:{resend}").Val() != 0 {
		t.Fatalf("lock still in Redis after release")
	}
}
