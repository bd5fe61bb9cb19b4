package torture

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
)

// The checker on hand-made histories: each case must give exactly the
// violations it names, so a checker that cannot fail fails here.
func TestCheckJudgesHandMadeHistories(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	hold := func(w int, fence, from, to int64) Hold {
		return Hold{Worker: w, Name: "a", Fence: fence, Asked: ms(from), Got: ms(from), Done: ms(to), Release: "ok", Final: "released"}
	}
	with := func(h Hold, f func(*Hold)) Hold { f(&h); return h }
	read := func(h Hold) Hold { h.Shared = true; return h }
	pause := func(w int, from, to int64) Fault {
		return Fault{Kind: FaultPause, Worker: w, From: ms(from), To: ms(to)}
	}
	cases := []struct {
		name     string
		holds    []Hold
		faults   []Fault
		accesses []Access
		attempts []Attempt // each waited up to 800 ms (History.Wait)
		want     []string  // a substring of each violation, in order
		expected int
	}{
		{name: "sequential", holds: []Hold{hold(1, 1, 0, 10), hold(2, 2, 11, 20)}},
		{name: "overlap", holds: []Hold{hold(1, 1, 0, 10), hold(2, 2, 5, 20)}, want: []string{"two holders: w1"}},
		{name: "overlap ended by the context", holds: []Hold{with(hold(1, 1, 0, 10), func(h *Hold) { h.Lost = ms(4) }), hold(2, 2, 5, 20)}},
		{name: "overlap of a holder paused inside", holds: []Hold{hold(1, 1, 0, 10), hold(2, 2, 5, 20)}, faults: []Fault{pause(1, 2, 4)}, expected: 1},
		{name: "overlap before a pause of the holder", holds: []Hold{hold(1, 1, 0, 1200), hold(2, 2, 10, 20)}, faults: []Fault{pause(1, 500, 1100)}, want: []string{"two holders"}},
		{name: "overlap after a pause of the waiter", holds: []Hold{hold(1, 1, 0, 10), hold(2, 2, 5, 20)}, faults: []Fault{pause(2, 1, 4)}, want: []string{"two holders"}},
		// w2 asked at 0, was granted, stopped before its first look and
		// found its context ended: no holder, counted as the pause.
		{name: "overlap by a holder whose context had ended at its first look", holds: []Hold{hold(1, 1, 0, 10),
			with(hold(2, 2, 5, 20), func(h *Hold) { h.Asked, h.Lost, h.Cause = 0, h.Got, "expired" })}, faults: []Fault{pause(2, 1, 4)}, expected: 1},
		{name: "overlap by a holder whose context ended just after its first look", holds: []Hold{hold(1, 1, 0, 10),
			with(hold(2, 2, 5, 20), func(h *Hold) { h.Asked, h.Lost, h.Cause = 0, h.Got+1, "expired" })}, faults: []Fault{pause(2, 1, 4)}, want: []string{"two holders"}},
		{name: "overlap by a holder ended at its first look, paused only before it asked", holds: []Hold{hold(1, 1, 0, 10),
			with(hold(2, 2, 5, 20), func(h *Hold) { h.Asked, h.Lost, h.Cause = ms(4), h.Got, "expired" })}, faults: []Fault{pause(2, 1, 3)}, want: []string{"two holders"}},
		{name: "overlap across a restart without persistence", holds: []Hold{hold(1, 1, 0, 10), hold(2, 2, 5, 20)},
			faults: []Fault{{Kind: FaultRestartEmpty, Worker: -1, From: ms(2), To: ms(3)}}, expected: 1},
		{name: "overlap across a restart with persistence", holds: []Hold{hold(1, 1, 0, 10), hold(2, 2, 5, 20)},
			faults: []Fault{{Kind: FaultRestartAOF, Worker: -1, From: ms(2), To: ms(3)}}, want: []string{"two holders"}},
		{name: "overlap across a failover of this name's primary", holds: []Hold{hold(1, 1, 0, 10), hold(2, 2, 5, 20)},
			faults: []Fault{{Kind: FaultFailover, Worker: -1, Names: []string{"a"}, From: ms(2), To: ms(3)}}, expected: 1},
		{name: "overlap across a failover of another name's primary", holds: []Hold{hold(1, 1, 0, 10), hold(2, 2, 5, 20)},
			faults: []Fault{{Kind: FaultFailover, Worker: -1, Names: []string{"b"}, From: ms(2), To: ms(3)}}, want: []string{"two holders"}},
		{name: "overlap across a coordinated failover", holds: []Hold{hold(1, 1, 0, 10), hold(2, 2, 5, 20)},
			faults: []Fault{{Kind: FaultFailoverManual, Worker: -1, From: ms(2), To: ms(3)}}, want: []string{"two holders"}},
		{name: "reads overlap", holds: []Hold{read(hold(1, 1, 0, 10)), read(hold(2, 2, 5, 20)), read(hold(3, 3, 6, 8))}},
		{name: "write inside a read", holds: []Hold{read(hold(1, 1, 0, 10)), hold(2, 2, 5, 20)}, want: []string{"two holders: w1"}},
		{name: "read inside a write", holds: []Hold{hold(1, 1, 0, 10), read(hold(2, 2, 5, 20))}, want: []string{"two holders: w1"}},
		{name: "write inside the second of two reads", holds: []Hold{read(hold(1, 1, 0, 10)), read(hold(2, 2, 5, 30)), hold(3, 3, 20, 40)},
			want: []string{"two holders: w2"}},
		{name: "read granted first, learned last", holds: []Hold{
			with(read(hold(1, 1, 0, 60)), func(h *Hold) { h.Got = ms(50) }),
			with(read(hold(2, 2, 10, 60)), func(h *Hold) { h.Got = ms(20) }),
			with(read(hold(3, 3, 30, 60)), func(h *Hold) { h.Got = ms(40) })}},
		{name: "fence went back for a hold that asked after a grant it learned late", holds: []Hold{
			with(hold(1, 5, 0, 10), func(h *Hold) { h.Got = ms(9) }), with(hold(2, 4, 11, 20), func(h *Hold) { h.Asked = ms(10) })},
			want: []string{"fence did not grow"}},
		{name: "read fence repeated", holds: []Hold{read(hold(1, 2, 0, 10)), read(hold(2, 2, 5, 20))}, want: []string{"fence did not grow"}},
		{name: "reader taken over by a reader only", holds: []Hold{with(read(hold(1, 1, 0, 10)), func(h *Hold) { h.Lost, h.Cause = ms(5), "taken_over" }), read(hold(2, 2, 3, 20))},
			want: []string{"nobody took it"}},
		{name: "fence repeated", holds: []Hold{hold(1, 2, 0, 10), hold(2, 2, 11, 20)}, want: []string{"fence did not grow"}},
		{name: "fence went back", holds: []Hold{hold(1, 3, 0, 10), hold(2, 2, 11, 20)}, want: []string{"fence did not grow"}},
		{name: "fence went back two holds later", holds: []Hold{hold(1, 5, 0, 10), hold(2, 3, 5, 20), hold(3, 4, 21, 30)},
			faults: []Fault{{Kind: FaultRestartEmpty, Worker: -1, From: ms(2), To: ms(3)}}, expected: 1,
			want: []string{"fence did not grow: w2", "fence did not grow: w3"}},
		{name: "lost update", accesses: []Access{
			{Name: "a", Worker: 1, Fence: 1, Op: "read", Value: 0, OK: true},
			{Name: "a", Worker: 2, Fence: 1, Op: "read", Value: 0, OK: true},
			{Name: "a", Worker: 1, Fence: 1, Op: "write", Read: 0, Value: 0, OK: true},
			{Name: "a", Worker: 2, Fence: 1, Op: "write", Read: 0, Value: 1, OK: true},
		}, want: []string{"lost update"}},
		{name: "stale write refused", accesses: []Access{
			{Name: "a", Worker: 1, Fence: 1, Op: "read", Value: 0, OK: true},
			{Name: "a", Worker: 2, Fence: 2, Op: "read", Value: 0, OK: true},
			{Name: "a", Worker: 2, Fence: 2, Op: "write", Read: 0, Value: 0, OK: true},
			{Name: "a", Worker: 1, Fence: 1, Op: "write", Read: 0, Value: 1, OK: false},
		}},
		{name: "false not held", holds: []Hold{with(hold(1, 1, 0, 10), func(h *Hold) { h.Release = "not_held" })}, want: []string{"Release said not held"}},
		{name: "not held after a Redlock node restarted empty under the release", holds: []Hold{with(hold(1, 1, 0, 10), func(h *Hold) { h.Release, h.Released = "not_held", ms(300) })},
			faults: []Fault{{Kind: FaultNodeKill, Worker: -1, From: ms(5), To: ms(290)}}},
		{name: "not held with a Redlock node restarted before the hold", holds: []Hold{with(hold(1, 1, 400, 410), func(h *Hold) { h.Release, h.Released = "not_held", ms(420) })},
			faults: []Fault{{Kind: FaultNodeKill, Worker: -1, From: ms(5), To: ms(290)}}, want: []string{"Release said not held"}},
		{name: "not held with a Redlock node still down when the release answered", holds: []Hold{with(hold(1, 1, 0, 10), func(h *Hold) { h.Release, h.Released = "not_held", ms(300) })},
			faults: []Fault{{Kind: FaultNodeKill, Worker: -1, From: ms(5), To: ms(900)}}, want: []string{"Release said not held"}},
		// A node down since before the lock was asked granted nothing: its
		// "not ours" (a give-up of the token) with one more node's is a
		// false loss all the same.
		{name: "not held with a Redlock node down since before the ask", holds: []Hold{with(hold(1, 1, 400, 410), func(h *Hold) { h.Release, h.Released = "not_held", ms(420) })},
			faults: []Fault{{Kind: FaultNodeKill, Worker: -1, From: ms(5), To: ms(405)}}, want: []string{"Release said not held"}},
		{name: "overlap across a Redlock node restarted empty", holds: []Hold{hold(1, 1, 0, 10), hold(2, 2, 5, 20)},
			faults: []Fault{{Kind: FaultNodeKill, Worker: -1, From: ms(2), To: ms(3)}}, want: []string{"two holders"}},
		{name: "not held after the deadline", holds: []Hold{with(hold(1, 1, 0, 10), func(h *Hold) { h.Release, h.Final = "not_held", "expired" })}},
		{name: "false taken over", holds: []Hold{with(hold(1, 1, 0, 10), func(h *Hold) { h.Lost, h.Cause = ms(5), "taken_over" })}, want: []string{"nobody took it"}},
		{name: "taken over after a restart", holds: []Hold{with(hold(1, 1, 0, 10), func(h *Hold) { h.Lost, h.Cause = ms(5), "taken_over" }), hold(2, 2, 4, 20)},
			faults: []Fault{{Kind: FaultRestartEmpty, Worker: -1, From: ms(2), To: ms(3)}}, expected: 1},
		{name: "killed holder's lock taken in time", holds: []Hold{with(hold(1, 1, 0, 0), func(h *Hold) { h.Done, h.Died = 0, ms(10) }), hold(2, 2, 500, 520)},
			faults: []Fault{{Kind: FaultKill, Worker: 1, Name: "a", From: ms(9), To: ms(10)}}},
		{name: "killed holder's lock stranded", holds: []Hold{with(hold(1, 1, 0, 0), func(h *Hold) { h.Done, h.Died = 0, ms(10) }), with(hold(2, 2, 900, 920), func(h *Hold) { h.Asked = ms(20) })},
			faults: []Fault{{Kind: FaultKill, Worker: 1, Name: "a", From: ms(9), To: ms(10)}}, want: []string{"taken only"}},
		{name: "stranded lock judged despite a later kill", holds: []Hold{with(hold(1, 1, 0, 0), func(h *Hold) { h.Done, h.Died = 0, ms(10) }), with(hold(3, 1, 0, 5), func(h *Hold) { h.Name = "b" }), with(hold(5, 2, 750, 760), func(h *Hold) { h.Name = "b" })},
			faults: []Fault{{Kind: FaultKill, Worker: 1, Name: "a", From: ms(9), To: ms(10)}, {Kind: FaultKill, Worker: 4, Name: "b", From: ms(700), To: ms(701)}},
			want:   []string{"never taken again"}},
		{name: "context end on record before the kill", holds: []Hold{with(hold(1, 1, 100, 0), func(h *Hold) { h.Done, h.Lost, h.Cause, h.Died = 0, ms(550), "expired", ms(700) }), hold(2, 2, 600, 620), hold(3, 3, 800, 810)},
			faults: []Fault{{Kind: FaultKill, Worker: 1, Name: "a", From: ms(699), To: ms(700)}}},
		{name: "killed holder's lock taken late, but nobody asked before", holds: []Hold{with(hold(1, 1, 0, 0), func(h *Hold) { h.Done, h.Died = 0, ms(10) }), with(hold(2, 2, 700, 720), func(h *Hold) { h.Asked = ms(650) })},
			faults: []Fault{{Kind: FaultKill, Worker: 1, Name: "a", From: ms(9), To: ms(10)}}},
		{name: "killed holder's lock taken long after its taker asked", holds: []Hold{with(hold(1, 1, 0, 0), func(h *Hold) { h.Done, h.Died = 0, ms(10) }), with(hold(2, 2, 900, 920), func(h *Hold) { h.Asked = ms(650) })},
			faults: []Fault{{Kind: FaultKill, Worker: 1, Name: "a", From: ms(9), To: ms(10)}}, want: []string{"taken only"}},
		{name: "killed waiter's lock never taken", holds: []Hold{hold(2, 2, 0, 20)},
			faults: []Fault{{Kind: FaultKill, Worker: 1, Name: "a", From: ms(30), To: ms(31)}}, want: []string{"never taken again"}},
		{name: "overlap by a holder whose token was forced just before its Acquire returned", holds: []Hold{hold(1, 1, 100, 110), hold(2, 2, 105, 120)},
			faults: []Fault{{Kind: FaultForceUnlock, Worker: 1, Name: "a", Names: []string{"a"}, From: ms(98), To: ms(99), Fence: 1}}, expected: 1},
		{name: "overlap of another holder than the forced one", holds: []Hold{hold(1, 1, 100, 110), hold(2, 2, 105, 120)},
			faults: []Fault{{Kind: FaultForceUnlock, Worker: 3, Name: "a", Names: []string{"a"}, From: ms(98), To: ms(99), Fence: 7}}, want: []string{"two holders"}},
		{name: "overlap of the forced worker's next grant", holds: []Hold{hold(2, 5, 300, 400), hold(3, 6, 350, 420)},
			faults: []Fault{{Kind: FaultForceUnlock, Worker: 2, Name: "a", Names: []string{"a"}, From: ms(11), To: ms(12), Fence: 1}}, want: []string{"two holders"}},
		{name: "overlap that began before the force", holds: []Hold{hold(1, 1, 100, 200), hold(2, 2, 150, 220)},
			faults: []Fault{{Kind: FaultForceUnlock, Worker: 1, Name: "a", Names: []string{"a"}, From: ms(160), To: ms(161), Fence: 1}}, want: []string{"two holders"}},
		{name: "wait ran out on a dead token while the forced name was free", holds: []Hold{with(hold(1, 1, 0, 10), func(h *Hold) { h.Released = ms(10) })},
			faults:   []Fault{{Kind: FaultForceUnlock, Worker: 2, Name: "a", Names: []string{"a"}, From: ms(11), To: ms(12), Fence: 2}},
			attempts: []Attempt{{Worker: 2, Name: "a", Asked: ms(5), End: ms(805), Outcome: "busy"}}, want: []string{"was free"}},
		{name: "overlap with a holder whose token was forced before its Acquire returned", holds: []Hold{hold(1, 2, 100, 110), with(hold(2, 1, 101, 120), func(h *Hold) { h.Asked = ms(50) })},
			faults: []Fault{{Kind: FaultForceUnlock, Worker: 2, Name: "a", Names: []string{"a"}, From: ms(98), To: ms(99), Fence: 1}}, expected: 1},
		{name: "wait ran out while the lock was held", holds: []Hold{hold(1, 1, 0, 1000)},
			attempts: []Attempt{{Worker: 2, Name: "a", Asked: ms(5), End: ms(805), Outcome: "busy"}}},
		{name: "wait ended early by an error", holds: []Hold{hold(1, 1, 0, 1000)},
			attempts: []Attempt{{Worker: 2, Name: "a", Asked: ms(5), End: ms(300), Outcome: "failed", Err: "READONLY"}}, want: []string{"false give-up: w2"}},
		{name: "wait ended early as busy", holds: []Hold{hold(1, 1, 0, 1000)},
			attempts: []Attempt{{Worker: 2, Name: "a", Asked: ms(5), End: ms(600), Outcome: "busy"}}, want: []string{"after 595ms of its 800ms wait"}},
		{name: "wait ran out while the lock was free", holds: []Hold{with(hold(1, 1, 0, 10), func(h *Hold) { h.Released = ms(10) })},
			attempts: []Attempt{{Worker: 2, Name: "a", Asked: ms(5), End: ms(805), Outcome: "busy"}}, want: []string{"was free for 795ms"}},
		{name: "wait ran out while the lock was free through a failover", holds: []Hold{with(hold(1, 1, 0, 10), func(h *Hold) { h.Released = ms(10) })},
			faults:   []Fault{{Kind: FaultFailover, Worker: -1, From: ms(100), To: ms(300)}},
			attempts: []Attempt{{Worker: 2, Name: "a", Asked: ms(5), End: ms(805), Outcome: "busy"}}},
		{name: "wait ran out while a killed holder's key lived on", holds: []Hold{with(hold(1, 1, 0, 0), func(h *Hold) { h.Done, h.Release, h.Died = 0, "", ms(10) })},
			attempts: []Attempt{{Worker: 2, Name: "a", Asked: ms(5), End: ms(805), Outcome: "busy"}}},
	}
	for _, c := range cases {
		h := History{Start: 0, Stopping: ms(2000), Stop: ms(2100), TTL: 400 * time.Millisecond, Wait: 800 * time.Millisecond,
			Holds: c.holds, Faults: c.faults, Accesses: c.accesses, Attempts: c.attempts}
		v := Check(h)
		if len(v.Violations) != len(c.want) {
			t.Errorf("%s: %d violations %q, want %d", c.name, len(v.Violations), v.Violations, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(v.Violations[i], w) {
				t.Errorf("%s: violation %q, want one with %q", c.name, v.Violations[i], w)
			}
		}
		n := 0
		for _, k := range v.Expected {
			n += k
		}
		if n != c.expected {
			t.Errorf("%s: %d expected overlaps %v, want %d", c.name, n, v.Expected, c.expected)
		}
	}
}

// TestCheckStaleGrantWithoutPauseIsNotHidden: believed() takes a hold whose
// context had ended at its worker's first look for no holder only when a
// pause of that worker between Asked and Got explains it (a lease that ran
// out while the worker was stopped between Acquire's return and its first
// look). Without such a pause the hold means Acquire returned a lock already
// over (acquire.go's late check, or handedOver's refresh, missed it): it is
// judged as any other hold, and shows in the verdict, as a violation or an
// Expected count, not hidden without a trace.
func TestCheckStaleGrantWithoutPauseIsNotHidden(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	hold := func(w int, fence, from, to int64) Hold {
		return Hold{Worker: w, Name: "a", Fence: fence, Asked: ms(from), Got: ms(from), Done: ms(to), Release: "ok", Final: "released"}
	}
	stale := hold(2, 2, 5, 20)
	stale.Lost, stale.Cause = stale.Got, "expired"
	for _, permits := range []int{0, 1} {
		h := History{Stopping: ms(2000), Stop: ms(2100), TTL: 400 * time.Millisecond, Permits: permits,
			Holds: []Hold{hold(1, 1, 0, 10), stale}}
		v := Check(h)
		if len(v.Violations) == 0 && len(v.Expected) == 0 {
			t.Errorf("permits %d: a hold ended at its first look with no pause of its worker vanished from the verdict: %s", permits, v.Summary())
		}
	}
}

// TestFinalOfReadsOnlyALateValidity: a Release error moves a hold's Final
// off "released" only when it says the nodes answered after the validity
// (redlock.ErrReleasedLate); a plain "not held", or one that wraps a loss,
// keeps the context's cause, so the checker still judges it.
func TestFinalOfReadsOnlyALateValidity(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(dlock.ErrReleased)
	late := fmt.Errorf("%w: released on 1 of 3 nodes (%w)", dlock.ErrNotHeld, redlock.ErrReleasedLate)
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "released"},
		{dlock.ErrNotHeld, "released"},
		{fmt.Errorf("%w: lost before the release (%v)", dlock.ErrNotHeld, dlock.ErrLockLost), "released"},
		{fmt.Errorf("%w: lost before the release (%w)", dlock.ErrNotHeld, dlock.ErrLockLost), "released"},
		{late, "expired"},
	} {
		if got := finalOf(ctx, c.err); got != c.want {
			t.Errorf("finalOf(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
