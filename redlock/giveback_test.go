package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
)

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
	// Nodes 0 and 1 answer late, so that the attempt has run on node 2
	// before the verdict gives its token up there.
	clients := []redis.UniversalClient{nil, nil, c2}
	var late []*lateReply
	for i := range 2 {
		l := &lateReply{d: 300 * time.Millisecond}
		c := redis.NewClient(&redis.Options{Addr: srvs[i].Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		c.AddHook(l)
		late, clients[i] = append(late, l), c
	}
	contender := newRedlock(t, clients)
	warmUp(t, contender)

	key := "dlock:{outage}"
	proxy.BlackholeDownstream() // node 2 runs the attempt, its reply is lost
	for _, l := range late {
		l.armed.Store(true)
	}
	failed := make(chan error, 1)
	go func() {
		// The caller's deadline ends the attempt on node 2 at once: its
		// give-back starts then, not at go-redis' read timeout.
		ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
		defer cancel()
		_, err := contender.TryAcquire(ctx, "outage", dlock.WithTTL(10*time.Second))
		failed <- err
	}()
	waitFor(t, "node 2 to grant the contender", func() bool { return rdbs[2].Exists(bg, key).Val() == 1 })
	proxy.Reset() // every connection is reset now: each give-back fails, again and again
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
