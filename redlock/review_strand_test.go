package redlock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// errOnResend is go-redis' retry after a lost reply, made visible: once
// armed, the next acquire script runs on the node (it grants), its reply is
// lost, and the command is sent again to a node that meanwhile turned read-only
// (a replica for a moment), whose real answer is a READONLY error reply. go-redis returns the last try's error,
// so the caller sees a server reply although the first try granted.
type errOnResend struct {
	armed atomic.Bool
	admin *redis.Client
	err   atomic.Value
}

func (h *errOnResend) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *errOnResend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *errOnResend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if !(len(a) == 16 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[2]) == "5" && h.armed.CompareAndSwap(true, false)) {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		h.admin.ReplicaOf(ctx, "127.0.0.1", "1") // demoted, its primary unreachable: it keeps its data
		err := next(ctx, cmd)                    // the re-send
		h.admin.ReplicaOf(ctx, "NO", "ONE")
		if err != nil {
			h.err.Store(err)
		}
		return err
	}
}

// A failed Redlock acquisition must not strand a grant whose reply was lost:
// attempt() gives the token up only when the error is not a server reply
// (isServerReply), but after go-redis re-sent a command the error reply of
// the last try says nothing of the first, which ran. Here nodes 0 and 1 are
// held by another lock, node 2 (restarted empty) grants the failed attempt's
// token: that grant must be given back, not left for its whole TTL.
func TestReviewServerErrorAfterResendStrandsGrant(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	holder := newRedlock(t, rdbs)
	h, err := holder.TryAcquire(bg, "strand", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(bg)

	hook := &errOnResend{admin: srvs[2].Client(t)}
	c2 := redis.NewClient(&redis.Options{Addr: srvs[2].Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c2.Close() })
	c2.AddHook(hook)
	// Nodes 0 and 1 answer late, so that node 2's reply is in before the
	// verdict (a node not heard from by then is given up anyway).
	var late []*lateReply
	clients := []redis.UniversalClient{nil, nil, c2}
	for i := range 2 {
		l := &lateReply{d: 300 * time.Millisecond}
		c := redis.NewClient(&redis.Options{Addr: srvs[i].Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		c.AddHook(l)
		late, clients[i] = append(late, l), c
	}
	contender := newRedlock(t, clients)
	warmUp(t, contender)

	key := "dlock:{strand}"
	rdbs[2].Del(bg, key) // node 2 restarted empty: free there
	hook.armed.Store(true)
	for _, l := range late {
		l.armed.Store(true)
	}
	if _, err := contender.TryAcquire(bg, "strand", dlock.WithTTL(10*time.Second)); err == nil {
		t.Fatal("acquired a lock held on two of three nodes")
	} else {
		t.Logf("acquire: %v", err)
	}
	if hook.armed.Load() {
		t.Fatal("the hook did not fire")
	}
	t.Logf("node 2's answer to the re-send: %v", hook.err.Load())
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) && rdbs[2].Exists(bg, key).Val() == 1 {
		time.Sleep(20 * time.Millisecond)
	}
	if tok := rdbs[2].HGet(bg, key, "token").Val(); tok != "" {
		t.Fatalf("node 2 still holds the failed attempt's grant (token %q, holder %q) for %v more",
			tok, h.Token(), rdbs[2].PTTL(bg, key).Val())
	}
}
