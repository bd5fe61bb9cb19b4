package torture

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestInProcessSetFaults takes overlapping sets of 2–3 names out of 4 with
// dlock.AcquireAll, given in random order, under every kind of client-side
// fault, two goroutines on each Client: no two holders of any name may
// overlap, fences grow, and no set deadlocks: every worker comes back
// within the run's bound, and most sets are granted.
func TestInProcessSetFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("torture: seconds per seed")
	}
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	d := 3 * time.Second
	opts := InProcessOptions{Sets: true, Names: 4, Workers: 3, PerClient: 2}
	seeds := inProcessSeeds(t)
	for _, seed := range seeds[:min(2, len(seeds))] {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d; rerun it alone: %s=%d go test -race -count=1 -run InProcessSetFaults ./internal/torture/", seed, seedEnv, seed)
			start := time.Now()
			h, err := RunInProcess(context.Background(), lockSrv.Addr, resSrv.Addr, seed, d, opts)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			v := Check(h)
			logVerdict(t, h, v)
			sets, waited := setStats(h)
			t.Logf("%d sets granted (%d name holds), %d of them after waiting for another set holding one of their names; run took %v",
				sets, v.Holds, waited, took.Round(time.Millisecond))
			// The bound RunInProcess promises: d, a whole wait, the longest
			// work (1.5 TTL), two release timeouts of a second, and 1 s of
			// slack for the race detector on a loaded machine. A deadlock
			// of two sets would not pass it: AcquireAll's wait bounds it, but
			// every set would then time out.
			o := opts.withDefaults(seed)
			if bound := d + o.Wait + o.TTL*3/2 + 2*time.Second + time.Second; took > bound {
				t.Errorf("the run took %v, past its bound %v: a worker hung", took, bound)
			}
			if why := stuck(sets, v.Attempts["busy"]); why != "" {
				t.Error(why)
			}
			if waited == 0 {
				t.Errorf("no set waited for another: the run did not exercise overlapping sets")
			}
			reportViolations(t, h, v, seed)
		})
	}
}

// TestInProcessSetCheckerBites runs the same loop with sets that leave out
// the last name given, yet work as if they held it: Check must see two
// holders of a name.
func TestInProcessSetCheckerBites(t *testing.T) {
	if testing.Short() {
		t.Skip("torture: seconds")
	}
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	h, err := RunInProcess(context.Background(), lockSrv.Addr, resSrv.Addr, 7, 2*time.Second,
		InProcessOptions{Sets: true, SetsSkipOne: true, Names: 4, Workers: 3, PerClient: 2, NoFaults: true})
	if err != nil {
		t.Fatal(err)
	}
	v := Check(h)
	logVerdict(t, h, v)
	overlaps := 0
	for _, s := range v.Violations {
		if strings.HasPrefix(s, "two holders") {
			overlaps++
		}
	}
	t.Logf("%d violations, %d of them two holders of a name", len(v.Violations), overlaps)
	if overlaps == 0 {
		t.Fatalf("sets that skip a name ran %d holds and Check found no two holders (%d other violations)", v.Holds, len(v.Violations))
	}
	for _, s := range v.Violations {
		if strings.HasPrefix(s, "two holders") {
			t.Logf("first: %s", s)
			break
		}
	}
}

// TestInProcessSetDeadlockBites takes the sets name by name in the order
// given: sets that meet in opposite orders wait for each other until their
// waits run out, and the test's deadlock check must say so.
func TestInProcessSetDeadlockBites(t *testing.T) {
	if testing.Short() {
		t.Skip("torture: seconds")
	}
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	h, err := RunInProcess(context.Background(), lockSrv.Addr, resSrv.Addr, 7, 3*time.Second,
		InProcessOptions{Sets: true, SetsGivenOrder: true, Names: 4, Workers: 3, PerClient: 2, NoFaults: true})
	if err != nil {
		t.Fatal(err)
	}
	v := Check(h)
	logVerdict(t, h, v)
	sets, _ := setStats(h)
	why := stuck(sets, v.Attempts["busy"])
	t.Logf("%d sets granted, %d timed out: %q", sets, v.Attempts["busy"], why)
	if why == "" {
		t.Fatalf("sets taken in the order given were not seen stuck")
	}
}

// stuck says why a run's sets did not get through, or "": each set that
// timed out waited a whole wait (800 ms) in a run where a set takes a few
// ms, so timeouts beyond half the sets granted mean sets waited for each
// other, not for work. Measured: dlock under faults, 0–5 timeouts for 50–110
// sets; sets in the order given, about ten timeouts for each set granted.
func stuck(sets, busy int) string {
	if sets == 0 || busy*2 > sets {
		return fmt.Sprintf("%d sets granted, %d timed out: sets wait for each other (deadlock)", sets, busy)
	}
	return ""
}

// setStats counts the sets granted in h (a worker's holds of one Seq) and
// those that waited: asked while a set of another worker held one of their
// names, and got it after that set let go.
func setStats(h History) (sets, waited int) {
	type key struct{ w, q int }
	seen := map[key]bool{}
	waitedFor := map[key]bool{}
	for _, b := range h.Holds {
		k := key{b.Worker, b.Seq}
		seen[k] = true
		for _, a := range h.Holds {
			if a.Name == b.Name && a.Worker != b.Worker && a.Got <= b.Asked && b.Asked < a.End(h.Stop) && a.End(h.Stop) <= b.Got {
				waitedFor[k] = true
				break
			}
		}
	}
	return len(seen), len(waitedFor)
}
