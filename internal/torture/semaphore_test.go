package torture

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// The crowd check on hand-made histories of a name with 2 permits.
func TestCheckCountsPermits(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	hold := func(w int, fence, from, to int64) Hold {
		return Hold{Worker: w, Name: "a", Fence: fence, Asked: ms(from), Got: ms(from), Done: ms(to), Release: "ok", Final: "released"}
	}
	with := func(h Hold, f func(*Hold)) Hold { f(&h); return h }
	for _, tc := range []struct {
		name     string
		holds    []Hold
		faults   []Fault
		want     int
		expected int
		fence    bool // the violation is a fence, not a crowd
	}{
		{name: "two at once", holds: []Hold{hold(1, 1, 0, 10), hold(2, 2, 5, 20)}},
		{name: "three at once", holds: []Hold{hold(1, 1, 0, 10), hold(2, 2, 5, 20), hold(3, 3, 6, 8)}, want: 1},
		{name: "three in a row, two at a time", holds: []Hold{hold(1, 1, 0, 10), hold(2, 2, 5, 20), hold(3, 3, 11, 30)}},
		{name: "three at once, one paused past its lease", holds: []Hold{hold(1, 1, 0, 10), hold(2, 2, 5, 20), hold(3, 3, 6, 8)},
			faults: []Fault{{Kind: FaultPause, Worker: 1, From: ms(1), To: ms(4)}}, expected: 1},
		// w7 asked first and was granted its permit early (fence 2), but
		// learned of it late (paused): holds that got after it asked, with
		// larger fences, are no fence going back.
		{name: "a grant learned late", holds: []Hold{
			with(hold(7, 2, 0, 60), func(h *Hold) { h.Got = ms(50) }), hold(2, 1, 1, 3),
			with(hold(1, 3, 20, 31), func(h *Hold) { h.Got = ms(30) }), with(hold(3, 4, 40, 46), func(h *Hold) { h.Got = ms(45) })}},
		// w3 was granted before the others and stopped between Acquire's
		// return and its first look, past its lease: the context had ended
		// by then (Lost at Got), so it never held a third permit.
		{name: "a third whose context had ended at its first look", holds: []Hold{hold(1, 1, 0, 10), hold(2, 2, 5, 20),
			with(hold(3, 3, 6, 8), func(h *Hold) { h.Asked, h.Lost, h.Cause = 0, h.Got, "expired" })},
			faults: []Fault{{Kind: FaultPause, Worker: 3, From: ms(1), To: ms(5)}}, expected: 1},
		{name: "a third whose context had ended at its first look, no pause", holds: []Hold{hold(1, 1, 0, 10), hold(2, 2, 5, 20),
			with(hold(3, 3, 6, 8), func(h *Hold) { h.Asked, h.Lost, h.Cause = 0, h.Got, "expired" })}, want: 1},
		{name: "a fence going back", holds: []Hold{hold(1, 3, 0, 10), hold(2, 2, 11, 20)}, want: 1, fence: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Check(History{Stop: ms(100), TTL: 500 * time.Millisecond, Permits: 2, Holds: tc.holds, Faults: tc.faults})
			if len(v.Violations) != tc.want || len(v.Expected) != tc.expected {
				t.Fatalf("violations %q, expected %v; want %d and %d", v.Violations, v.Expected, tc.want, tc.expected)
			}
			for _, s := range v.Violations {
				if tc.fence && !strings.Contains(s, "fence did not grow") || !tc.fence && !strings.Contains(s, "3 holders of 2 permits") {
					t.Fatalf("violation %q does not count the holders", s)
				}
			}
		})
	}
}

// mostAtOnce is the largest number of holds of one name that believed in
// their permits at the same time.
func mostAtOnce(h History) int {
	type ev struct {
		at int64
		d  int
	}
	var evs []ev
	for _, x := range h.Holds {
		evs = append(evs, ev{x.Got, 1}, ev{x.End(h.Stop), -1})
	}
	slices.SortFunc(evs, func(a, b ev) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.d, b.d)) })
	most, n := 0, 0
	for _, e := range evs {
		n += e.d
		most = max(most, n)
	}
	return most
}

// The semaphore scenario, briefly: dlock never lets more than 3 holders in,
// and does let 3 in together (else the run proved nothing); the racy
// semaphore is caught.
func TestSemaphoreScenario(t *testing.T) {
	sc := semaphoreScenario(6 * time.Second)
	seed := uint64(time.Now().UnixNano())
	h, err := Run(context.Background(), testEnv(t, seed), sc)
	if err != nil {
		t.Fatal(err)
	}
	v := Check(h)
	t.Logf("seed %d: %s; faults %v; attempts %v; at most %d at once", seed, v.Summary(), v.Faults, v.Attempts, mostAtOnce(h))
	for _, s := range v.Violations[:min(len(v.Violations), 10)] {
		t.Error(s)
	}
	if len(v.Violations) > 0 {
		dump(t, h)
	}
	checkInjected(t, sc, v)
	if got := mostAtOnce(h); got < sc.Permits {
		t.Errorf("at most %d holders at once: the %d permits were never all in use", got, sc.Permits)
	}
}

func TestSemRacyCaught(t *testing.T) {
	sc := semaphoreScenario(4 * time.Second)
	sc.Lock, sc.Faults = LockSemRacy, nil // contention alone exposes it
	for run := 1; run <= 3; run++ {
		seed := uint64(time.Now().UnixNano())
		env := testEnv(t, seed)
		env.Progress = nil
		h, err := Run(context.Background(), env, sc)
		if err != nil {
			t.Fatal(err)
		}
		v := Check(h)
		t.Logf("run %d, seed %d: %s", run, seed, v.Summary())
		for _, s := range v.Violations {
			if strings.Contains(s, "holders of 3 permits") {
				t.Logf("caught: %s", s)
				return
			}
		}
	}
	t.Error("the racy semaphore was not caught in three runs: the checker cannot tell it from a correct one")
}
