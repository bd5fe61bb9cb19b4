package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
)

// heldReply holds the replies of acquisitions (a script call with seven keys)
// while armed, until released.
type heldReply struct {
	armed atomic.Bool
	open  chan struct{}
	once  sync.Once
}

func (h *heldReply) release() { h.once.Do(func() { close(h.open) }) }

func (h *heldReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *heldReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if a := cmd.Args(); h.armed.Load() && len(a) > 2 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[2]) == "7" {
			<-h.open
		}
		return err
	}
}

func (h *heldReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A grant whose reply was lost is given back for as long as it could hold
// the node (its TTL), as the core gives its grants back: an outage of 4 s
// on that node, longer than the 3 s Redlock once stopped trying after, is
// ridden out, and the grant is released once the node answers again,
// instead of blocking the name there for the rest of its TTL. The evidence
// is the token's release record on the node: an expiry writes none.
func TestGiveBackOutlivesLongOutage(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	holder := newRedlock(t, rdbs[:2])
	h, err := holder.TryAcquire(bg, "outage", dlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(bg)

	proxy, err := faultproxy.New(srvs[2].Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	// RESP2 and no identity: a connection dialled while replies are
	// dropped sends its first command at once, with no handshake to wait
	// for.
	c2 := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
		Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c2.Close() })
	// Nodes 0 and 1 answer only once the test has seen node 2 grant and
	// cut it off, so that the verdict's give-up there fails too.
	gate := &heldReply{open: make(chan struct{})}
	clients := []redis.UniversalClient{nil, nil, c2}
	for i := range 2 {
		c := redis.NewClient(&redis.Options{Addr: srvs[i].Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		c.AddHook(gate)
		clients[i] = c
	}
	contender := newRedlock(t, clients)
	t.Cleanup(gate.release) // before the Redlock's Close, which waits for the attempt
	warmUp(t, contender)
	// The warm-up's release of node 2 goes on after Release returned (at a
	// quorum): no call may be out there when its replies start to be
	// dropped, or its connection waits out the release timeout and the
	// attempt below waits for a connection.
	waitFor(t, "node 2's connections to be idle", func() bool {
		st := c2.PoolStats()
		return st.IdleConns > 0 && st.IdleConns == st.TotalConns
	})

	key := "dlock:{outage}"
	proxy.BlackholeDownstream() // node 2 runs the attempt, its reply is lost
	gate.armed.Store(true)
	failed := make(chan error, 1)
	go func() {
		_, err := contender.TryAcquire(bg, "outage", dlock.WithTTL(10*time.Second))
		failed <- err
	}()
	waitFor(t, "node 2 to grant the contender", func() bool { return rdbs[2].Exists(bg, key).Val() == 1 })
	proxy.Reset() // every connection is reset now: each give-back fails, again and again
	gate.release()
	if err := <-failed; err == nil {
		t.Fatal("acquired a lock held on two of three nodes")
	}
	token := rdbs[2].HGet(bg, key, "token").Val()
	outage := time.Now()
	for time.Since(outage) < 4*time.Second {
		if rdbs[2].HGet(bg, key, "token").Val() != token {
			t.Fatal("node 2's grant ended during the outage: the test proves nothing")
		}
		time.Sleep(50 * time.Millisecond)
	}
	proxy.Pass()

	record := key + ":r:" + token
	deadline := time.Now().Add(3 * time.Second)
	for rdbs[2].Exists(bg, record).Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("3 s after a 4 s outage, node 2 still holds the failed attempt's grant (%v left), never given back",
				rdbs[2].PTTL(bg, key).Val())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
