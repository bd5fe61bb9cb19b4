package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// boomHook is a user's go-redis hook with a bug: it panics on a command (or a
// pipeline holding one) whose arguments contain "boom". The caller recovers,
// as net/http does for a handler.
type boomHook struct{ *gate }

func hasBoom(cmd redis.Cmder) bool { return strings.Contains(fmt.Sprint(cmd.Args()...), "boom") }

func (p boomHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	inner := p.gate.ProcessHook(next)
	return func(ctx context.Context, cmd redis.Cmder) error {
		if hasBoom(cmd) {
			panic("hook bug")
		}
		return inner(ctx, cmd)
	}
}

func (p boomHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	inner := p.gate.ProcessPipelineHook(next)
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, hasBoom) {
			panic("hook bug")
		}
		return inner(ctx, cmds)
	}
}

func recovered(f func()) (r any) {
	defer func() { r = recover() }()
	f()
	return nil
}

// A panic under Run (a user's hook, recovered by the caller) must not keep
// the lane's round trip counted as out: after depth such panics every later
// call of the Client would queue behind round trips that never come back.
func TestBatcherPanicDoesNotLeakDepth(t *testing.T) {
	g := newGate()
	rdb := redistestClient(t)
	rdb.AddHook(boomHook{g})
	b := NewBatcher(rdb, 2)
	for i := range 2 {
		if r := recovered(func() { b.Run(context.Background(), acquireCall(fmt.Sprint("boom", i))) }); r == nil {
			t.Fatal("the hook did not panic")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := b.Run(ctx, acquireCall("after")).Err(); err != nil {
		b.one.mu.Lock()
		out := b.one.out
		b.one.mu.Unlock()
		t.Fatalf("a call on a healthy Redis after two recovered panics: %v (lane: %d round trips out of 2, none on the wire)", err, out)
	}
}

// A panic in the pipeline of a batch (its leader recovers) must still
// answer the other calls of the batch: one whose context then ends must
// return, not wait for a reply that will never be handed to it.
func TestBatcherPanicInBatchAnswersOthers(t *testing.T) {
	g := newGate("k1st")
	rdb := redistestClient(t)
	rdb.AddHook(boomHook{g})
	b := holding(NewBatcher(rdb, 1))
	bg := context.Background()

	first := make(chan *redis.Cmd, 1)
	go func() { first <- b.Run(bg, acquireCall("k1st")) }()
	<-g.held
	leader := make(chan any, 1)
	go func() { leader <- recovered(func() { b.Run(bg, acquireCall("boom-leader")) }) }()
	queued(t, &b.one, 1)
	ctx, cancel := context.WithTimeout(bg, 2*time.Second)
	defer cancel()
	other := make(chan error, 1)
	go func() { other <- b.Run(ctx, acquireCall("other")).Err() }()
	queued(t, &b.one, 2)
	g.release("k1st")
	grantOf(t, <-first)
	if r := <-leader; r == nil {
		t.Fatal("the leader's pipeline did not panic")
	}
	select {
	case err := <-other:
		t.Logf("other call: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("a call batched behind a leader that panicked never returned, 3 s after its own deadline")
	}
}

// redistestClient is hooked without a hook: the test adds its own.
func redistestClient(t *testing.T) *redis.Client {
	rdb := redistest.Start(t).Client(t)
	for _, s := range []*redis.Script{scripts.Acquire, scripts.Release} {
		if err := s.Load(context.Background(), rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return rdb
}

// Two lock calls stalled on their connections (half-open TCP after a NAT
// drop, a slow hook, a GC-paused proxy...) hold both of the lane's round
// trips: every other lock call of the Client, on other names, on an idle
// Redis with free pooled connections, then waits for them, up to go-redis'
// ReadTimeout times its retries. Without the Batcher (depth 0, the control)
// the unrelated call is answered at once.
func TestBatcherStalledCallsHoldUpOthers(t *testing.T) {
	for _, depth := range []int{0, stalledDepth} {
		t.Run(fmt.Sprint("depth", depth), func(t *testing.T) {
			g := newGate("stall1", "stall2")
			rdb := hooked(t, g)
			b := NewBatcher(rdb, depth)
			bg := context.Background()
			stalled := make(chan *redis.Cmd, 2)
			for _, name := range []string{"stall1", "stall2"} {
				go func() { stalled <- b.Run(bg, acquireCall(name)) }()
				<-g.held
			}
			ctx, cancel := context.WithTimeout(bg, time.Second)
			defer cancel()
			err := b.Run(ctx, acquireCall("unrelated")).Err()
			g.release("stall1")
			g.release("stall2")
			<-stalled
			<-stalled
			if err != nil {
				t.Errorf("depth %d: a lock call on another name, Redis idle: %v (held up by two stalled calls)", depth, err)
			}
		})
	}
}

// stalledDepth is a lane the two stalled calls fill.
const stalledDepth = 2

// SCRIPT FLUSH (or a restart) while a batch forms: every call of the
// batch is answered NOSCRIPT, sent again with its source, and gets its own
// grant; none runs twice.
func TestBatcherNoScriptInBatch(t *testing.T) {
	g := newGate("k1st")
	rdb := hooked(t, g)
	b := holding(NewBatcher(rdb, 1))
	bg := context.Background()
	first := make(chan *redis.Cmd, 1)
	go func() { first <- b.Run(bg, acquireCall("k1st")) }()
	<-g.held
	const n = 4
	cmds := make([]chan *redis.Cmd, n)
	for i := range n {
		cmds[i] = make(chan *redis.Cmd, 1)
		go func() { cmds[i] <- b.Run(bg, acquireCall(fmt.Sprint("flushed", i))) }()
		queued(t, &b.one, i+1)
	}
	if err := rdb.ScriptFlush(bg).Err(); err != nil {
		t.Fatal(err)
	}
	g.release("k1st")
	grantOf(t, <-first)
	fences := map[int64]bool{}
	for i := range n {
		gr := grantOf(t, <-cmds[i])
		if !gr.OK || fences[gr.Fence] {
			t.Fatalf("call %d after SCRIPT FLUSH: %+v", i, gr)
		}
		fences[gr.Fence] = true
	}
}

// In a Cluster, calls stalled on one node do not hold up another node's.
func TestBatcherClusterStalledNodeIsolated(t *testing.T) {
	cs := redistest.StartCluster(t, redistest.WithReplicas(0))
	rdb := cs.ClusterClient(t)
	bg := context.Background()
	nodeOf := func(name string) string {
		n, err := rdb.MasterForKey(bg, KeysOf("batch:", name).Lock)
		if err != nil {
			t.Fatal(err)
		}
		return n.Options().Addr
	}
	// Two names on one node (of three, two of any four names share one),
	// and one on another.
	byNode := map[string][]string{}
	var stall []string
	for i := 0; len(stall) == 0; i++ {
		name := fmt.Sprint("stall", i, "x")
		node := nodeOf(name)
		byNode[node] = append(byNode[node], name)
		if len(byNode[node]) == 2 {
			stall = byNode[node]
		}
	}
	stallNode := nodeOf(stall[0])
	other := ""
	for i := 0; other == ""; i++ {
		if name := fmt.Sprint("free", i); nodeOf(name) != stallNode {
			other = name
		}
	}
	g := newGate(stall...)
	rdb.AddHook(g)
	b := NewBatcher(rdb, 2)
	stalled := make(chan *redis.Cmd, 2)
	for _, name := range stall {
		go func() { stalled <- b.Run(bg, acquireCall(name)) }()
		<-g.held
	}
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	err := b.Run(ctx, acquireCall(other)).Err()
	for _, name := range stall {
		g.release(name)
	}
	<-stalled
	<-stalled
	if err != nil {
		t.Fatalf("a call to another node while two stall on %s: %v", stallNode, err)
	}
}

// jitter delays every command or pipeline of lock calls by up to 2 ms, so
// that batches form and break up at random.
type jitter struct {
	n   atomic.Int64
	mu  sync.Mutex // the connections' set-up commands note under one key at once
	log sync.Map   // name -> []string, what happened to its command
}

func (j *jitter) note(cmd redis.Cmder, what string) {
	args := cmd.Args()
	if len(args) < 4 {
		return
	}
	k, _ := args[3].(string)
	v, _ := j.log.LoadOrStore(k, new([]string))
	j.mu.Lock()
	*(v.(*[]string)) = append(*(v.(*[]string)), what)
	j.mu.Unlock()
}

func (j *jitter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (j *jitter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		time.Sleep(time.Duration(j.n.Add(7)%20) * 100 * time.Microsecond)
		pre := ctx.Err()
		err := next(ctx, cmd)
		j.note(cmd, fmt.Sprintf("single: ctx before send %v, err %v", pre, err))
		return err
	}
}
func (j *jitter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		time.Sleep(time.Duration(j.n.Add(7)%20) * 100 * time.Microsecond)
		pre := ctx.Err()
		err := next(ctx, cmds)
		for i, c := range cmds {
			j.note(c, fmt.Sprintf("pipeline of %d, #%d: ctx before send %v, err %v, cmd err %v", len(cmds), i, pre, err, c.Err()))
		}
		return err
	}
}

// Many callers, contexts ending at random: every reply is the caller's own
// (the fence it reports is the one its lock holds in Redis, under its
// token), and every call answered with an error that go-redis was not
// handed with a live context was never sent (no lock of its name exists). A
// reply handed to the wrong caller, or a cancelled call sent anyway, fails it.
func TestBatcherRepliesAreOwnUnderCancellation(t *testing.T) {
	rdb := redistestClient(t)
	jit := &jitter{}
	rdb.AddHook(jit)
	bg := context.Background()
	for _, depth := range []int{1, 2} {
		b := NewBatcher(rdb, depth)
		const n = 300
		type result struct {
			name string
			g    Grant
			err  error
		}
		res := make([]result, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("own-d%d-%d", depth, i)
				ctx, cancel := context.WithTimeout(bg, time.Duration(i%13)*3*time.Millisecond)
				defer cancel()
				r := result{name: name}
				cmd := b.Run(ctx, acquireCall(name))
				if r.err = cmd.Err(); r.err == nil {
					res, err := cmd.Slice()
					if err == nil {
						r.g, r.err = ParseGrant(res)
					} else {
						r.err = err
					}
				}
				res[i] = r
			}()
		}
		wg.Wait()
		var ok, failed int
		for _, r := range res {
			k := KeysOf("batch:", r.name)
			h, err := rdb.HMGet(bg, k.Lock, "token", "fence").Result()
			if err != nil {
				t.Fatal(err)
			}
			if r.err != nil {
				failed++
				// go-redis itself may end a read at the context's deadline
				// after the command went out (an unknown outcome, as on
				// main): only a call never handed over live must be absent.
				v, _ := jit.log.Load(k.Lock)
				if h[0] != nil && (v == nil || !strings.Contains(fmt.Sprint(*(v.(*[]string))), "ctx before send <nil>")) {
					t.Errorf("depth %d: %s answered %v, yet its lock is in Redis (sent after all); its sends: %v", depth, r.name, r.err, v)
				}
				continue
			}
			ok++
			if !r.g.OK || h[0] != "tok-"+r.name || h[1] != fmt.Sprint(r.g.Fence) {
				t.Errorf("depth %d: %s got %+v; Redis holds token %v fence %v: another call's reply", depth, r.name, r.g, h[0], h[1])
			}
		}
		if q := b.Queued(); q != 0 {
			t.Errorf("depth %d: %d calls left queued", depth, q)
		}
		t.Logf("depth %d: %d granted, %d ended by their context", depth, ok, failed)
		if ok == 0 || failed == 0 {
			t.Errorf("depth %d: %d granted, %d cancelled: the mix this test needs did not happen", depth, ok, failed)
		}
	}
}

// A transient error reply (READONLY while a primary is briefly a replica,
// as in a failover; LOADING, TRYAGAIN, CLUSTERDOWN, MASTERDOWN alike) is
// retried by go-redis for a command sent alone, with backoff. A call in a
// batch that is not the batch's first gets no retry: go-redis retries a
// pipeline only on its first command's error. So the same acquire that a
// lone call gets through the blip fails once batched.
func TestBatcherTransientErrorRetried(t *testing.T) {
	s1, s2 := redistest.Start(t), redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: s1.Addr, MaxRetries: 10,
		MinRetryBackoff: 100 * time.Millisecond, MaxRetryBackoff: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	admin := s1.Client(t)
	bg := context.Background()
	host, port, _ := strings.Cut(s2.Addr, ":")
	readOnlyFor := func(d time.Duration) {
		t.Helper()
		if err := admin.ReplicaOf(bg, host, port).Err(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for !strings.HasPrefix(fmt.Sprint(admin.Set(bg, "probe", 1, 0).Err()), "READONLY") {
			if time.Now().After(deadline) {
				t.Fatal("s1 never became read-only")
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.AfterFunc(d, func() { _ = admin.ReplicaOf(bg, "NO", "ONE").Err() })
	}
	ttl := func(name string) Call { return PTTL(KeysOf("batch:", name), "tok") }

	for _, depth := range []int{0, 1} {
		t.Run(fmt.Sprint("depth", depth), func(t *testing.T) {
			g := newGate("k1st")
			rdb.AddHook(g)
			b := holding(NewBatcher(rdb, depth))
			readOnlyFor(300 * time.Millisecond)
			if depth == 0 {
				if err := b.Run(bg, acquireCall(fmt.Sprint("alone", depth))).Err(); err != nil {
					t.Errorf("a lone acquire through a 300 ms READONLY blip: %v", err)
				}
				close(g.holds["k1st"])
				return
			}
			first := make(chan *redis.Cmd, 1)
			go func() { first <- b.Run(bg, ttl("k1st")) }()
			<-g.held
			lead := make(chan *redis.Cmd, 1)
			go func() { lead <- b.Run(bg, ttl("lead")) }()
			queued(t, &b.one, 1)
			follow := make(chan *redis.Cmd, 1)
			go func() { follow <- b.Run(bg, acquireCall("follow")) }()
			queued(t, &b.one, 2)
			g.release("k1st")
			<-first
			<-lead
			if err := (<-follow).Err(); err != nil {
				t.Errorf("a batched acquire through the same 300 ms READONLY blip: %v", err)
			}
		})
	}
}
