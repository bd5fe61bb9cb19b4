package lease

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The heap pops slots in time order, whatever order they were pushed in,
// also after init orders an unordered array (compact).
func TestSlotHeapPopsInTimeOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 7, 100, 1000} {
		var h slotHeap
		want := make([]int64, 0, n)
		for range n {
			at := rng.Int64N(50) // repeats on purpose
			h.push(slot{at: at})
			want = append(want, at)
		}
		slices.Sort(want)
		for i, w := range want {
			if got := h.pop().at; got != w {
				t.Fatalf("n=%d: pop %d gave %d, want %d", n, i, got, w)
			}
		}
		if len(h) != 0 {
			t.Fatalf("n=%d: %d left after popping all", n, len(h))
		}
		raw := make(slotHeap, n)
		for i := range raw {
			raw[i].at = rng.Int64N(1000)
		}
		sorted := make([]int64, n)
		for i, s := range raw {
			sorted[i] = s.at
		}
		slices.Sort(sorted)
		raw.init()
		for i, w := range sorted {
			if got := raw.pop().at; got != w {
				t.Fatalf("n=%d after init: pop %d gave %d, want %d", n, i, got, w)
			}
		}
	}
}

type stubHolder struct{ id int }

func (stubHolder) Renewal(time.Time) ([]Part, Round, bool) { return nil, nil, false }

// A rescheduled entry is renewed once, at its last time; a forgotten one
// not at all; stale slots are dropped, and compacted away before they
// outnumber the live ones, so that a lock refreshed in a loop does not
// grow the heap.
func TestRenewerRescheduleAndForgetLeaveOneLiveSlot(t *testing.T) {
	r := NewRenewer()
	// No loop: the test takes the due holders itself. Schedule starts
	// one only when none runs.
	r.running = true
	schedule := r.Schedule
	now := time.Now()
	const n = 200
	entries := make([]Entry, n)
	for i := range entries {
		schedule(&entries[i], stubHolder{i}, now.Add(time.Hour))
	}
	// Each entry rescheduled many times, the last time into the past (due
	// now) for the even ones; the odd ones forgotten.
	for round := range 10 {
		for i := range entries {
			at := now.Add(time.Duration(round+2) * time.Hour)
			if round == 9 && i%2 == 0 {
				at = now.Add(-time.Duration(i) * time.Millisecond)
			}
			schedule(&entries[i], stubHolder{i}, at)
		}
	}
	for i := 1; i < n; i += 2 {
		r.Forget(&entries[i])
	}
	if got := r.Scheduled(); got != n/2 {
		t.Fatalf("Scheduled() = %d, want %d", got, n/2)
	}
	r.mu.Lock()
	size := len(r.due)
	r.mu.Unlock()
	if size > 2*(n/2)+65 {
		t.Fatalf("heap holds %d slots for %d live entries: stale slots not compacted", size, n/2)
	}
	due := r.takeDue()
	if len(due) != n/2 {
		t.Fatalf("takeDue gave %d holders, want the %d even ones once each", len(due), n/2)
	}
	seen := map[int]bool{}
	last := n
	for _, h := range due {
		id := h.(stubHolder).id
		if id%2 != 0 || seen[id] {
			t.Fatalf("takeDue gave holder %d (odd: forgotten; or twice)", id)
		}
		seen[id] = true
		if id > last { // due at now-id ms: the larger id first
			t.Fatalf("holder %d came after %d: not in time order", id, last)
		}
		last = id
	}
	if got := r.Scheduled(); got != 0 {
		t.Fatalf("Scheduled() = %d after taking all due, want 0", got)
	}
	r.Close()
}
