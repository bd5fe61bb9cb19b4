package dlock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// readOnlyOnResend is go-redis' retry after a lost reply, made visible:
// once armed, the next acquire script runs on the server (it grants), its
// reply is lost, and the command is sent again to a server that meanwhile
// turned read-only (a replica for a moment, its primary unreachable, so it
// keeps its data): the real answer is a READONLY error reply, which go-redis
// returns (and retries on) although the first try granted.
type readOnlyOnResend struct {
	armed atomic.Bool
	admin *redis.Client
	err   atomic.Value
}

func (h *readOnlyOnResend) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *readOnlyOnResend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *readOnlyOnResend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if !(len(a) == 16 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[2]) == "5" && h.armed.CompareAndSwap(true, false)) {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		h.admin.ReplicaOf(ctx, "127.0.0.1", "1")
		err := next(ctx, cmd) // the re-send
		h.admin.ReplicaOf(ctx, "NO", "ONE")
		if err != nil {
			h.err.Store(err)
		}
		return err
	}
}

// TryAcquire gives a token up after an error only when the error is not a
// server reply (acquire.go: queue || !isServerReply(err)); but the error
// reply of a re-sent command says nothing of the first send, which granted:
// the lock is then held by nobody for its whole TTL.
func TestReviewServerErrorAfterResendStrandsGrant(t *testing.T) {
	_, rdb, srv := setup(t)
	hook := &readOnlyOnResend{admin: srv.Client(t)}
	hooked := srv.Client(t)
	hooked.AddHook(hook)
	c := newLocker(t, hooked)
	if l, err := c.TryAcquire(bg, "warm"); err == nil { // loads the script: one call each from now on
		_ = l.Release(bg)
	}
	hook.armed.Store(true)
	if _, err := c.TryAcquire(bg, "strand", dlock.WithTTL(10*time.Second)); err == nil {
		t.Fatal("acquired though the reply was an error")
	} else {
		t.Logf("acquire: %v; the re-send's answer: %v", err, hook.err.Load())
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
