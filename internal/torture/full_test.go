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
// Sentinel and Cluster included, and the table for the README written to
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
	// The seeded in-process injection, ten seeds in one row.
	t.Run("in-process", func(t *testing.T) {
		lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
		start := time.Now()
		var v Verdict
		const seeds, d = 10, 5 * time.Second
		for i := range uint64(seeds) {
			s := seed + i
			fmt.Fprintf(os.Stderr, "torture: in-process seed %d, %v\n", s, d)
			h, err := RunInProcess(context.Background(), lockSrv.Addr, resSrv.Addr, s, d, InProcessOptions{})
			if err != nil {
				t.Fatal(err)
			}
			one := Check(h)
			for _, x := range one.Violations {
				t.Errorf("seed %d: %s", s, x)
			}
			v.Add(one)
		}
		name := fmt.Sprintf("in-process, %d seeds × %v", seeds, d)
		results = append(results, Result{Scenario: Scenario{Name: name}, Seed: seed, Verdict: v, Elapsed: time.Since(start)})
		t.Logf("%s", v.Summary())
	})
	var b bytes.Buffer
	WriteTable(&b, results)
	fmt.Print(b.String())
	if p := os.Getenv("TORTURE_TABLE"); p != "" {
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
