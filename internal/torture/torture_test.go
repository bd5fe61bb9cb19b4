package torture

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) {
	if IsWorker() {
		os.Exit(WorkerMain())
	}
	goleak.VerifyTestMain(m)
}

// testEnv runs workers as this test binary.
func testEnv(t *testing.T, seed uint64) Env {
	return Env{Worker: []string{os.Args[0], "-test.run=^$"}, Dir: t.TempDir(), Seed: seed, Progress: testWriter{t}}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b[:len(b)-1])); return len(b), nil }

func TestShortProfile(t *testing.T) {
	for _, sc := range ShortProfile() {
		t.Run(sc.Name, func(t *testing.T) {
			runChecked(t, testEnv(t, uint64(time.Now().UnixNano())), sc)
		})
	}
}

// TestFailoverDuringWaits is the short profile's failover row: the
// Sentinel primary killed while workers wait for its names, and promoted
// (connections refused until the clients find the new primary, about 3 s),
// again and again. Every wait rides the failover out: no Acquire returns
// before its wait ran out (Check's giveUps; before waits rode out outages,
// each failover ended every wait at its first refused dial), and the next
// grant after a failover's end is logged.
func TestFailoverDuringWaits(t *testing.T) {
	scs := FailoverScenarios(12 * time.Second)
	sc := scs[slices.IndexFunc(scs, func(s Scenario) bool { return s.Name == "sentinel-failover" })]
	env := testEnv(t, uint64(time.Now().UnixNano()))
	env.Sentinel = redistest.StartSentinel(t, redistest.WithReplicas(2))
	v := runChecked(t, env, sc)
	if len(v.FaultGrants) == 0 {
		t.Error("no lock was granted after any failover's end")
	}
}

// runChecked runs sc, fails the test on every violation (the history goes
// to $TORTURE_DUMP), and checks that the run injected its faults and
// exercised what the scenario is about.
func runChecked(t *testing.T, env Env, sc Scenario) Verdict {
	t.Helper()
	h, err := Run(context.Background(), env, sc)
	if err != nil {
		t.Fatal(err)
	}
	v := Check(h)
	t.Logf("seed %d: %s; faults %v; attempts %v; takeovers %v; cuts %d/%d; false give-ups %d; fault end → next grant %s",
		env.Seed, v.Summary(), v.Faults, v.Attempts, v.Takeovers, v.CutsEnded, v.Cuts, v.GiveUps, spread(v.FaultGrants, "faults"))
	for _, s := range v.Violations[:min(len(v.Violations), 10)] {
		t.Error(s)
	}
	if len(v.Violations) > 0 {
		dump(t, h)
	}
	checkInjected(t, sc, v)
	checkExercised(t, sc, h)
	return v
}

// checkExercised fails a run of a lock-family scenario that did not use
// what it is about: reads that never shared the name, an election whose
// leadership never passed between candidates.
func checkExercised(t *testing.T, sc Scenario, h History) {
	t.Helper()
	if sc.Shared > 0 {
		reads, overlapped := sharedStats(h)
		t.Logf("%d reads of %d holds, %d of them overlapping another read", reads, len(h.Holds), overlapped)
		if reads == 0 || reads == len(h.Holds) {
			t.Errorf("%d reads of %d holds: want both kinds", reads, len(h.Holds))
		}
		if overlapped == 0 {
			t.Error("no two reads overlapped: the run did not exercise sharing")
		}
	}
	if sc.Lock == LockElection {
		leaders := map[int]bool{}
		changes := 0
		terms := sortedByFence(h.Holds)
		for i, x := range terms {
			leaders[x.Worker] = true
			if i > 0 && terms[i-1].Worker != x.Worker {
				changes++
			}
		}
		t.Logf("%d terms, %d leaders, leadership changed hands %d times", len(h.Holds), len(leaders), changes)
		if len(leaders) < 2 || changes == 0 {
			t.Errorf("%d leaders, %d changes of leader: the election was never contested", len(leaders), changes)
		}
	}
}

// checkInjected fails a run whose nemesis found nothing to fault: it proves
// nothing.
func checkInjected(t *testing.T, sc Scenario, v Verdict) {
	t.Helper()
	for _, k := range sc.Faults {
		n := v.Faults[k]
		if k == FaultFailover {
			n += v.Faults[FaultFailoverManual] // a failover fault is logged as the one of the two it was
		}
		if n == 0 {
			t.Errorf("no %s fault was injected", k)
		}
	}
	if sc.Reset > 0 && v.Faults[FaultReset] == 0 {
		t.Error("no connection was reset")
	}
	if sc.Name == "pause" && v.Expected[expected[FaultPause]] == 0 {
		t.Error("no holder was paused while another took its lock: the pauses proved nothing")
	}
}

// plantedCases pairs each broken lock with a scenario that exposes it.
// Critical sections outlast the TTL only for the lock without renewal, so
// that every other broken lock is caught by its own bug: want lists the
// violations that bug shows as. A lock deleted by a former holder shows as
// two holders, or as the next holder's Release finding its lock gone.
var plantedCases = []struct {
	lock, scenario string
	want           []string
	long           float64
}{
	{LockSetnxExpire, "kill", []string{"never taken again", "taken only"}, 0},
	{LockPlainDel, "pause", []string{"two holders", "Release said not held"}, 0},
	{LockGetThenDel, "pause", []string{"two holders", "Release said not held"}, 0},
	{LockNoRenewal, "kill", []string{"two holders"}, 0.05},
	{LockNoFence, "pause", []string{"lost update"}, 0},
}

// The checker is checked: each planted broken lock must produce violations
// under the scenario that exposes it. Critical sections of up to 30 ms give
// the faults something to land in: a kill between SETNX and its PEXPIRE, a
// stale DEL while the next holder still works. A bug is caught if one of up
// to three runs shows it; each run is logged with its seed.
func TestPlantedLocksCaught(t *testing.T) {
	byName := map[string]Scenario{}
	for _, s := range profile(4 * time.Second) {
		byName[s.Name] = s
	}
	for _, pc := range plantedCases {
		t.Run(pc.lock+"/"+pc.scenario, func(t *testing.T) {
			sc := byName[pc.scenario]
			sc.Lock, sc.Long, sc.Work = pc.lock, pc.long, 30*time.Millisecond
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
					for _, w := range pc.want {
						if strings.Contains(s, w) {
							t.Logf("caught: %s", s)
							return
						}
					}
				}
			}
			t.Errorf("%s under %q: no violation %q in three runs: the checker cannot tell this broken lock from a correct one", pc.lock, pc.scenario, pc.want)
		})
	}
}

// dump writes a history that failed to $TORTURE_DUMP, for a closer look.
func dump(t *testing.T, h History) {
	dir := os.Getenv("TORTURE_DUMP")
	if dir == "" {
		t.Log("set TORTURE_DUMP=<dir> to keep the history of a failed run")
		return
	}
	b, _ := json.MarshalIndent(h, "", " ")
	p := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Log(err)
		return
	}
	t.Logf("history written to %s", p)
}

// deleteOwn deletes the run's keys and only those, whatever characters the
// prefix holds: a prefix read as a glob once matched the user's keys.
func TestDeleteOwnOnlyItsKeys(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	prefix := `app:[^*?\x-z]:`
	own := []string{prefix + "a", prefix + "{n0}:q"}
	foreign := []string{"app:Q", "app:a", "appx", "xa", `app:[^*?\x-z]`}
	for _, k := range append(slices.Clone(own), foreign...) {
		if err := rdb.Set(context.Background(), k, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r := &run{env: Env{Redis: &Target{Addr: srv.Addr}, Prefix: prefix}}
	r.deleteOwn()
	left, err := rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(left)
	want := slices.Sorted(slices.Values(foreign))
	if !slices.Equal(left, want) {
		t.Fatalf("keys left %q, want the foreign ones %q", left, want)
	}
}
