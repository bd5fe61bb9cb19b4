package torture

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestInProcessSharedFaults mixes read and write locks under every kind of
// client-side fault, two goroutines on each Client: no write may overlap any
// other hold, reads may overlap reads, and fences grow.
func TestInProcessSharedFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("torture: seconds per seed")
	}
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	d := 3 * time.Second
	seeds := inProcessSeeds(t)
	for _, seed := range seeds[:min(2, len(seeds))] {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d; rerun it alone: %s=%d go test -race -count=1 -run InProcessSharedFaults ./internal/torture/", seed, seedEnv, seed)
			h, err := RunInProcess(context.Background(), lockSrv.Addr, resSrv.Addr, seed, d, InProcessOptions{Shared: 0.6, Workers: 3, PerClient: 2})
			if err != nil {
				t.Fatal(err)
			}
			v := Check(h)
			logVerdict(t, h, v)
			reads, overlapped := sharedStats(h)
			t.Logf("%d reads, %d of them overlapping another read", reads, overlapped)
			if reads == 0 || reads == v.Holds {
				t.Errorf("%d reads of %d holds: want both kinds", reads, v.Holds)
			}
			if overlapped == 0 {
				t.Errorf("no two reads overlapped: the run did not exercise sharing")
			}
			reportViolations(t, h, v, seed)
		})
	}
}

// TestInProcessSharedCheckerBites runs the same loop with writes that take
// read locks: Check must see writers overlap.
func TestInProcessSharedCheckerBites(t *testing.T) {
	if testing.Short() {
		t.Skip("torture: seconds")
	}
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	h, err := RunInProcess(context.Background(), lockSrv.Addr, resSrv.Addr, 7, 2*time.Second,
		InProcessOptions{Shared: 0.5, WritesShared: true, NoFaults: true})
	if err != nil {
		t.Fatal(err)
	}
	v := Check(h)
	logVerdict(t, h, v)
	if len(v.Violations) == 0 {
		t.Fatalf("writes under read locks ran %d holds and Check found no violation", v.Holds)
	}
	t.Logf("first violation: %s", v.Violations[0])
}

// sharedStats counts the reads of h and those that overlapped another read.
func sharedStats(h History) (reads, overlapped int) {
	for i, a := range h.Holds {
		if !a.Shared {
			continue
		}
		reads++
		for j, b := range h.Holds {
			if i != j && b.Shared && b.Name == a.Name && b.Got < a.End(h.Stop) && a.Got < b.End(h.Stop) {
				overlapped++
				break
			}
		}
	}
	return reads, overlapped
}
