// Package torture runs dlock (or a deliberately broken lock) under faults and
// checks what happened: worker processes contend for a few names and update
// a counter kept in a second, never-faulted Redis, presenting the lock's
// fence on every read and write; a nemesis kills, pauses, cuts and delays
// them and restarts or starves the lock's Redis; each worker records every
// acquisition on CLOCK_MONOTONIC, which all processes share; and Check judges
// the history: two holders at once, fences that do not grow, lost updates,
// locks a dead holder left behind, losses the holder never heard of.
//
// Each overlap of two holders is either expected by the lock's contract (a
// holder paused past its lease, a Redis restarted without persistence,
// eviction, a failover with asynchronous replication — each named) or a
// violation, printed as a counterexample.
//
// The package serves the tests (a short profile in `make test`, the full one
// in `make torture`) and `dlock torture`, which runs the client-side faults
// against a user's own Redis.
package torture

import "time"

// Hold is one acquisition as its worker saw it. Stamps are CLOCK_MONOTONIC
// nanoseconds; zero means "did not happen".
type Hold struct {
	Worker int    `json:"w"`
	Seq    int    `json:"q"` // the worker's count of its holds
	Name   string `json:"n"`
	Fence  int64  `json:"f"`
	// Shared: a read lock (dlock.WithShared), which may overlap other reads and
	// nothing else.
	Shared bool  `json:"s,omitempty"`
	Asked  int64 `json:"a"` // Acquire called
	Got    int64 `json:"g"` // Acquire returned the lock: the hold begins
	// Done: the critical section ended and Release was called.
	Done int64 `json:"d,omitempty"`
	// Lost: the worker saw the lock's context end before Done.
	Lost  int64  `json:"l,omitempty"`
	Cause string `json:"c,omitempty"` // why the context ended: see causeOf
	// Release: ok, not_held, failed (a Redis error), unknown (a timeout);
	// empty while the hold lasts or if the worker died in it.
	Release string `json:"r,omitempty"`
	// Final is why the lock's context had ended when Release returned:
	// "released" means the holder still believed its lease valid then.
	// Naive locks have no such context: "".
	Final string `json:"x,omitempty"`
	// Released: Release returned.
	Released int64 `json:"rr,omitempty"`
	// Read and Write: what the protected resource answered to the fenced
	// read and write: ok, stale (a larger fence was seen), err.
	Read  string `json:"rd,omitempty"`
	Write string `json:"wr,omitempty"`

	// Died is set by the runner: the worker was killed during the hold,
	// stamped after the kill was complete.
	Died int64 `json:"died,omitempty"`
}

// End is when the holder stopped believing it held the lock: the earliest of
// the end of its critical section, the lock's context ending, and its death.
// open is returned for a hold that never ended (the run stopped first).
func (h Hold) End(open int64) int64 {
	end := open
	for _, t := range []int64{h.Done, h.Lost, h.Died} {
		if t != 0 && t < end {
			end = t
		}
	}
	return end
}

// Attempt counts one Acquire that returned no lock.
type Attempt struct {
	Worker  int    `json:"w"`
	Name    string `json:"n"`
	Asked   int64  `json:"a"` // Acquire called
	End     int64  `json:"t"` // Acquire returned
	Outcome string `json:"o"` // busy (not obtained), failed (an error), unknown (a timeout)
	Err     string `json:"e,omitempty"`
}

// The kinds of fault. Those in expected excuse an overlap by the contract.
const (
	FaultKill         = "kill"          // SIGKILL of a worker, restarted after
	FaultPause        = "pause"         // SIGSTOP of a worker past the TTL, then SIGCONT
	FaultBlackhole    = "blackhole"     // one worker's (or all) connections forward nothing
	FaultLatency      = "latency"       // one worker's connections delayed beyond its read timeout
	FaultReset        = "reset"         // a connection reset right after a lock command was written
	FaultRestartAOF   = "restart-aof"   // the lock's Redis killed and restarted with appendfsync always
	FaultRestartEmpty = "restart-empty" // the lock's Redis killed and restarted empty
	// FaultCrash: the lock's Redis (appendfsync everysec) killed as a
	// machine crash would: its AOF cut back to its last fsync (crashEnv),
	// and restarted at once. FaultCrashDurable is the same crash under
	// workers that acquire WithDurableGrant: it excuses nothing.
	FaultCrash        = "crash"
	FaultCrashDurable = "crash-durable"
	FaultEvict        = "evict"    // memory filled under volatile-lru: lock keys evicted
	FaultFailover     = "failover" // a replica promoted (Sentinel or Cluster)
	// FaultForceUnlock: an operator's dlock.ForceUnlock of a lock just
	// handed from a releasing holder to a waiter, which may not have heard
	// of its grant yet.
	FaultForceUnlock = "force-unlock"
	// A coordinated CLUSTER FAILOVER: the primary stops writes until its
	// replica caught up, so no acknowledged grant is lost and nothing is
	// excused.
	FaultFailoverManual = "failover-manual"
	// FaultFailoverUnplanned: the sentinels moved the primary outside any
	// failover of the nemesis (seen: a second promotion 1.5 s after the
	// nemesis's failover had ended, every sentinel agreeing on the first);
	// the window runs from the last look that saw the old primary until no
	// old primary takes writes (see watchSentinel).
	FaultFailoverUnplanned = "failover-unplanned"

	// Client-side faults of RunInProcess, injected by go-redis hooks on one
	// client's lock commands (the dlock scripts, single or pipelined) and by
	// its dialer on its pub/sub connections. None excuses an overlap.
	FaultDelay     = "delay"        // a lock command held back before it was sent
	FaultDuplicate = "duplicate"    // a lock command run again after it ran; the caller saw the second reply
	FaultDrop      = "drop"         // a lock command, or its reply, lost: the caller saw a network error
	FaultReorder   = "reorder"      // a lock command held back until a later one overtook it
	FaultPubSub    = "pubsub-delay" // a read of a pub/sub connection (hand-off messages) delayed
)

// expected names, for each kind of fault that the contract admits overlaps
// under, why.
var expected = map[string]string{
	FaultPause:        "holder paused past its lease",
	FaultRestartEmpty: "Redis restarted without persistence",
	FaultCrash:        "crash lost the AOF's writes since its last fsync (appendfsync everysec)",
	FaultEvict:        "lock keys evicted (volatile-lru)",
	FaultFailover:     "failover with asynchronous replication",
	// The holder learns at its next renewal; until then it overlaps the
	// next (ForceUnlock's doc).
	FaultForceUnlock: "forced unlock by an operator",
	// A promotion is a promotion, whoever asked for it.
	FaultFailoverUnplanned: "failover with asynchronous replication",
}

// Fault is one fault the nemesis injected, with its window.
type Fault struct {
	Kind   string `json:"k"`
	Worker int    `json:"w"`           // -1: every worker, or the server
	Name   string `json:"n,omitempty"` // the lock the worker held or waited for
	// Names are the locks a fault of a server touched (the names whose slot
	// a failed-over Cluster primary served); empty: every lock.
	Names []string `json:"names,omitempty"`
	From  int64    `json:"from"`
	To    int64    `json:"to"`
	Note  string   `json:"note,omitempty"`
	// Fence is the fence of the grant a forced unlock (FaultForceUnlock)
	// removed: the one hold it excuses.
	Fence int64 `json:"fence,omitempty"`
}

// Access is one read or write of the protected resource, as the resource
// recorded it (in the order it applied them).
type Access struct {
	Name   string
	Worker int
	Fence  int64
	Op     string // read or write
	Read   int64  // write: the value the worker had read
	Value  int64  // the value before the access
	OK     bool   // false: refused, a larger fence had been seen
}

// History is everything one run recorded.
type History struct {
	// Start: the first worker is started; Stopping: the workers are told to
	// stop; Stop: the last one has.
	Start, Stopping, Stop int64
	TTL                   time.Duration
	Permits               int // Scenario.Permits: holders a name admits at once; 0 for one
	// MinHold: every acquisition asked for dlock.WithMinHold(MinHold);
	// Check wants no holder of a name in before the previous grant plus it.
	MinHold time.Duration
	// Wait is the WithWait every Acquire asked for: an Acquire that
	// returns no lock before its wait ran out gave up (Check's
	// falseGiveUps). Zero: no wait is judged.
	Wait     time.Duration
	Holds    []Hold
	Attempts []Attempt
	Faults   []Fault
	Accesses []Access
}
