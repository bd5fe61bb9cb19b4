package torture

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestInProcessMinHoldFaults runs holders with dlock.WithMinHold and work far
// shorter than it under every kind of client-side fault: no holder of a name
// may get in before the grant before it plus the min hold, and exclusion,
// fences and the resource's chain hold as ever.
func TestInProcessMinHoldFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("torture: seconds per seed")
	}
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	d := 3 * time.Second
	seeds := inProcessSeeds(t)
	for _, seed := range seeds[:min(2, len(seeds))] {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d; rerun it alone: %s=%d go test -race -count=1 -run InProcessMinHoldFaults ./internal/torture/", seed, seedEnv, seed)
			h, err := RunInProcess(context.Background(), lockSrv.Addr, resSrv.Addr, seed, d,
				InProcessOptions{MinHold: 150 * time.Millisecond, Workers: 3, PerClient: 2})
			if err != nil {
				t.Fatal(err)
			}
			v := Check(h)
			logVerdict(t, h, v)
			early, tight := minHoldStats(h)
			t.Logf("%d holds released before their min hold; %d next holders got in within 50ms of the min hold's earliest end", early, tight)
			if early == 0 {
				t.Errorf("no hold released before its min hold: the run did not exercise it")
			}
			reportViolations(t, h, v, seed)
		})
	}
}

// TestInProcessMinHoldCheckerBites records a min hold the acquisitions never
// asked for: Check must see holders let in before it ended.
func TestInProcessMinHoldCheckerBites(t *testing.T) {
	if testing.Short() {
		t.Skip("torture: seconds")
	}
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	h, err := RunInProcess(context.Background(), lockSrv.Addr, resSrv.Addr, 7, 2*time.Second,
		InProcessOptions{MinHold: 150 * time.Millisecond, MinHoldUnasked: true, Workers: 3, PerClient: 2, NoFaults: true})
	if err != nil {
		t.Fatal(err)
	}
	v := Check(h)
	logVerdict(t, h, v)
	cut := 0
	for _, s := range v.Violations {
		if strings.HasPrefix(s, "min hold cut short") {
			if cut == 0 {
				t.Logf("first: %s", s)
			}
			cut++
		}
	}
	t.Logf("%d violations, %d of them a min hold cut short", len(v.Violations), cut)
	if cut == 0 {
		t.Fatalf("holders without a min hold ran %d holds and Check found none let in early", v.Holds)
	}
}

// minHoldStats counts the holds of h released before their min hold, and
// the holds that got their lock within 50 ms of the earliest end the check
// allows after the grant before (by fence).
func minHoldStats(h History) (early, tight int) {
	last := map[string]Hold{}
	for _, x := range sortedByFence(h.Holds) {
		if x.Done != 0 && x.Done-x.Got < int64(h.MinHold) {
			early++
		}
		if a, ok := last[x.Name]; ok && x.Got-(a.Asked+int64(h.MinHold)) < int64(50*time.Millisecond) {
			tight++
		}
		last[x.Name] = x
	}
	return early, tight
}
