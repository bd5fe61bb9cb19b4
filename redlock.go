package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redlock takes a lock on a majority of independent Redis primaries (the
// Redlock algorithm), so the lock survives the loss of a minority of them.
//
// It is a trade-off, not a cure: it assumes bounded clock drift and process
// pauses like any lease, and a node restarted empty forgets the locks it
// held (run nodes with persistence, or delay their restart by a TTL). See
// the README's safety section.
type Redlock struct {
	nodes  []*Client
	quorum int
}

// ErrNoQuorum: fewer than a majority of the Redlock's nodes granted or
// confirmed the lock.
var ErrNoQuorum = errors.New("dlock: no quorum")

// NewRedlock returns a Redlock over the given primaries, each an independent
// Redis (not replicas of each other, not one Cluster). opts apply to every
// node's Client. The quorum is len(rdbs)/2 + 1.
func NewRedlock(rdbs []redis.UniversalClient, opts ...Option) (*Redlock, error) {
	if len(rdbs) == 0 {
		return nil, errors.New("dlock: NewRedlock needs at least one Redis")
	}
	r := &Redlock{quorum: len(rdbs)/2 + 1}
	for _, rdb := range rdbs {
		n, err := New(rdb, opts...)
		if err != nil {
			return nil, err
		}
		r.nodes = append(r.nodes, n)
	}
	return r, nil
}

// Close closes every node's Client, releasing what they still hold.
func (r *Redlock) Close(ctx context.Context) error {
	var errs []error
	for _, n := range r.nodes {
		errs = append(errs, n.Close(ctx))
	}
	return errors.Join(errs...)
}

// MultiLock is a lock held on a quorum of a Redlock's nodes. It has the
// surface of Lock. Its lease is the validity of the quorum: the TTL less the
// time the acquisition took and a drift allowance (TTL/100 + 2ms).
type MultiLock struct {
	r        *Redlock
	name     string
	token    string
	mu       sync.Mutex
	locks    []*redisLock // per node, nil where not acquired
	ended    bool         // released, or the acquisition failed
	valid    time.Time    // end of the quorum's validity
	ctx      context.Context
	cancel   context.CancelCauseFunc
	done     chan struct{} // closed when the renewal goroutine exits
	stop     chan struct{}
	stopOnce sync.Once
}

func redlockDrift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// TryAcquire makes one attempt on every node at once and returns the lock if
// a quorum granted it within its validity; else it releases what it got and
// fails: ErrNotObtained when the lock is held elsewhere, ErrNoQuorum when
// nodes failed. It returns as soon as a quorum is out of reach, without
// waiting for slow nodes.
//
// A MultiLock is renewed on all nodes at a third of its TTL by a goroutine
// of its own (Redlock locks are few); WithoutRenewal turns that off. Its
// Context ends when a renewal fails to reach a quorum before the validity
// runs out.
func (r *Redlock) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*MultiLock, error) {
	ac, err := r.nodes[0].prepare(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	if ac.maxHold > 0 {
		// A MultiLock renews on its own and has no hold limit yet:
		// refuse rather than accept a limit it would not keep.
		return nil, opError("acquire", name, fmt.Errorf("%w: WithMaxHold is not supported by Redlock", ErrInvalidOption))
	}
	renew := ac.renew
	ac.renew = false // node locks are plain leases; the MultiLock renews them together
	token := newToken()
	start := time.Now()
	m := &MultiLock{r: r, name: name, token: token, locks: make([]*redisLock, len(r.nodes))}

	type result struct {
		i   int
		l   *redisLock
		err error
	}
	results := make(chan result, len(r.nodes))
	// Attempts still out after a success keep going (bounded by the TTL)
	// and join the lock; after a failure they are cancelled.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ac.ttl)
	for i, n := range r.nodes {
		go func() {
			r := n.attempt(actx, name, n.keys(name), ac, token, false)
			results <- result{i, r.lock, r.err}
		}()
	}
	got, failed, busy := 0, 0, 0
	var errs []error
	pending := len(r.nodes)
	defer func() {
		// Attempts still out when the verdict was reached were cancelled;
		// one that got through anyway is released, not left to its TTL.
		go func(n int) {
			defer cancel()
			for range n {
				if res := <-results; res.l != nil {
					m.addLate(context.WithoutCancel(ctx), res.i, res.l)
				}
			}
		}(pending)
	}()
	// Waiting for slow nodes after a quorum would only eat the validity.
	for pending > 0 && got < r.quorum {
		res := <-results
		pending--
		switch {
		case res.err == nil:
			m.locks[res.i] = res.l
			got++
		case isBusy(res.err):
			busy++
			failed++
		default:
			failed++
			errs = append(errs, res.err)
		}
		if failed > len(r.nodes)-r.quorum {
			break // a quorum is out of reach: stop waiting for the rest
		}
	}
	validity := ac.ttl - time.Since(start) - redlockDrift(ac.ttl)
	if got < r.quorum || validity <= 0 {
		cancel() // the attempts still out are of no use now
		m.mu.Lock()
		m.ended = true
		m.mu.Unlock()
		m.releaseAll(ctx)
		if busy > 0 && got+busy >= r.quorum {
			return nil, &NotObtainedError{Name: name}
		}
		return nil, opError("acquire", name, fmt.Errorf("%w: %d of %d nodes granted the lock, %d needed (validity left %v): %w",
			ErrNoQuorum, got, len(r.nodes), r.quorum, validity, errors.Join(errs...)))
	}
	m.valid = start.Add(ac.ttl - redlockDrift(ac.ttl))
	m.ctx, m.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	m.stop, m.done = make(chan struct{}), make(chan struct{})
	if renew {
		go m.renewLoop(ac.ttl)
	} else {
		go m.expireLoop()
	}
	return m, nil
}

// Acquire retries TryAcquire with jittered backoff while the lock is busy,
// until the wait limit (WithWait) or ctx ends. Node failures that make a
// quorum impossible end the wait at once.
func (r *Redlock) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*MultiLock, error) {
	ac, err := r.nodes[0].prepare(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, ac.wait)
	defer cancel()
	for {
		m, err := r.TryAcquire(wctx, name, opts...)
		if err == nil || !isBusy(err) {
			if err != nil && wctx.Err() != nil {
				return nil, r.nodes[0].gaveUp(ctx, name, 0)
			}
			return m, err
		}
		select {
		case <-wctx.Done():
			return nil, r.nodes[0].gaveUp(ctx, name, 0)
		case <-time.After(wakeAfter(0, ac.ttl/10)):
		}
	}
}

// addLate takes in a node's grant that arrived after the verdict: it joins
// a held lock, and is released when the lock failed or ended meanwhile.
func (m *MultiLock) addLate(ctx context.Context, i int, l *redisLock) {
	m.mu.Lock()
	ended := m.ended
	if !ended {
		m.locks[i] = l
	}
	m.mu.Unlock()
	if ended {
		_ = l.Release(ctx)
	}
}

func (m *MultiLock) nodeLocks() []*redisLock {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.locks)
}

func (m *MultiLock) releaseAll(ctx context.Context) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	released := 0
	for _, l := range m.nodeLocks() {
		if l == nil {
			continue
		}
		wg.Go(func() {
			if l.Release(ctx) == nil {
				mu.Lock()
				released++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return released
}

// renewLoop refreshes all nodes at a third of the TTL and ends the lock when
// a quorum cannot be confirmed before the validity runs out.
func (m *MultiLock) renewLoop(ttl time.Duration) {
	defer close(m.done)
	for {
		m.mu.Lock()
		left := time.Until(m.valid)
		m.mu.Unlock()
		next := min(ttl/3, left)
		select {
		case <-m.stop:
			return
		case <-time.After(next):
		}
		if time.Until(m.valid) <= 0 {
			m.cancel(fmt.Errorf("%w: %w: no renewal reached a quorum before the validity ran out", ErrLockLost, ErrNoQuorum))
			return
		}
		ctx, cancel := context.WithDeadline(context.Background(), m.valid)
		err := m.Refresh(ctx, ttl)
		cancel()
		if errors.Is(err, ErrNotHeld) {
			m.cancel(fmt.Errorf("%w: %w", ErrLockLost, err))
			return
		}
	}
}

// expireLoop ends a lock without renewal when its validity runs out.
func (m *MultiLock) expireLoop() {
	defer close(m.done)
	select {
	case <-m.stop:
	case <-time.After(time.Until(m.valid)):
		m.cancel(fmt.Errorf("%w: validity ran out (renewal off)", ErrLockLost))
	}
}

// Name returns the lock's name.
func (m *MultiLock) Name() string { return m.name }

// Token returns the acquisition's token, the same on every node.
func (m *MultiLock) Token() string { return m.token }

// Fences returns the fencing token each node handed out, 0 where the node
// did not grant the lock. Each node's fences only grow; a resource that
// tracks the largest fence per node and refuses a write unless some node's
// fence is at least its largest is safe from stale holders, because any two
// quorums share a node.
func (m *MultiLock) Fences() []int64 {
	locks := m.nodeLocks()
	out := make([]int64, len(locks))
	for i, l := range locks {
		if l != nil {
			out[i] = l.fence
		}
	}
	return out
}

// Fence returns the largest of Fences. It is not guaranteed to grow across
// acquisitions (two quorums may differ in the node that gave the largest);
// use Fences with a per-node check where fencing must be strict.
func (m *MultiLock) Fence() int64 {
	var f int64
	for _, x := range m.Fences() {
		f = max(f, x)
	}
	return f
}

// Context is cancelled when the lock is released or its quorum is lost.
func (m *MultiLock) Context() context.Context { return m.ctx }

// TTL returns what is left of the quorum's validity, on the local clock.
func (m *MultiLock) TTL(ctx context.Context) (time.Duration, error) {
	if m.ctx.Err() != nil {
		return 0, opError("ttl", m.name, ErrNotHeld)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(time.Until(m.valid), 0), nil
}

// Refresh extends the lease on every node; it succeeds when a quorum
// confirmed within the new validity.
func (m *MultiLock) Refresh(ctx context.Context, ttl time.Duration) error {
	if m.ctx.Err() != nil {
		return opError("refresh", m.name, ErrNotHeld)
	}
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, gone := 0, 0
	for _, l := range m.nodeLocks() {
		if l == nil {
			continue
		}
		wg.Go(func() {
			// Straight to Redis: a node lock whose own deadline passed
			// during a blip is still ours if Redis says so; the quorum's
			// validity, not each node's timer, decides.
			sent := time.Now()
			held, err := l.refreshScript(ctx, ttl)
			if held {
				l.confirm(sent, ttl, true)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case held:
				ok++
			case err == nil:
				gone++
			}
		})
	}
	wg.Wait()
	if ok >= m.r.quorum && time.Since(start) < ttl-redlockDrift(ttl) {
		// Node leases are never shortened (a renewal and a Refresh that
		// cross keep the longer), so the validity only moves forward.
		m.mu.Lock()
		if v := start.Add(ttl - redlockDrift(ttl)); v.After(m.valid) {
			m.valid = v
		}
		m.mu.Unlock()
		return nil
	}
	if gone > len(m.r.nodes)-m.r.quorum {
		return opError("refresh", m.name, fmt.Errorf("%w: gone on %d of %d nodes", ErrNotHeld, gone, len(m.r.nodes)))
	}
	return opError("refresh", m.name, fmt.Errorf("%w: %d of %d nodes confirmed", ErrNoQuorum, ok, len(m.r.nodes)))
}

// Release releases the lock on every node it holds and ends its context.
func (m *MultiLock) Release(ctx context.Context) error {
	if m.ctx.Err() != nil && errors.Is(context.Cause(m.ctx), ErrReleased) {
		return opError("release", m.name, ErrNotHeld)
	}
	m.stopOnce.Do(func() { close(m.stop) })
	<-m.done
	m.mu.Lock()
	m.ended = true
	m.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.r.nodes[0].cfg.releaseTimeout)
	defer cancel()
	n := m.releaseAll(rctx)
	m.cancel(ErrReleased)
	if n < m.r.quorum {
		return opError("release", m.name, fmt.Errorf("%w: released on %d of %d nodes", ErrNotHeld, n, len(m.r.nodes)))
	}
	return nil
}
