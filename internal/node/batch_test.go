package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gate is a go-redis hook that counts what is sent alone and in pipelines,
// and holds a command (or pipeline) whose arguments contain one of its
// holds until that hold's channel is closed.
type gate struct {
	holds   map[string]chan struct{}
	held    chan string // the hold, each time a command is held
	singles atomic.Int64
	pipes   atomic.Int64
	sent    sync.Map // arguments as text -> true, for every command sent
}

func newGate(holds ...string) *gate {
	g := &gate{holds: map[string]chan struct{}{}, held: make(chan string, 100)}
	for _, h := range holds {
		g.holds[h] = make(chan struct{})
	}
	return g
}

// note records cmd and returns the hold it matches, if any.
func (g *gate) note(cmd redis.Cmder) string {
	s := fmt.Sprint(cmd.Args()...)
	g.sent.Store(s, true)
	for h := range g.holds {
		if strings.Contains(s, h) {
			return h
		}
	}
	return ""
}

func (g *gate) wait(h string) {
	if h != "" {
		g.held <- h
		<-g.holds[h]
	}
}

func (g *gate) release(h string) { close(g.holds[h]) }

func isScript(cmd redis.Cmder) bool { return cmd.Name() == "evalsha" || cmd.Name() == "eval" }

// hooked returns a client on a fresh server with the scripts loaded and g
// added: what g counts and holds is the calls' own traffic.
func hooked(t *testing.T, g *gate) *redis.Client {
	rdb := redistest.Start(t).Client(t)
	for _, s := range []*redis.Script{scripts.Acquire, scripts.Release} {
		if err := s.Load(context.Background(), rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rdb.AddHook(g)
	return rdb
}

func (g *gate) wasSent(part string) bool {
	found := false
	g.sent.Range(func(k, _ any) bool {
		found = strings.Contains(k.(string), part)
		return !found
	})
	return found
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			g.singles.Add(1)
		}
		g.wait(g.note(cmd))
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, isScript) {
			g.pipes.Add(1) // not the connection's own set-up
		}
		hold := ""
		for _, c := range cmds {
			if h := g.note(c); h != "" {
				hold = h
			}
		}
		g.wait(hold)
		return next(ctx, cmds)
	}
}

var testArgs = AcquireArgs{TTL: 5 * time.Second, Alive: time.Second, QueueExpiry: time.Second, FenceLifetime: time.Hour}

func acquireCall(name string) Call { return Acquire(KeysOf("batch:", name), "tok-"+name, testArgs) }

// queued waits until n calls wait in ln.
func queued(t *testing.T, ln *lane, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln.mu.Lock()
		got := len(ln.waiting)
		ln.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func grantOf(t *testing.T, cmd *redis.Cmd) Grant {
	t.Helper()
	res, err := cmd.Slice()
	if err != nil {
		t.Fatalf("reply: %v", err)
	}
	g, err := ParseGrant(res)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// holding is b for a test that holds a round trip for as long as its calls
// take to queue: on a loaded machine that can be longer than stallBound,
// after which they would go alone and form no batch.
func holding(b *Batcher) *Batcher {
	b.SetStallBound(time.Hour)
	return b
}

// busyLane returns a depth-1 Batcher on a fresh server whose one round trip
// is out, held by g ("k1st" and holds), and the channel its reply comes on
// once g releases "k1st".
func busyLane(t *testing.T, holds ...string) (*Batcher, *gate, *redis.Client, <-chan *redis.Cmd) {
	g := newGate(append([]string{"k1st"}, holds...)...)
	rdb := hooked(t, g)
	b := holding(NewBatcher(rdb, 1))
	first := make(chan *redis.Cmd, 1)
	go func() { first <- b.Run(context.Background(), acquireCall("k1st")) }()
	<-g.held
	return b, g, rdb, first
}

// A lone caller pays one plain round trip: no pipeline, no wait.
func TestBatcherSendsAloneWhenIdle(t *testing.T) {
	g := newGate()
	rdb := hooked(t, g)
	b := NewBatcher(rdb, 1)
	for i := range 20 {
		if gr := grantOf(t, b.Run(context.Background(), acquireCall(fmt.Sprint("alone", i)))); !gr.OK {
			t.Fatalf("call %d not granted: %+v", i, gr)
		}
	}
	if p, s := g.pipes.Load(), g.singles.Load(); p != 0 || s != 20 {
		t.Fatalf("%d pipelines and %d single commands for 20 calls one after another; want 0 and 20", p, s)
	}
}

// Calls made while the lane's round trips are out leave together, in one
// pipeline, as soon as one comes back; each gets its own reply.
func TestBatcherBatchesWhileBusy(t *testing.T) {
	b, g, rdb, first := busyLane(t)
	ctx := context.Background()
	const n = 10
	cmds := make([]*redis.Cmd, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmds[i] = b.Run(ctx, acquireCall(fmt.Sprint("next", i)))
		}()
		queued(t, &b.one, i+1) // in this order, so the first queued leads
	}
	g.release("k1st")
	wg.Wait()
	if gr := grantOf(t, <-first); !gr.OK {
		t.Fatalf("first call not granted: %+v", gr)
	}
	fences := map[int64]bool{}
	for i, cmd := range cmds {
		gr := grantOf(t, cmd)
		if !gr.OK || fences[gr.Fence] {
			t.Fatalf("call %d: %+v (fences so far %v): each call must get its own grant", i, gr, fences)
		}
		fences[gr.Fence] = true
		if n, err := rdb.Exists(ctx, KeysOf("batch:", fmt.Sprint("next", i)).Lock).Result(); err != nil || n != 1 {
			t.Fatalf("lock of call %d not in Redis: %d, %v", i, n, err)
		}
	}
	if p := g.pipes.Load(); p != 1 {
		t.Fatalf("%d pipelines for %d calls queued behind one round trip; want 1", p, n)
	}
}

// A call still queued when its context ends is answered with the
// context's error and never sent: a caller that gave up must not find its
// acquire granted later.
func TestBatcherQueuedCallCancelledIsNotSent(t *testing.T) {
	b, g, rdb, first := busyLane(t)
	bg := context.Background()
	ctx, cancel := context.WithCancelCause(bg)
	gone := errors.New("caller left")
	done := make(chan *redis.Cmd, 1)
	go func() { done <- b.Run(ctx, acquireCall("cancelled")) }()
	queued(t, &b.one, 1)
	cancel(gone)
	select {
	case cmd := <-done:
		if !errors.Is(cmd.Err(), gone) {
			t.Fatalf("cancelled call: %v; want the context's cause", cmd.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a queued call whose context ended waited for the round trip ahead of it")
	}
	queued(t, &b.one, 0)
	g.release("k1st")
	grantOf(t, <-first)
	// The lane is free again: a new call goes alone, and the cancelled one
	// never went.
	grantOf(t, b.Run(bg, acquireCall("after")))
	if g.wasSent("cancelled") {
		t.Fatal("the cancelled call was sent")
	}
	if n, _ := rdb.Exists(bg, KeysOf("batch:", "cancelled").Lock).Result(); n != 0 {
		t.Fatal("the cancelled call's lock is in Redis")
	}
}

// The pipeline of a batch does not end with the context of the call that
// leads it: the other calls' replies are theirs, and losing them would
// strand what their scripts wrote.
func TestBatcherLeaderCancelledKeepsOthersReplies(t *testing.T) {
	b, g, _, first := busyLane(t, "k2nd0")
	bg := context.Background()
	lctx, cancel := context.WithCancel(bg)
	defer cancel()
	lead := make(chan *redis.Cmd, 1)
	go func() { lead <- b.Run(lctx, acquireCall("lead")) }()
	queued(t, &b.one, 1)
	others := make([]chan *redis.Cmd, 3)
	for i := range others {
		others[i] = make(chan *redis.Cmd, 1)
		go func() { others[i] <- b.Run(bg, acquireCall(fmt.Sprint("k2nd", i))) }()
		queued(t, &b.one, i+2)
	}
	g.release("k1st")
	grantOf(t, <-first)
	if h := <-g.held; h != "k2nd0" {
		t.Fatalf("held %q, want the batch", h)
	}
	cancel() // the leader's caller leaves while its batch is on the way
	g.release("k2nd0")
	// The leader's reply may be its cancellation or its grant; the others'
	// must be grants.
	<-lead
	for i, ch := range others {
		if gr := grantOf(t, <-ch); !gr.OK {
			t.Fatalf("call %d not granted: %+v", i, gr)
		}
	}
}

// In a Cluster, calls are grouped by the node that serves their key: a
// batch never waits on another node's round trip, and each call still
// reaches its own node (go-redis' cluster pipeline routes it).
func TestBatcherClusterLanes(t *testing.T) {
	cs := redistest.StartCluster(t, redistest.WithReplicas(0))
	rdb := cs.ClusterClient(t)
	b := NewBatcher(rdb, 1)
	ctx := context.Background()
	const n = 64
	cmds := make([]*redis.Cmd, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmds[i] = b.Run(ctx, acquireCall(fmt.Sprint("cl", i)))
		}()
	}
	wg.Wait()
	for i, cmd := range cmds {
		if gr := grantOf(t, cmd); !gr.OK {
			t.Fatalf("call %d not granted: %+v", i, gr)
		}
		if n, err := rdb.Exists(ctx, KeysOf("batch:", fmt.Sprint("cl", i)).Lock).Result(); err != nil || n != 1 {
			t.Fatalf("lock of call %d not in Redis: %d, %v", i, n, err)
		}
	}
	b.mu.Lock()
	lanes := len(b.lanes)
	b.mu.Unlock()
	if lanes != len(cs.Addrs) {
		t.Fatalf("%d lanes for %d primaries", lanes, len(cs.Addrs))
	}
	if q := b.Queued(); q != 0 {
		t.Fatalf("%d calls left queued", q)
	}
}

// panicky panics in the first pipeline (or single command, with alone)
// that carries a script: a user's hook gone wrong.
type panicky struct{ alone, armed atomic.Bool }

func (h *panicky) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *panicky) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.alone.Load() && isScript(cmd) && h.armed.CompareAndSwap(true, false) {
			panic("hook")
		}
		return next(ctx, cmd)
	}
}
func (h *panicky) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.alone.Load() && slices.ContainsFunc(cmds, isScript) && h.armed.CompareAndSwap(true, false) {
			panic("hook")
		}
		return next(ctx, cmds)
	}
}

// A panic while sending (a user's hook) goes on in the caller that sent,
// and leaves the lane working: the other calls of its batch get an error,
// and later calls go through. A round trip left counted would stall every
// later call of the node for good.
func TestBatcherSurvivesPanic(t *testing.T) {
	for _, alone := range []bool{true, false} {
		t.Run(fmt.Sprintf("alone=%v", alone), func(t *testing.T) {
			g := newGate("k1st")
			rdb := hooked(t, g)
			h := &panicky{}
			h.alone.Store(alone)
			rdb.AddHook(h)
			b := holding(NewBatcher(rdb, 1))
			ctx := context.Background()
			call := func(name string) (cmd *redis.Cmd, panicked bool) {
				defer func() { panicked = recover() != nil }()
				return b.Run(ctx, acquireCall(name)), false
			}
			if alone {
				h.armed.Store(true)
				if _, p := call("solo"); !p {
					t.Fatal("the hook's panic did not reach the caller")
				}
			} else {
				first := make(chan *redis.Cmd, 1)
				go func() { first <- b.Run(ctx, acquireCall("k1st")) }()
				<-g.held
				h.armed.Store(true)
				panics := make(chan bool, 3)
				errs := make(chan error, 3)
				for i := range 3 {
					go func() {
						cmd, p := call(fmt.Sprint("k2nd", i))
						panics <- p
						if !p {
							errs <- cmd.Err()
						}
					}()
					queued(t, &b.one, i+1)
				}
				g.release("k1st")
				grantOf(t, <-first)
				n := 0
				for range 3 {
					if <-panics {
						n++
					}
				}
				if n != 1 {
					t.Fatalf("%d callers panicked; want the batch's leader alone", n)
				}
				for range 2 {
					if err := <-errs; !errors.Is(err, errLeaderPanicked) {
						t.Fatalf("a call of the panicked batch: %v", err)
					}
				}
			}
			done := make(chan *redis.Cmd, 1)
			go func() { done <- b.Run(ctx, acquireCall("after")) }()
			select {
			case cmd := <-done:
				grantOf(t, cmd)
			case <-time.After(5 * time.Second):
				t.Fatal("the lane stalled after a panic")
			}
		})
	}
}
