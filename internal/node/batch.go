package node

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batcher sends calls so that calls made while others to the same node are
// on the way leave together, in one pipeline, instead of one round trip
// each. It is the batching rueidis gets from writing whatever is queued on
// its connection, without a timer: a call made while fewer than depth round
// trips are out to its node leaves at once and alone, so nothing ever waits
// for a batch to fill and a lone caller pays what a plain command does.
// Calls made while depth round trips are out queue; when one of those comes
// back, one queued caller (the one that may wait longest) takes every queued
// call (up to maxBatch) and sends them as one pipeline, on its own
// goroutine: no goroutine of the Batcher's own runs. A busy Redis spends
// most of its time on a system call per request; a pipeline of n calls
// costs it about one. A call queued for stallBound goes alone, so that
// round trips stalled on quiet connections hold up nobody else.
//
// Every call keeps what sending it alone gives it: the NOSCRIPT fallback
// (Pipeline), the routing and redirects of a Cluster (go-redis' cluster
// pipeline; the lanes only group calls by the node that serves their key),
// and go-redis' re-sending after a network error, which every dlock script
// is written to survive, and after the replies it retries a command for
// (READONLY, LOADING, TRYAGAIN…: see finish). A call still queued when its context ends is taken
// out and answered with the context's error, never sent. One already on its
// way in a pipeline stops waiting at its context's end too, with its outcome
// unknown, as a command's read that ends at its deadline: the caller treats
// it as a lost reply. The call that may wait longest leads the pipeline and
// sends it, so no caller waits past its own deadline for another's.
type Batcher struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // nil unless rdb is a Cluster client
	depth   int
	stall   atomic.Int64 // ns: stallBound, or what SetStallBound set

	mu    sync.Mutex
	lanes map[string]*lane // by node address, in a Cluster
	one   lane             // the only lane otherwise
}

// maxBatch bounds the calls of one pipeline, so that the first of a long
// queue does not wait for the replies of hundreds behind it.
const maxBatch = 128

// lane is the calls to one node: how many round trips are out, and the
// calls waiting for one to come back.
type lane struct {
	mu      sync.Mutex
	out     int
	waiting []*pending
}

// pending is a queued call. turn receives nil when the call's reply is in
// cmd, or the batch to send when the call leads it.
type pending struct {
	ctx  context.Context
	call Call
	cmd  *redis.Cmd
	turn chan []*pending
	// leads is set, under the lane's mu, when the call is taken to lead
	// its batch: it must then send it, whatever its context.
	leads bool
	stall *time.Timer // stallBound; kept, stopped, with p in the pool
}

var pendings = sync.Pool{New: func() any { return &pending{turn: make(chan []*pending, 1)} }}

// NewBatcher returns a Batcher that keeps at most depth round trips out to
// each node before calls wait and leave together. depth < 1 turns batching
// off: every call is sent alone, at once.
func NewBatcher(rdb redis.UniversalClient, depth int) *Batcher {
	b := &Batcher{rdb: rdb, depth: depth}
	b.stall.Store(int64(stallBound))
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		b.cluster, b.lanes = cc, map[string]*lane{}
	}
	return b
}

// Run sends call and returns its reply, as call.Run does.
func (b *Batcher) Run(ctx context.Context, call Call) *redis.Cmd {
	if b.depth < 1 {
		return call.Run(ctx, b.rdb)
	}
	ln := b.laneOf(ctx, call)
	if ln == nil {
		return call.Run(ctx, b.rdb)
	}
	ln.mu.Lock()
	if ln.out < b.depth {
		ln.out++
		ln.mu.Unlock()
		return b.alone(ctx, ln, call)
	}
	p := pendings.Get().(*pending)
	p.ctx, p.call = ctx, call
	ln.waiting = append(ln.waiting, p)
	ln.mu.Unlock()
	if p.stall == nil {
		p.stall = time.NewTimer(time.Duration(b.stall.Load()))
	} else {
		p.stall.Reset(time.Duration(b.stall.Load()))
	}
	select {
	case batch := <-p.turn:
		p.stall.Stop()
		return b.finish(ln, p, batch)
	case <-ctx.Done():
		p.stall.Stop()
		return b.abandon(ctx, ln, p)
	case <-p.stall.C:
	}
	// The round trips out have been out for b.stall (a connection gone
	// quiet, a slow hook): this call goes alone, on a connection of its
	// own, rather than wait behind them for go-redis' read timeout.
	ln.mu.Lock()
	if ln.unqueue(p) {
		ln.out++ // one more than depth, given back as any other
		ln.mu.Unlock()
		p.release()
		return b.alone(ctx, ln, call)
	}
	ln.mu.Unlock()
	select { // taken into a batch meanwhile
	case batch := <-p.turn:
		return b.finish(ln, p, batch)
	case <-ctx.Done():
		return b.abandon(ctx, ln, p)
	}
}

// SetStallBound sets how long a queued call waits before it goes alone
// (stallBound by default). For tests that hold a round trip for as long as
// it takes their calls to queue.
func (b *Batcher) SetStallBound(d time.Duration) { b.stall.Store(int64(d)) }

// alone sends call by itself, as a round trip of ln the caller has counted.
func (b *Batcher) alone(ctx context.Context, ln *lane, call Call) *redis.Cmd {
	// Deferred: a panic in go-redis (a user's hook) must not keep the round
	// trip counted, or the lane would stall for good.
	defer b.next(ln)
	return call.Run(ctx, b.rdb)
}

// unqueue takes p out of the calls waiting, if it is still there: then it
// was never sent. The caller holds ln.mu.
func (ln *lane) unqueue(p *pending) bool {
	i := slices.Index(ln.waiting, p)
	if i >= 0 {
		ln.waiting = slices.Delete(ln.waiting, i, i+1)
	}
	return i >= 0
}

// stallBound is how long a queued call waits for one of the round trips
// out to come back before it goes alone. Far above a loaded batch's round
// trip (about 1-3 ms at 64 goroutines on 2 cores), far below go-redis'
// read timeout (3 s), which is how long a stalled connection holds them.
const stallBound = 20 * time.Millisecond

// abandon answers p, queued or taken into a batch, whose context ended.
func (b *Batcher) abandon(ctx context.Context, ln *lane, p *pending) *redis.Cmd {
	ln.mu.Lock()
	if ln.unqueue(p) {
		// Still queued: nothing was sent, so nothing can have run.
		ln.mu.Unlock()
		p.release()
		return ended(ctx)
	}
	leads := p.leads
	ln.mu.Unlock()
	if leads {
		// Its batch is being handed to it: it sends it, on the latest
		// deadline of the batch, which is its own (see next).
		return b.finish(ln, p, <-p.turn)
	}
	// On its way in another caller's pipeline: the outcome is unknown, as
	// for a command whose read ended at its deadline. p is left to the
	// leader, which still tells it, and never goes back to the pool.
	return ended(ctx)
}

// finish sends batch when it is p's to lead (not nil), and returns p's
// reply.
func (b *Batcher) finish(ln *lane, p *pending, batch []*pending) *redis.Cmd {
	if batch != nil {
		b.send(ln, batch)
	}
	cmd, call, ctx := p.cmd, p.call, p.ctx
	p.release()
	if d, has := ctx.Deadline(); has && errors.Is(cmd.Err(), context.DeadlineExceeded) && ctx.Err() == nil &&
		time.Until(d) < 10*time.Millisecond {
		// The pipeline's own context (batchContext) ended at the leader's
		// deadline, which no call's in the batch is later than: this
		// call's context ends now too, on its own timer, a moment after.
		// Its caller must see its context ended, not a deadline of
		// another context while its own still runs.
		<-ctx.Done()
		return ended(ctx)
	}
	if (batch == nil || len(batch) > 1) && transient(cmd.Err()) {
		// go-redis sends a command again after these replies, and a
		// pipeline only when its first command got one (a Cluster's, only
		// after MOVED and ASK): this call went in a pipeline, so it goes
		// again alone, where go-redis does. Each comes before the script's
		// first write, and every dlock script may run twice anyway.
		return call.Run(ctx, b.rdb)
	}
	return cmd
}

// transient reports whether err is a reply go-redis retries a command
// after: the node is loading, read-only, failing over or its slot moving.
func transient(err error) bool {
	for _, p := range []string{"LOADING", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "NOREPLICAS"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// ended is the reply of a call whose context ended first.
func ended(ctx context.Context) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(context.Cause(ctx))
	return cmd
}

func (p *pending) release() {
	p.ctx, p.call, p.cmd, p.leads = nil, Call{}, nil, false
	pendings.Put(p)
}

// laneOf returns the lane of the node that serves call's first key, or nil
// when a Cluster client cannot tell it now (the call then goes alone and
// go-redis routes it).
func (b *Batcher) laneOf(ctx context.Context, call Call) *lane {
	if b.cluster == nil {
		return &b.one
	}
	key := call.firstKey()
	if key == "" {
		return nil
	}
	master, err := b.cluster.MasterForKey(ctx, key)
	if err != nil {
		return nil
	}
	addr := master.Options().Addr
	b.mu.Lock()
	defer b.mu.Unlock()
	ln := b.lanes[addr]
	if ln == nil {
		ln = &lane{}
		b.lanes[addr] = ln
	}
	return ln
}

// send sends batch as one pipeline (its first call leads: it is the caller
// of send), hands every other call its reply, then passes the round trip on.
func (b *Batcher) send(ln *lane, batch []*pending) {
	defer b.next(ln)
	told := 1
	defer func() {
		// Only after a panic in the pipeline (a user's hook): it goes on
		// in the leader, and the calls not yet told get an error instead
		// of waiting for ever.
		for _, p := range batch[told:] {
			p.cmd = redis.NewCmd(p.ctx)
			p.cmd.SetErr(errLeaderPanicked)
			p.turn <- nil
		}
	}()
	if len(batch) == 1 {
		batch[0].cmd = batch[0].call.Run(batch[0].ctx, b.rdb)
		return
	}
	calls := make([]Call, len(batch))
	for i, p := range batch {
		calls[i] = p.call
	}
	ctx, cancel := batchContext(batch)
	replies := Pipeline(ctx, b.rdb, calls, nil)
	cancel()
	batch[0].cmd = replies[0].Cmd
	for i, p := range batch[1:] {
		p.cmd = replies[i+1].Cmd
		p.turn <- nil // p may be reused once told: not touched after
		told++
	}
}

// errLeaderPanicked answers the calls of a batch whose pipeline panicked:
// whether their scripts ran is unknown, as after a lost reply.
var errLeaderPanicked = errors.New("dlock: the pipeline carrying this call panicked; its outcome is unknown")

// next is called when a round trip of ln came back: the calls queued
// meanwhile leave together, led by the first of them, or the lane has one
// round trip fewer out.
func (b *Batcher) next(ln *lane) {
	ln.mu.Lock()
	if len(ln.waiting) == 0 {
		ln.out--
		ln.mu.Unlock()
		return
	}
	// A call whose context has ended stays out of the batch: still queued,
	// it is never sent, and its own abandon takes it out of waiting.
	var batch, left []*pending
	for _, p := range ln.waiting {
		if len(batch) < maxBatch && p.ctx.Err() == nil {
			batch = append(batch, p)
		} else {
			left = append(left, p)
		}
	}
	ln.waiting = left
	if len(batch) == 0 {
		ln.out--
		ln.mu.Unlock()
		return
	}
	// The call that may wait longest leads: the pipeline runs until the
	// latest deadline of the batch, which is then the leader's own, and
	// every other call stops waiting at its own deadline.
	lead := 0
	for i, p := range batch {
		if waitsLonger(p.ctx, batch[lead].ctx) {
			lead = i
		}
	}
	batch[0], batch[lead] = batch[lead], batch[0]
	batch[0].leads = true
	ln.mu.Unlock()
	batch[0].turn <- batch
}

// waitsLonger reports whether a may wait longer than b: it has no deadline
// and b has, or a later one.
func waitsLonger(a, b context.Context) bool {
	da, oka := a.Deadline()
	db, okb := b.Deadline()
	return okb && (!oka || da.After(db))
}

// batchContext is the context a pipeline of batch runs on: the values and
// the deadline of its leader's (the latest of the batch, see next), but not
// the leader's cancellation: the others' replies must not be lost with it.
func batchContext(batch []*pending) (context.Context, context.CancelFunc) {
	lctx := batch[0].ctx
	if d, ok := lctx.Deadline(); ok {
		return context.WithDeadline(context.WithoutCancel(lctx), d)
	}
	return context.WithoutCancel(lctx), func() {}
}

// Queued returns how many calls wait for a round trip to come back, over
// every lane: tests use it to know a batch is forming instead of sleeping.
func (b *Batcher) Queued() int {
	n := b.one.queued()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ln := range b.lanes {
		n += ln.queued()
	}
	return n
}

func (ln *lane) queued() int {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return len(ln.waiting)
}
