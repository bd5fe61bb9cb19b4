package torture

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// seedEnv reruns one seed: TORTURE_SEED=123 go test -race -run InProcess ./internal/torture/
const seedEnv = "TORTURE_SEED"

// fixedSeeds run every time; two random ones join them.
var fixedSeeds = []uint64{1, 2, 3, 4}

func inProcessSeeds(t *testing.T) []uint64 {
	if s := os.Getenv(seedEnv); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, s, err)
		}
		return []uint64{seed}
	}
	return append(slices.Clone(fixedSeeds), rand.Uint64(), rand.Uint64())
}

// TestInProcessFaults runs dlock under every kind of client-side fault, for
// each seed, and wants no violation.
func TestInProcessFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("torture: seconds per seed")
	}
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	d := 3 * time.Second
	for _, seed := range inProcessSeeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d; rerun it alone: %s=%d go test -race -count=1 -run InProcessFaults ./internal/torture/", seed, seedEnv, seed)
			h, err := RunInProcess(context.Background(), lockSrv.Addr, resSrv.Addr, seed, d, InProcessOptions{})
			if err != nil {
				t.Fatal(err)
			}
			v := Check(h)
			logVerdict(t, h, v)
			for _, kind := range []string{FaultDelay, FaultDuplicate, FaultDrop, FaultReorder, FaultPubSub} {
				if v.Faults[kind] == 0 {
					t.Errorf("no %s fault injected", kind)
				}
			}
			if v.Holds < 40 { // under -race on 2 busy cores, 27–70 holds/s
				t.Errorf("only %d acquisitions in %v", v.Holds, d)
			}
			if len(h.Accesses) == 0 {
				t.Errorf("the resource recorded no access")
			}
			reportViolations(t, h, v, seed)
		})
	}
}

// TestInProcessCheckerBites plants a broken lock (SET NX PX, bare DEL, no
// renewal) in the same loop: Check must see its holders overlap.
func TestInProcessCheckerBites(t *testing.T) {
	if testing.Short() {
		t.Skip("torture: seconds")
	}
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	h, err := RunInProcess(context.Background(), lockSrv.Addr, resSrv.Addr, 7, 2*time.Second, InProcessOptions{Naive: true})
	if err != nil {
		t.Fatal(err)
	}
	v := Check(h)
	logVerdict(t, h, v)
	if len(v.Violations) == 0 {
		t.Fatalf("the naive lock ran %d holds and Check found no violation", v.Holds)
	}
	t.Logf("first violation: %s", v.Violations[0])
	if v.Rejected == 0 {
		t.Errorf("no fenced access rejected: the overlapping holders never met at the resource")
	}
}

func logVerdict(t *testing.T, h History, v Verdict) {
	t.Helper()
	secs := time.Duration(h.Stop - h.Start).Seconds()
	var faults []string
	for _, k := range slices.Sorted(maps.Keys(v.Faults)) {
		faults = append(faults, fmt.Sprintf("%s %d", k, v.Faults[k]))
	}
	var lost []string
	causes := map[string]int{}
	releases := map[string]int{}
	for _, x := range h.Holds {
		if x.Lost != 0 {
			causes[x.Cause]++
		}
		releases[x.Release]++
	}
	for _, k := range slices.Sorted(maps.Keys(causes)) {
		lost = append(lost, fmt.Sprintf("%s %d", k, causes[k]))
	}
	t.Logf("%s; %.0f holds/s; attempts %v; releases %v; lost in the hold: [%s]; faults: [%s]; accesses %d",
		v.Summary(), float64(v.Holds)/secs, v.Attempts, releases, strings.Join(lost, ", "), strings.Join(faults, ", "), len(h.Accesses))
}

// logAround prints the holds and faults of the names that have violations,
// for a first look at the interleaving.
func logAround(t *testing.T, h History, v Verdict) {
	t.Helper()
	if os.Getenv("TORTURE_DUMP") == "" {
		t.Logf("TORTURE_DUMP=1 prints every hold and fault")
		return
	}
	ms := func(x int64) string {
		if x == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", float64(x-h.Start)/1e6)
	}
	holds := slices.Clone(h.Holds)
	slices.SortFunc(holds, func(a, b Hold) int { return int(a.Got - b.Got) })
	for _, x := range holds {
		t.Logf("hold w%d#%d %s shared %v fence %d asked %s got %s done %s lost %s cause %s release %s final %s at %s rd %s wr %s",
			x.Worker, x.Seq, x.Name, x.Shared, x.Fence, ms(x.Asked), ms(x.Got), ms(x.Done), ms(x.Lost), x.Cause, x.Release, x.Final, ms(x.Released), x.Read, x.Write)
	}
	for _, f := range h.Faults {
		t.Logf("fault %s w%d %s [%s, %s] %s", f.Kind, f.Worker, f.Name, ms(f.From), ms(f.To), f.Note)
	}
}

// reportViolations fails t with the first 20 of v's violations of the run
// of seed, and logs the history around them.
func reportViolations(t *testing.T, h History, v Verdict, seed uint64) {
	t.Helper()
	for i, s := range v.Violations {
		if i == 20 {
			t.Errorf("... and %d more", len(v.Violations)-i)
			break
		}
		t.Errorf("seed %d: %s", seed, s)
	}
	if len(v.Violations) > 0 {
		logAround(t, h, v)
	}
}
