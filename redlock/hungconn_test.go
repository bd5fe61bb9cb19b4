package redlock_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
)

// hangFirstRefresh makes the first refresh of key on a node hang until its
// context ends, as a connection that went quiet (a half-open TCP
// connection) does with ContextTimeoutEnabled; the node itself, and any
// other connection to it, stay healthy. Alone or in a pipeline.
type hangFirstRefresh struct {
	key  string
	once sync.Once
	hung chan struct{}
}

func (h *hangFirstRefresh) isIt(cmd redis.Cmder) bool {
	a := cmd.Args()
	return len(a) > 3 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[2]) == "1" && fmt.Sprint(a[3]) == h.key
}

func (h *hangFirstRefresh) take() bool {
	first := false
	h.once.Do(func() { first = true; close(h.hung) })
	return first
}

func (h *hangFirstRefresh) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *hangFirstRefresh) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.isIt(cmd) && h.take() {
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *hangFirstRefresh) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if h.isIt(cmd) && h.take() {
				<-ctx.Done()
				for _, c := range cmds {
					c.SetErr(ctx.Err())
				}
				return ctx.Err()
			}
		}
		return next(ctx, cmds)
	}
}

// A renewal pipeline stuck on one connection to a healthy node holds up
// only the renewals it carries: the node's lane sends later renewals on
// other connections (up to its depth), as per-lock renewals did. Two locks
// held on the bare quorum {0, 1} (node 2 is down): the first one's renewal
// to node 1 hangs on its connection, and the second lock, whose own calls
// meet nothing wrong, is kept. With one pipeline out per lane it was lost
// with the first.
func TestHungConnectionCostsOnlyItsOwnLock(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	srvs[2].Kill()
	hang := &hangFirstRefresh{key: "dlock:{hungA}", hung: make(chan struct{})}
	rdbs[1].AddHook(hang)
	r, err := redlock.New(rdbs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(bg) })

	const ttl = 1500 * time.Millisecond // renewed every 500 ms, valid 1.35 s
	la, err := r.TryAcquire(bg, "hungA", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // B's renewals fall between A's
	lb, err := r.TryAcquire(bg, "hungB", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-hang.hung: // A's renewal to node 1 hangs on its connection
	case <-time.After(2 * ttl):
		t.Fatal("A's renewal did not reach node 1")
	}
	hungAt := time.Now()
	select {
	case <-lb.Context().Done():
		t.Fatalf("lock B, on healthy connections, was lost %v after A's call to node 1 hung: %v",
			time.Since(hungAt).Round(time.Millisecond), context.Cause(lb.Context()))
	case <-time.After(3 * ttl):
	}
	t.Logf("A: %v", context.Cause(la.Context()))
}
