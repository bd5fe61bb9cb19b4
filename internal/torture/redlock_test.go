package torture

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRedlockQuorumOneCaught: the checker bites on the Redlock scenario.
// LockRedlockQuorum1, a quorum of one node, runs under the scenario's
// nemesis (nodes stopped, killed, restarted empty) and must show two
// holders in one of up to three runs, each logged with its seed; the same
// scenario with LockRedlock runs at zero violations in TestShortProfile.
// Four names, whose home nodes (n0: 0, n1 and n2: 1, n3: 2) cover the
// three nodes, so that every fault lands on a home node, and a third of
// the critical sections longer than the TTL, so that a holder is in one
// when it does: a short hold ends before a waiter gets around the fault.
// One run caught it 4 times in 5 at 6 s (the first version, with go-redis'
// retries waiting out most stops, 0 times in 3): 8 s, up to three runs.
func TestRedlockQuorumOneCaught(t *testing.T) {
	sc := RedlockScenarios(8 * time.Second)[0]
	sc.Lock, sc.Names, sc.Long = LockRedlockQuorum1, 4, 0.3
	for run := 1; run <= 3; run++ {
		seed := uint64(time.Now().UnixNano())
		env := testEnv(t, seed)
		env.Progress = nil
		h, err := Run(context.Background(), env, sc)
		if err != nil {
			t.Fatal(err)
		}
		v := Check(h)
		t.Logf("run %d, seed %d: %s; faults %v", run, seed, v.Summary(), v.Faults)
		for _, s := range v.Violations {
			if strings.Contains(s, "two holders") {
				t.Logf("caught (%d violations): %s", len(v.Violations), s)
				return
			}
		}
	}
	t.Errorf("%s under %q: no two holders in three runs: the checker cannot tell a quorum of one from a Redlock", sc.Lock, sc.Name)
}
