package dlock

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// followDialGate holds the dials that the notifier's follow makes (a
// session's connection to the node a slot moved to) while armed, until
// opened or until the dial's own context ends. Other dials (go-redis'
// command connections, the slot map's reload) pass.
type followDialGate struct {
	mu      sync.Mutex
	armed   bool
	dialing chan struct{} // closed at the first held dial
	open    chan struct{}
	once    sync.Once
}

// dial is the cluster's Dialer (a DialHook on a ClusterClient does not
// reach the node clients' dials).
func (g *followDialGate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	next := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	{
		g.mu.Lock()
		armed := g.armed
		g.mu.Unlock()
		if armed {
			buf := make([]byte, 64<<10)
			if strings.Contains(string(buf[:runtime.Stack(buf, false)]), "(*notifier).follow") {
				g.once.Do(func() { close(g.dialing) })
				select {
				case <-g.open:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
		}
		return next(ctx, network, addr)
	}
}

// A channel subscribed while follow dials a new node's session (follow
// lets go of n.mu for the dial) is served: follow counts the old session's
// channels again after the dial, so it does not end, as serving nothing, a
// session a waiter joined meanwhile. Ended under it, the channel was left
// with a session key no session has: never confirmed (its waiters never
// queue), never audited, never repaired.
func TestSubscribeDuringFollowDialIsServed(t *testing.T) {
	cs := redistest.StartCluster(t, redistest.WithReplicas(0))
	gate := &followDialGate{dialing: make(chan struct{}), open: make(chan struct{})}
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cs.Addrs, ContextTimeoutEnabled: true, ClusterStateReloadInterval: redistest.ClientStateReload,
		Dialer: gate.dial,
	})
	t.Cleanup(func() { _ = cc.Close() })
	opened := false
	openGate := func() {
		if !opened {
			opened = true
			close(gate.open)
		}
	}
	defer openGate()
	c, err := New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	n := c.notify
	ctx := context.Background()

	// Two channels whose slots differ but are served by the same primary.
	var chX, chY, from string
	var slotX int
	owners := map[string]string{} // primary -> a channel there
	slots := map[string]int{}
	for i := 0; chY == "" && i < 1000; i++ {
		ch := node0Handoff(fmt.Sprintf("follow%d", i), c.id)
		slot := int(cc.ClusterKeySlot(ctx, ch).Val())
		owner, err := cs.SlotOwner(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := owners[owner]; ok && slots[prev] != slot {
			chX, chY, from, slotX = prev, ch, owner, slots[prev]
			break
		}
		owners[owner], slots[ch] = ch, slot
	}
	if chY == "" {
		t.Fatal("no two channels on one primary")
	}
	to := ""
	for _, p := range cs.Addrs {
		if p != from {
			to = p
			break
		}
	}

	sx, err := n.subscribe(ctx, chX)
	if err != nil {
		t.Fatal(err)
	}
	defer n.unsubscribe(sx)
	select {
	case <-sx.ready:
	case <-time.After(5 * time.Second):
		t.Fatal("the first channel was not confirmed")
	}

	gate.mu.Lock()
	gate.armed = true
	gate.mu.Unlock()
	migrated := make(chan error, 1)
	go func() {
		_, err := cs.MigrateSlot(ctx, slotX, to, nil)
		migrated <- err
	}()
	select {
	case <-gate.dialing: // follow moves chX to `to`, dialling without mu
	case err := <-migrated:
		if err != nil {
			t.Fatal(err)
		}
		migrated <- nil
		select {
		case <-gate.dialing:
		case <-time.After(10 * time.Second):
			t.Fatal("follow did not dial the slot's new node")
		}
	}

	// Meanwhile, a waiter subscribes a channel of the old node.
	sy, err := n.subscribe(ctx, chY)
	if err != nil {
		t.Fatal(err)
	}
	defer n.unsubscribe(sy)
	openGate()
	if err := <-migrated; err != nil {
		t.Fatal(err)
	}

	select {
	case <-sy.ready:
	case <-time.After(5 * time.Second):
		n.mu.Lock()
		_, hasSession := n.sessions[sy.session]
		session := sy.session
		n.mu.Unlock()
		t.Fatalf("a channel subscribed while follow dialled was never confirmed: it is on session %q (%s), which exists: %v", session, from, hasSession)
	}
}

// node0Handoff is the hand-off channel of name for client id.
func node0Handoff(name, id string) string { return "dlock:{" + name + "}:w:" + id }
