package torture

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/redlock"
)

// Redlock scenarios: the workers lock through package redlock over
// Scenario.Nodes independent primaries that the run starts (no
// persistence), and the nemesis faults the nodes, never more than a
// minority at once: it stops them (SIGSTOP past the TTL: their keys expire
// meanwhile, and a command sent there waits for the read timeout), or kills
// them and starts them again empty after at least a TTL. A Redlock must keep one
// holder at a time through all of it, and the checker judges it as it
// judges the single-Redis lock: no fault of a minority excuses an overlap.
const (
	// LockRedlock is package redlock over the run's nodes.
	LockRedlock = "redlock"
	// LockRedlockQuorum1 is the broken Redlock the checker must catch: a
	// quorum of one. Each name has a home node (by hash), and the lock is a
	// plain dlock lock on the first node that answers, from the home node
	// on, in the same order for every worker: each try goes to the home
	// node, a busy answer means a pause and a new try there, and only a
	// node that fails (down, or no answer within the read timeout) sends
	// the try on to the next node. With every node up it excludes; a
	// stopped or killed home node sends tries to the next one while its
	// holder still believes, and a home node restarted empty is taken again
	// at once.
	LockRedlockQuorum1 = "redlock-quorum-1"

	// FaultNodePause stops a minority of the nodes with SIGSTOP past the
	// TTL, then continues them.
	FaultNodePause = "node-pause"
	// FaultNodeKill kills a minority of the nodes with SIGKILL and starts
	// them again empty, on the same ports, after one to two TTLs down: the
	// operating rule redlock's doc gives for nodes without persistence
	// (restart them only after the longest TTL). A node back sooner may
	// hand a second holder the lock that a holder of a bare quorum (that
	// node and too few others) still holds: the documented limit, not a
	// fault of the lock, and one full run in twenty-odd showed it (a node
	// back 363 ms into a 500 ms lease).
	FaultNodeKill = "node-kill"
)

// RedlockScenarios are the Redlock runs: over 3 and over 5 nodes, 8
// workers on 2 names, a tenth of the critical sections longer than the
// TTL (so that renewals meet the faults), the nodes stopped and killed.
func RedlockScenarios(d time.Duration) []Scenario {
	var out []Scenario
	for _, n := range []int{3, 5} {
		sc := scenario(fmt.Sprintf("redlock-%d", n), d, FaultNodePause, FaultNodeKill)
		sc.Lock, sc.Nodes, sc.Long = LockRedlock, n, 0.1
		out = append(out, sc)
	}
	return out
}

// nodeLock tells whether a lock kind runs over the run's nodes.
func nodeLock(kind string) bool { return kind == LockRedlock || kind == LockRedlockQuorum1 }

// startNodes starts the scenario's independent primaries.
func (r *run) startNodes(ctx context.Context) error {
	if r.env.Redis != nil || r.sc.Topology != "" {
		return fmt.Errorf("torture: %s needs the %d Redis nodes the run starts itself", r.sc.Name, r.sc.Nodes)
	}
	if !nodeLock(r.sc.Lock) {
		return fmt.Errorf("torture: %s: lock %q does not run over nodes (want %s or %s)", r.sc.Name, r.sc.Lock, LockRedlock, LockRedlockQuorum1)
	}
	for range r.sc.Nodes {
		dir, err := os.MkdirTemp(r.env.Dir, "node-")
		if err != nil {
			return err
		}
		srv, err := redistest.Launch(ctx, dir)
		if err != nil {
			return err
		}
		r.nodes = append(r.nodes, srv)
	}
	return nil
}

// nodeAddrs lists the nodes' addresses, in the order every worker uses.
func (r *run) nodeAddrs() []string {
	addrs := make([]string, len(r.nodes))
	for i, s := range r.nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// nodeFault stops or kills a minority of the nodes (one of three; one or
// two of five), then lets the holders repair: a renewal takes a node that
// lost the lock again, but only once the node is back, and two faults
// closer than that would be a majority at once for a holder that still
// lacks the first node.
func (r *run) nodeFault(ctx context.Context, kind string) error {
	if len(r.nodes) == 0 {
		return fmt.Errorf("torture: %s needs a scenario with Nodes", kind)
	}
	k := 1 + r.rng.IntN(max((len(r.nodes)-1)/2, 1))
	picked := r.rng.Perm(len(r.nodes))[:k]
	slices.Sort(picked)
	var note string
	from := Now()
	var to int64
	switch kind {
	case FaultNodePause:
		d := r.sc.TTL + time.Duration(r.rng.Int64N(int64(r.sc.TTL)))
		for _, i := range picked {
			r.nodes[i].Pause()
		}
		sleepCtx(ctx, d)
		to = Now()
		for _, i := range picked {
			r.nodes[i].Resume()
		}
		note = fmt.Sprintf("nodes %v of %d stopped for %v", picked, len(r.nodes), d.Round(time.Millisecond))
	case FaultNodeKill:
		down := r.sc.TTL + time.Duration(r.rng.Int64N(int64(r.sc.TTL)))
		for _, i := range picked {
			r.nodes[i].Kill()
		}
		sleepCtx(ctx, down)
		// Started again even when ctx has ended: the run's end needs the
		// nodes, to release what the workers hold.
		for _, i := range picked {
			if err := r.nodes[i].Restart(context.WithoutCancel(ctx)); err != nil {
				return fmt.Errorf("torture: restart node %d: %w", i, err)
			}
		}
		to = Now()
		note = fmt.Sprintf("nodes %v of %d killed, down %v, restarted empty", picked, len(r.nodes), down.Round(time.Millisecond))
	default:
		return fmt.Errorf("torture: the nemesis cannot inject %q", kind)
	}
	r.fault(Fault{Kind: kind, Worker: -1, From: from, To: to, Note: note})
	sleepCtx(ctx, 2*r.sc.TTL)
	return nil
}

// newNodeLocker makes a worker's locker over the nodes at addrs, one client
// each; the locker closes them.
func newNodeLocker(cfg workerConfig, owner string) (locker, error) {
	rdbs := make([]*redis.Client, len(cfg.Addrs))
	for i, addr := range cfg.Addrs {
		// ContextTimeoutEnabled, as redlock.New asks: a call on a stopped
		// node returns by its context's deadline.
		o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true,
			ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.ReadTimeout, DialTimeout: cfg.ReadTimeout}
		if cfg.Lock == LockRedlockQuorum1 {
			// "Answers" within the read timeout: go-redis' retries would
			// wait out most stops, and the broken lock would seldom move
			// on to the next node.
			o.MaxRetries = -1
		}
		rdbs[i] = redis.NewClient(o)
	}
	closeAll := func() {
		for _, c := range rdbs {
			_ = c.Close()
		}
	}
	if cfg.Lock == LockRedlockQuorum1 {
		q := &quorumOne{ttl: cfg.TTL, wait: cfg.Wait, close: closeAll}
		for _, c := range rdbs {
			q.clients = append(q.clients, dlock.MustNew(c, dlock.WithDefaultOwner(owner), dlock.WithPrefix(cfg.Prefix)))
		}
		return q, nil
	}
	clients := make([]redis.UniversalClient, len(rdbs))
	for i, c := range rdbs {
		clients[i] = c
	}
	opts := []dlock.AcquireOption{dlock.WithTTL(cfg.TTL), dlock.WithWait(cfg.Wait)}
	rl, err := redlock.New(clients, redlock.WithDefaultOwner(owner), redlock.WithPrefix(cfg.Prefix))
	if err != nil {
		closeAll()
		return nil, err
	}
	return redlockLocker{r: rl, opts: opts, close: closeAll}, nil
}

type redlockLocker struct {
	r     *redlock.Redlock
	opts  []dlock.AcquireOption
	close func()
}

func (l redlockLocker) Acquire(ctx context.Context, name string) (held, error) {
	h, err := l.r.Acquire(ctx, name, l.opts...)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (l redlockLocker) Close(ctx context.Context) error {
	defer l.close()
	return l.r.Close(ctx)
}

// quorumOne is LockRedlockQuorum1.
type quorumOne struct {
	clients   []*dlock.Client
	ttl, wait time.Duration
	close     func()
}

func (q *quorumOne) Acquire(ctx context.Context, name string) (held, error) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	home := int(h.Sum32() % uint32(len(q.clients)))
	deadline := time.Now().Add(q.wait)
	for {
		var errs []error
		for i := range q.clients {
			l, err := q.clients[(home+i)%len(q.clients)].TryAcquire(ctx, name, dlock.WithTTL(q.ttl))
			if err == nil {
				return l, nil
			}
			if errors.Is(err, dlock.ErrNotObtained) || ctx.Err() != nil {
				break // busy: the first node that answers decides
			}
			errs = append(errs, err)
		}
		if len(errs) == len(q.clients) {
			return nil, errors.Join(errs...)
		}
		if time.Now().After(deadline) {
			return nil, errBusy
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
}

func (q *quorumOne) Close(ctx context.Context) error {
	defer q.close()
	var errs []error
	for _, c := range q.clients {
		errs = append(errs, c.Close(ctx))
	}
	return errors.Join(errs...)
}
