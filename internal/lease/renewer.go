package lease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/node"
)

// Holder is a held lock the Renewer keeps alive: a backend's lock.
type Holder interface {
	// Renewal is called when the holder's renewal is due: where its calls
	// go, and the Round that makes and answers them. ok false: nothing to
	// send (the lock ended, reached its hold limit, or its deadline
	// passed); the holder is then not renewed again unless it schedules
	// itself.
	Renewal(now time.Time) (parts []Part, round Round, ok bool)
}

// Round is one renewal: it makes each part's call when the part's lane
// sends it, and takes each reply as it comes, on the goroutine of the
// part's lane. The holder reschedules itself (Schedule) once it has a
// verdict; replies after that are still delivered.
type Round interface {
	// Call makes part's call at now, the moment it leaves: a call that
	// waited in its lane behind another pipeline must not ask for a lease
	// measured from when the renewal was due (a lease cut to a hold limit
	// would then run past it). bound is when its reply stops being of
	// use (the lease deadline): a pipeline waits for its replies until
	// the earliest bound of its calls. ok false: nothing to send any more
	// (the lock ended or reached its limit meanwhile); the part is then
	// not answered.
	Call(part int, now time.Time) (call node.Call, bound time.Time, ok bool)
	Answer(part int, reply node.Reply)
}

// Part is where one call of a renewal goes.
type Part struct {
	// Lane names the node: calls of one lane leave together, in one
	// pipeline, and a lane whose node hangs holds up only its own calls.
	Lane string
	Conn redis.Cmdable // what the lane's pipeline is sent on
	// Durable, when above 0, has the call confirmed on the node's disk:
	// WAITAOF 1 0 follows the pipeline's calls, waiting at most the
	// longest Durable among them, and a call that answered 1 (renewed)
	// whose write it does not confirm is answered with ErrNotOnDisk
	// instead, so that
	// the holder does not extend its lease on a write a restart can lose.
	// Conn must then be one node's client (WAITAOF counts the writes of
	// its own connection).
	Durable time.Duration
}

// ErrNotOnDisk is the answer to a Durable call whose write WAITAOF did not
// confirm on the node's disk in time (or that the node refused to confirm).
var ErrNotOnDisk = errors.New("the node did not confirm the write on its disk")

// Renewer is one renewal loop for many held locks. It keeps them in a heap
// ordered by their next renewal, sleeps until the first is due, and hands
// every renewal due by then to the lanes of the nodes its calls go to: a
// process holding 10,000 locks runs one loop goroutine and a few pipelines a
// second, not 10,000 timers sending.
//
// It only sends. Deciding that a lock is lost when renewals go unanswered is
// the job of each lock's deadline timer, so a renewal stuck on a blackholed
// connection cannot keep a holder from learning its lease ran out.
//
// Renewals go out per node (a lane), a pipeline per batch, each sent by a
// sender goroutine of the lane, which answers each call as its pipeline
// returns. The loop never waits for a reply, so a node that hangs delays
// only the locks it holds: one pipeline over every node (go-redis returns
// a cluster pipeline only when each node's part did) made the healthy
// nodes' locks lost with it, and a loop that waited on the hung node's read
// made a longer lease on a healthy node miss its deadline.
// (TestHungPrimaryCostsOnlyItsOwnLocks.) A lane sends one pipeline at a
// time while they come back, as the one loop did, and has up to LaneDepth
// out, each on a connection of its own, when calls wait laneStall behind
// them: one connection that went quiet on a healthy node holds up only the
// renewals it carries (TestHungConnectionCostsOnlyItsOwnLock, redlock). A
// pipeline waits only until the earliest deadline of its calls, past which
// its first lock is lost anyway and the others are retried.
//
// A Renewer that has only ever renewed on one node (a plain client, not a
// Cluster nor a Redlock) has its loop send the pipelines itself, one at a
// time, as before lanes: there a connection that went quiet holds up the
// node's other renewals until the earliest deadline of its pipeline.
//
// The loop goroutine runs only while some lock is due for renewal.
type Renewer struct {
	// mu guards the Renewer's own state. The lock order: a holder's own
	// mutex before this one, never the other way round. Schedule runs
	// under the holder's mutex, so that the holder's end, which marks it
	// ended under that mutex and then calls Forget, cannot come between
	// the holder's check that it is held and its entry going into the
	// heap; the loop and the lanes call a holder only while they hold no
	// mutex of their own.
	mu      sync.Mutex
	due     slotHeap
	stale   int              // slots in due whose entry was rescheduled or forgotten
	epoch   time.Time        // what slot times count from
	lanes   map[string]*lane // by name: one per node ever renewed on
	kick    chan struct{}    // a holder is due earlier than the loop sleeps
	wakeAt  time.Time        // when the sleeping loop wakes by itself
	running bool
	closed  bool
	wg      sync.WaitGroup // the loop and the lanes' senders
	stop    chan struct{}
	// closing ends the pipelines out at Close: whatever go-redis does with
	// a cancelled context (it waits for a pooled connection, or dials,
	// only as long as the context lives) does not outlast Close.
	closing context.Context
	cancel  context.CancelFunc
}

// Entry is a holder's place in a Renewer, kept by the holder itself (a
// field of its lock) so that scheduling a renewal needs no lookup: with
// 100,000 held locks, a map from holder to entry was a tenth of the cost
// of a renewal. The zero Entry is ready for use, with one Renewer only; its
// fields are the Renewer's, under Renewer.mu.
type Entry struct {
	h Holder
	// gen counts the entry's schedules and forgets: of the slots in the
	// heap that name the entry, only the one with the entry's gen is live
	// (see slot).
	gen    uint64
	queued bool // a live slot of it is in the heap; false while a renewal is out
}

// slot is one place in the Renewer's heap. It carries its own time, so
// that ordering the heap reads only the heap's array: with 100,000 held
// locks, a heap of pointers that each compare read from its lock's cold
// struct was the largest cost of a renewal. A rescheduled or forgotten
// entry leaves its old slot behind, stale (its gen is not the entry's),
// to be dropped when it comes to the top or when stale slots grow to half
// the heap (compact), instead of being found and moved.
type slot struct {
	at  int64 // when to renew: nanoseconds since Renewer.epoch
	gen uint64
	e   *Entry
}

// lane is the calls to one node waiting for a pipeline, and how many
// pipelines of the lane are out, under Renewer.mu.
type lane struct {
	queue   []job
	out     int  // senders running, at most LaneDepth
	stalled bool // a stall timer is set for the queue (see send)
}

// job is one part of a renewal in a lane.
type job struct {
	part  Part
	i     int
	round Round
}

const (
	// batchSlack: holders due within this of the first are renewed in the
	// same pass, a little early rather than in a pass of their own.
	batchSlack = 20 * time.Millisecond
	// idleFor is how long the loop stays without holders before it exits.
	idleFor = 2 * time.Second
	// batchMax bounds one pipeline.
	batchMax = 1000
	// LaneDepth bounds the pipelines out per lane, as the Batcher's depth
	// does for lock calls: a few connections per node, not one per lock.
	LaneDepth = 4
	// laneStall is how long calls queued behind a lane's pipelines wait
	// before another sender takes them on a connection of its own: far
	// above a pipeline of a thousand renewals (a few ms), far below a
	// connection that went quiet (its reads wait for the lease deadline).
	laneStall = 50 * time.Millisecond
)

// NewRenewer returns a Renewer with nothing to renew; it starts its loop
// when the first holder is scheduled.
func NewRenewer() *Renewer {
	r := &Renewer{lanes: map[string]*lane{}, kick: make(chan struct{}, 1), stop: make(chan struct{}), epoch: time.Now()}
	r.closing, r.cancel = context.WithCancel(context.Background())
	return r
}

// Schedule has h, whose entry is e, renewed at next. The caller holds h's
// own mutex and has checked that h is held (see Renewer.mu); after Close it
// does nothing.
func (r *Renewer) Schedule(e *Entry, h Holder, next time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	e.h = h
	r.unqueue(e)
	e.gen++
	e.queued = true
	r.due.push(slot{at: r.at(next), gen: e.gen, e: e})
	if !r.running {
		r.running = true
		r.wg.Add(1)
		go r.loop()
		return
	}
	// Wake the loop only when it would sleep past this renewal: a wake-up
	// per acquisition costs an uncontended lock a context switch.
	if next.Before(r.wakeAt) {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// Forget stops renewing the holder of e: it has ended, or a Release is
// about to run. A renewal of it under way still calls its Round, which may
// schedule it again if it is then held (a Release that failed), as may a
// Refresh.
func (r *Renewer) Forget(e *Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The loop may sleep until e's renewal; it then wakes once for
	// nothing, which is cheaper than waking it now.
	r.unqueue(e)
}

// unqueue makes e's live slot, if it has one, stale. The caller holds r.mu.
func (r *Renewer) unqueue(e *Entry) {
	if !e.queued {
		return
	}
	e.queued = false
	e.gen++
	r.stale++
	if r.stale > len(r.due)/2 && r.stale > 64 {
		r.compact()
	}
}

// compact drops the stale slots and orders what is left: the heap stays
// within twice the entries it keeps, whatever Refresh, Release and
// rescheduling leave behind.
func (r *Renewer) compact() {
	live := r.due[:0]
	for _, s := range r.due {
		if s.gen == s.e.gen {
			live = append(live, s)
		}
	}
	clear(r.due[len(live):])
	r.due = live
	r.due.init()
	r.stale = 0
}

// at is t as a slot time.
func (r *Renewer) at(t time.Time) int64 { return int64(t.Sub(r.epoch)) }

// Scheduled reports how many holders wait for their next renewal.
func (r *Renewer) Scheduled() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.due) - r.stale
}

// Close stops the loop, cancels the pipelines out and waits for them. A
// pipeline already reading from a node that hangs may run until the
// earliest lease deadline of its calls: go-redis' reads keep to a deadline
// (ContextTimeoutEnabled), not to a cancellation.
func (r *Renewer) Close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.stop)
		r.cancel()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *Renewer) loop() {
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
			// Set under the same lock that saw the heap empty, so a holder
			// scheduled right after compares with the idle wake-up.
			r.wakeAt = time.Now().Add(idleFor)
			r.mu.Unlock()
			if !r.idle(timer) {
				return
			}
			continue
		}
		r.wakeAt = r.epoch.Add(time.Duration(r.due[0].at))
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
		r.send(r.takeDue())
	}
}

// idle waits, with nothing to renew, for a new holder. It reports false when
// the loop should exit: after idleFor without holders, or on Close. Staying
// a while spares a process that takes and releases locks one after another
// a goroutine start per lock.
func (r *Renewer) idle(timer *time.Timer) bool {
	timer.Reset(idleFor)
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

// takeDue pops the holders due now or within the batch slack, and drops
// the stale slots on the way.
func (r *Renewer) takeDue() []Holder {
	r.mu.Lock()
	defer r.mu.Unlock()
	horizon := r.at(time.Now().Add(batchSlack))
	var due []Holder
	for len(r.due) > 0 && len(due) < batchMax && r.due[0].at <= horizon {
		s := r.due.pop()
		if s.gen != s.e.gen {
			r.stale--
			continue
		}
		s.e.queued = false
		due = append(due, s.e.h)
	}
	return due
}

// send asks each due holder for its renewal and hands the parts to their
// lanes: to a new sender, with this pass's parts as its first batches, when
// the lane has no pipeline out; else to the lane's queue, which its senders
// take from as their pipelines return, and another sender takes if they
// stall (unstall). It never waits for a reply, but while the Renewer has
// only ever renewed on one node (a plain client), where the loop sends the
// pipelines itself.
func (r *Renewer) send(due []Holder) {
	if len(due) == 0 {
		return
	}
	now := time.Now()
	jobs := make([]job, 0, len(due))
	for _, h := range due {
		parts, round, ok := h.Renewal(now)
		if !ok {
			continue
		}
		for i, p := range parts {
			if p.Durable > 0 {
				// A durable call's pipeline waits for the disk (WAITAOF, up
				// to a second under everysec): in a lane of its own, on a
				// sender of its own, it holds up no plain call of the node.
				p.Lane += durableLane
			}
			jobs = append(jobs, job{part: p, i: i, round: round})
		}
	}
	if len(jobs) == 0 {
		return
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	if one := jobs[0].part.Lane; len(r.lanes) <= 1 && sameLane(jobs) && (len(r.lanes) == 0 || r.lanes[one] != nil) &&
		!strings.HasSuffix(one, durableLane) {
		// One node, ever: only the loop sends, and it sends these itself,
		// straight from jobs, as the loop over one node did before there
		// were lanes (that node's locks are all it could hold up); a
		// process holding 100,000 locks on one Redis then starts no
		// goroutine and copies no queue per pipeline.
		if r.lanes[one] == nil {
			r.lanes[one] = &lane{}
		}
		r.mu.Unlock()
		for len(jobs) > 0 {
			n := min(len(jobs), batchMax)
			sendLane(r.closing, jobs[:n:n])
			jobs = jobs[n:]
		}
		return
	}
	defer r.mu.Unlock()
	groups := map[string][]job{}
	for _, j := range jobs {
		groups[j.part.Lane] = append(groups[j.part.Lane], j)
	}
	for name, js := range groups {
		ln := r.lanes[name]
		if ln == nil {
			ln = &lane{}
			r.lanes[name] = ln
		}
		if ln.out > 0 {
			// Behind the lane's pipelines out: they take the queue as
			// they return, unless they stall.
			ln.queue = append(ln.queue, js...)
			if !ln.stalled && ln.out < LaneDepth {
				ln.stalled = true
				time.AfterFunc(laneStall, func() { r.unstall(ln) })
			}
			continue
		}
		r.startSender(ln, js)
	}
}

// startSender runs a sender of ln with first as its first batches. The
// caller holds r.mu.
func (r *Renewer) startSender(ln *lane, first []job) {
	ln.out++
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.drain(ln, first)
	}()
}

// unstall runs laneStall after calls were queued behind ln's pipelines:
// if some are still queued, the pipelines out are slow or stuck (a
// connection that went quiet), and another sender takes the queue on a
// connection of its own, up to LaneDepth.
func (r *Renewer) unstall(ln *lane) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ln.stalled = false
	if r.closed || len(ln.queue) == 0 || ln.out >= LaneDepth {
		return
	}
	r.startSender(ln, nil)
	if ln.out < LaneDepth {
		// The new sender may stall too: look again later.
		ln.stalled = true
		time.AfterFunc(laneStall, func() { r.unstall(ln) })
	}
}

// sameLane reports whether every job goes to the lane of the first.
// durableLane ends the lane name of a node's durable calls (Part.Durable),
// apart from its other calls. The loop never sends them itself: a plain
// lock taken later would wait behind their WAITAOF.
const durableLane = "\x00durable"

func sameLane(jobs []job) bool {
	for _, j := range jobs[1:] {
		if j.part.Lane != jobs[0].part.Lane {
			return false
		}
	}
	return true
}

// drain is a sender of the lane: it sends first, a pipeline of at most
// batchMax at a time, then what the lane's queue holds, until it is empty.
func (r *Renewer) drain(ln *lane, first []job) {
	for len(first) > 0 {
		n := min(len(first), batchMax)
		sendLane(r.closing, first[:n:n])
		first = first[n:]
	}
	for {
		r.mu.Lock()
		if len(ln.queue) == 0 {
			ln.out--
			ln.queue = nil // not the backing array of the last batch, for ever
			r.mu.Unlock()
			return
		}
		n := min(len(ln.queue), batchMax)
		batch := ln.queue[:n:n]
		ln.queue = ln.queue[n:]
		r.mu.Unlock()
		sendLane(r.closing, batch)
	}
}

// sendLane sends batch, the calls of one node, in one pipeline that waits
// for its replies until the earliest deadline of its calls, and answers
// each call.
func sendLane(closing context.Context, batch []job) {
	calls := make([]node.Call, 0, len(batch))
	sent := batch[:0:0] // the jobs whose calls go, in order
	var bound time.Time
	now := time.Now()
	for _, j := range batch {
		call, until, ok := j.round.Call(j.i, now)
		if !ok {
			continue
		}
		calls = append(calls, call)
		sent = append(sent, j)
		if bound.IsZero() || until.Before(bound) {
			bound = until
		}
	}
	if len(calls) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(closing, bound)
	defer cancel()
	var durable time.Duration
	for _, j := range sent {
		durable = max(durable, j.part.Durable)
	}
	var then func(redis.Pipeliner)
	// One WAITAOF per pipeline sent: the calls answered NOSCRIPT go again
	// in a second one, maybe on another connection, whose WAITAOF counts
	// only that connection's writes, not the first pipeline's.
	var waits []*redis.Cmd
	if durable > 0 {
		then = func(pipe redis.Pipeliner) {
			waits = append(waits, pipe.Do(ctx, "WAITAOF", 1, 0, durable.Milliseconds()))
		}
	}
	replies := node.Pipeline(ctx, sent[0].part.Conn, calls, then)
	onDisk := true
	for _, w := range waits {
		if local, _ := node.WaitAOF(w); local < 1 {
			onDisk = false
		}
	}
	for i, j := range sent {
		if v, err := replies[i].Int64(); !onDisk && j.part.Durable > 0 && err == nil && v == 1 {
			// The refresh ran but may be lost with the last second of
			// the AOF: not a renewal to extend the lease on. (A refresh
			// that found the lock gone says so whatever the disk holds.)
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(ErrNotOnDisk)
			replies[i] = node.Reply{Cmd: cmd, Sent: replies[i].Sent}
		}
		j.round.Answer(j.i, replies[i])
	}
}

// slotHeap is a binary min-heap of slots by time, written for slots rather
// than through container/heap, whose Push and Pop box each slot.
type slotHeap []slot

func (h *slotHeap) push(s slot) {
	*h = append(*h, s)
	h.up(len(*h) - 1)
}

func (h *slotHeap) pop() slot {
	old := *h
	top := old[0]
	n := len(old) - 1
	old[0] = old[n]
	old[n] = slot{}
	*h = old[:n]
	h.down(0)
	return top
}

func (h slotHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h slotHeap) up(i int) {
	s := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if h[p].at <= s.at {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = s
}

func (h slotHeap) down(i int) {
	n := len(h)
	if n == 0 {
		return
	}
	s := h[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1].at < h[c].at {
			c++
		}
		if s.at <= h[c].at {
			break
		}
		h[i] = h[c]
		i = c
	}
	h[i] = s
}

// LaneOf names the lane of key on rdb: the address of the Cluster primary
// that serves its slot, or "" for any other client (one node). The calls
// of keys a Cluster client cannot place now share one lane of their own,
// and go-redis routes each.
func LaneOf(ctx context.Context, rdb redis.UniversalClient, key string) string {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	m, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return "unplaced"
	}
	return m.Options().Addr
}
