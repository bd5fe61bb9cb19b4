package torture

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestFailoverScenarios runs the failover scenarios for 18 s each on a fresh
// topology: Sentinel with two replicas (one is still in sync, and known to
// the sentinels, while the killed primary resyncs as a replica), Cluster with
// one replica per primary. They take about a minute and a half and six to
// ten Redis processes, so only the full profile runs them.
func TestFailoverScenarios(t *testing.T) {
	if os.Getenv("TORTURE_FULL") != "1" {
		t.Skip("failover scenarios are in the full torture profile only: `make torture` runs them (it sets TORTURE_FULL=1)")
	}
	for _, sc := range FailoverScenarios(18 * time.Second) {
		t.Run(sc.Name, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			env := testEnv(t, seed)
			switch sc.Topology {
			case "sentinel":
				env.Sentinel = redistest.StartSentinel(t, redistest.WithReplicas(2))
			case "cluster":
				env.Cluster = redistest.StartCluster(t)
			}
			h, err := Run(context.Background(), env, sc)
			if err != nil {
				if env.Sentinel != nil {
					env.Sentinel.DumpLogs(t, 20)
				}
				if env.Cluster != nil {
					env.Cluster.DumpLogs(t, 20)
				}
				t.Fatal(err)
			}
			v := Check(h)
			t.Logf("seed %d: %s; faults %v; attempts %v", seed, v.Summary(), v.Faults, v.Attempts)
			if v.Faults[FaultFailover] < 2 {
				t.Errorf("%d failovers in %v, want at least 2", v.Faults[FaultFailover], sc.Duration)
			}
			for _, s := range v.Violations[:min(len(v.Violations), 10)] {
				t.Error(s)
			}
		})
	}
}
