package dlock

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/node"
)

// renewer is the Client's one renewal loop. It keeps the held locks in a heap
// ordered by their next renewal, sleeps until the first is due, and renews
// every lock due by then in one pipeline: a process holding 10,000 locks runs
// one goroutine and a few pipelines a second, not 10,000 timers sending.
//
// It only sends. Deciding that a lock is lost when renewals go unanswered is
// the job of each lock's deadline timer, so a renewal stuck on a blackholed
// connection cannot keep a holder from learning its lease ran out.
//
// The goroutine runs only while some lock is due for renewal.
type renewer struct {
	c *Client

	// mu guards the renewer's own state. The lock order: a Lock's mu
	// before this one, never the other way round. schedule runs under the
	// Lock's mu so that end, which marks the lock ended under it and then
	// calls forget, cannot come between the check that the lock is held and
	// its entry going into the heap; the loop reads a Lock's fields only
	// while it holds no mu of its own.
	mu      sync.Mutex
	entries map[*redisLock]*entry // every lock renewed and not yet ended
	due     entryHeap
	kick    chan struct{} // a new lock is due earlier than the loop sleeps
	wakeAt  time.Time     // when the sleeping loop wakes by itself
	running bool
	closed  bool
	wg      sync.WaitGroup
	stop    chan struct{}
}

// entry is the renewer's bookkeeping of one lock, under renewer.mu.
type entry struct {
	l        *redisLock
	next     time.Time // when to renew next
	failures int       // renewals in a row that got no answer
	index    int       // position in due, -1 when not in it
}

const (
	// renewBatchSlack: locks due within this of the first are renewed in the
	// same pipeline, a little early rather than in a pipeline of their own.
	renewBatchSlack = 20 * time.Millisecond
	// renewIdle is how long the loop stays without locks before it exits.
	renewIdle = 2 * time.Second
	// renewBatchMax bounds one pipeline.
	renewBatchMax = 1000
)

func newRenewer(c *Client) *renewer {
	return &renewer{c: c, entries: map[*redisLock]*entry{}, kick: make(chan struct{}, 1), stop: make(chan struct{})}
}

// renewAt is when a lease confirmed at leased with ttl is renewed: after a
// third of it, leaving two thirds for retries before the deadline.
func renewAt(leased time.Time, ttl time.Duration) time.Time {
	return leased.Add(ttl / 3)
}

// schedule has l renewed at next, unless l has ended. The caller holds l.mu
// (see renewer.mu).
func (r *renewer) schedule(l *redisLock, next time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || l.state != held {
		return
	}
	e := r.entries[l]
	if e == nil {
		e = &entry{l: l, index: -1}
		r.entries[l] = e
	}
	r.place(e, next)
}

// place puts e in the heap at next, and has the loop run by then. The
// caller holds r.mu.
func (r *renewer) place(e *entry, next time.Time) {
	e.next = next
	if e.index >= 0 {
		heap.Fix(&r.due, e.index)
	} else {
		heap.Push(&r.due, e)
	}
	if !r.running {
		r.running = true
		r.wg.Add(1)
		go r.loop()
		return
	}
	// Wake the loop only when it would sleep past this lock's renewal: a
	// wake-up per acquisition costs an uncontended lock a context switch.
	if next.Before(r.wakeAt) {
		r.wakeLoop()
	}
}

// again schedules the next renewal of e's lock from the loop, which holds
// no Lock's mu: it takes l.mu, as schedule needs. The loop has the entry
// already: while its lock is held it is the one in r.entries (forget drops
// it only once the lock has ended), and looking it up again in a map of
// every held lock was a tenth of the renewal's cost with 100,000 locks.
func (r *renewer) again(e *entry, next time.Time) {
	l := e.l
	l.mu.Lock()
	defer l.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || l.state != held {
		return
	}
	r.place(e, next)
}

// remove stops renewing l: Release calls it before it runs. A renewal of l
// under way still schedules the next one if l is then held (a Release that
// failed), as does a Refresh.
func (r *renewer) remove(l *redisLock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[l]; e != nil {
		r.unqueue(e)
	}
}

// forget drops l for good: it has ended, so nothing schedules it again.
func (r *renewer) forget(l *redisLock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[l]; e != nil {
		r.unqueue(e)
		delete(r.entries, l)
	}
}

// unqueue takes e out of the heap. The loop may sleep until e's renewal; it
// then wakes once for nothing, which is cheaper than waking it now.
func (r *renewer) unqueue(e *entry) {
	if e.index >= 0 {
		heap.Remove(&r.due, e.index)
	}
}

func (r *renewer) wakeLoop() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *renewer) close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.stop)
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *renewer) loop() {
	defer r.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.mu.Lock()
		if r.closed {
			r.running = false
			r.mu.Unlock()
			return
		}
		if len(r.due) == 0 {
			// Set under the same lock that saw the heap empty, so a lock
			// scheduled right after compares with the idle wake-up.
			r.wakeAt = time.Now().Add(renewIdle)
			r.mu.Unlock()
			if !r.idle(timer) {
				return
			}
			continue
		}
		r.wakeAt = r.due[0].next
		wait := time.Until(r.wakeAt)
		r.mu.Unlock()
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-r.kick:
				timer.Stop()
				continue
			case <-r.stop:
				return
			}
		}
		r.renew(r.takeDue())
	}
}

// idle waits, with nothing to renew, for a new lock. It reports false when
// the loop should exit: after renewIdle without locks, or on close. Staying a
// while spares a process that takes and releases locks one after another a
// goroutine start per lock.
func (r *renewer) idle(timer *time.Timer) bool {
	timer.Reset(renewIdle)
	select {
	case <-r.kick:
		timer.Stop()
		return true
	case <-r.stop:
		return false
	case <-timer.C:
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.due) > 0 && !r.closed {
		return true
	}
	r.running = false
	return false
}

// takeDue pops the entries due now or within the batch slack.
func (r *renewer) takeDue() []*entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	horizon := time.Now().Add(renewBatchSlack)
	var batch []*entry
	for len(r.due) > 0 && len(batch) < renewBatchMax && !r.due[0].next.After(horizon) {
		batch = append(batch, heap.Pop(&r.due).(*entry))
	}
	return batch
}

// renewal is one lock's part of a pipeline.
type renewal struct {
	e    *entry
	ttl  time.Duration
	last bool // the lease asked for ends at the hold limit
}

// renew extends the batch's leases in one pipeline and schedules each lock
// again: a third of its TTL later on success, sooner with backoff on error.
// A lock found gone or taken over is lost at once.
func (r *renewer) renew(batch []*entry) {
	if len(batch) == 0 {
		return
	}
	now := time.Now()
	var jobs []renewal
	var calls []node.Call
	var last time.Time // the latest deadline of the batch bounds the pipeline
	for _, e := range batch {
		l := e.l
		l.mu.Lock()
		ttl, ok, lastLease := l.capAtHold(now, l.ttl)
		deadline := l.until
		l.mu.Unlock()
		if !ok {
			continue
		}
		if now.After(deadline) {
			continue // the deadline timer is ending this lock; renewing now could revive a lease we already gave up
		}
		last = maxTime(last, deadline)
		jobs = append(jobs, renewal{e: e, ttl: ttl, last: lastLease})
		calls = append(calls, node.Refresh(l.keys, l.token, ttl))
	}
	if len(jobs) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), last)
	defer cancel()
	replies := node.Pipeline(ctx, r.c.rdb, calls, nil)
	for i, j := range jobs {
		r.settle(j, replies[i])
	}
}

// settle applies one renewal's answer.
func (r *renewer) settle(j renewal, reply node.Reply) {
	l := j.e.l
	ok, err := reply.Int64()
	switch {
	case err == nil && ok == 1:
		r.c.cfg.observers.renew(RenewEvent{Name: l.name, Result: ResultOK})
		if l.confirm(reply.Sent, j.ttl, false, j.last) {
			l.warnLongHold(time.Since(l.start), j.ttl)
		}
		r.mu.Lock()
		j.e.failures = 0
		r.mu.Unlock()
		l.mu.Lock()
		last := l.holdDone
		l.mu.Unlock()
		if !last {
			r.again(j.e, renewAt(reply.Sent, j.ttl))
		}
	case err == nil && l.isReleasing():
		// Our own Release ran first: not a loss.
	case err == nil:
		r.c.cfg.observers.renew(RenewEvent{Name: l.name, Result: ResultLost})
		l.end(lost, ReasonTakenOver, fmt.Errorf("%w: renewal found the lock gone or taken over", ErrLockLost))
	default:
		r.c.cfg.observers.renew(RenewEvent{Name: l.name, Result: ResultError, Err: err})
		// Unanswered: try again soon, with backoff. The deadline timer
		// ends the lock if no renewal gets through in time.
		r.mu.Lock()
		j.e.failures++
		n := min(j.e.failures, 5)
		r.mu.Unlock()
		backoff := max(j.ttl/30, 5*time.Millisecond) << (n - 1)
		r.again(j.e, time.Now().Add(min(backoff, j.ttl/3)))
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// entryHeap orders entries by their next renewal.
type entryHeap []*entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*h = old[:len(old)-1]
	return e
}
