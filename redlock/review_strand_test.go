package redlock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A failed Redlock acquisition must not strand a grant whose reply was lost:
// after go-redis re-sent a command, the error reply of the last try says
// nothing of the first, which ran (attempt once gave the token up only after
// errors that were not server replies). Here nodes 0 and 1 are
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

	hook := &redistest.ReadOnlyOnResend{Admin: srvs[2].Client(t)}
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
	hook.Armed.Store(true)
	for _, l := range late {
		l.armed.Store(true)
	}
	if _, err := contender.TryAcquire(bg, "strand", dlock.WithTTL(10*time.Second)); err == nil {
		t.Fatal("acquired a lock held on two of three nodes")
	} else {
		t.Logf("acquire: %v", err)
	}
	if hook.Armed.Load() {
		t.Fatal("the hook did not fire")
	}
	t.Logf("node 2's answer to the re-send: %v", hook.Err.Load())
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) && rdbs[2].Exists(bg, key).Val() == 1 {
		time.Sleep(20 * time.Millisecond)
	}
	if tok := rdbs[2].HGet(bg, key, "token").Val(); tok != "" {
		t.Fatalf("node 2 still holds the failed attempt's grant (token %q, holder %q) for %v more",
			tok, h.Token(), rdbs[2].PTTL(bg, key).Val())
	}
}
