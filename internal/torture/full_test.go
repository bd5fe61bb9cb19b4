package torture

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestFullProfile is `make torture`: every scenario for 50 s, failovers of
// Sentinel and Cluster included, and the table for docs/torture.md written to
// $TORTURE_TABLE. It runs only when TORTURE_FULL=1: it takes about 12
// minutes.
func TestFullProfile(t *testing.T) {
	if os.Getenv("TORTURE_FULL") != "1" {
		t.Skip("the full profile runs with TORTURE_FULL=1 (make torture); make test runs the short one")
	}
	seed := uint64(time.Now().UnixNano())
	var results []Result
	for _, sc := range FullProfile() {
		t.Run(sc.Name, func(t *testing.T) {
			start := time.Now()
			env := testEnv(t, seed)
			env.Progress = os.Stderr
			// Sentinel with two replicas: one is still in sync, and known
			// to the sentinels, while the killed primary resyncs.
			switch sc.Topology {
			case "sentinel":
				env.Sentinel = redistest.StartSentinel(t, redistest.WithReplicas(2))
			case "cluster":
				env.Cluster = redistest.StartCluster(t)
			}
			fmt.Fprintf(os.Stderr, "torture: %s, %v\n", sc.Name, sc.Duration)
			h, err := Run(context.Background(), env, sc)
			if err != nil {
				t.Fatal(err)
			}
			v := Check(h)
			results = append(results, Result{Scenario: sc, Seed: seed, Verdict: v, Elapsed: time.Since(start)})
			t.Logf("%s", v.Summary())
			for _, s := range v.Violations[:min(len(v.Violations), 10)] {
				t.Error(s)
			}
			if len(v.Violations) > 0 {
				dump(t, h)
			}
			checkInjected(t, sc, v)
		})
	}
	// The seeded in-process injection, ten seeds in one row, then the lock
	// family's in-process runs (read-write, sets, min hold), five seeds each.
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	for _, row := range []struct {
		name  string
		seeds uint64
		opts  InProcessOptions
	}{
		{"in-process", 10, InProcessOptions{}},
		{"in-process read-write", 5, InProcessOptions{Shared: 0.6, Workers: 3, PerClient: 2}},
		{"in-process sets", 5, InProcessOptions{Sets: true, Names: 4, Workers: 3, PerClient: 2}},
		{"in-process min-hold", 5, InProcessOptions{MinHold: 150 * time.Millisecond, Workers: 3, PerClient: 2}},
	} {
		t.Run(row.name, func(t *testing.T) {
			start := time.Now()
			var v Verdict
			const d = 5 * time.Second
			for i := range row.seeds {
				s := seed + i
				fmt.Fprintf(os.Stderr, "torture: %s seed %d, %v\n", row.name, s, d)
				h, err := RunInProcess(context.Background(), lockSrv.Addr, resSrv.Addr, s, d, row.opts)
				if err != nil {
					t.Fatal(err)
				}
				one := Check(h)
				for _, x := range one.Violations {
					t.Errorf("seed %d: %s", s, x)
				}
				v.Add(one)
			}
			name := fmt.Sprintf("%s, %d seeds × %v", row.name, row.seeds, d)
			results = append(results, Result{Scenario: Scenario{Name: name}, Seed: seed, Verdict: v, Elapsed: time.Since(start)})
			t.Logf("%s", v.Summary())
		})
	}
	var b bytes.Buffer
	WriteTable(&b, results)
	fmt.Print(b.String())
	if p := os.Getenv("TORTURE_TABLE"); p != "" {
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
