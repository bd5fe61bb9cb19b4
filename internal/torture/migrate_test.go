package torture

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestClusterMigration runs the slot migration scenarios for
// TORTURE_MIGRATION seconds (default 10): zero violations, and both kinds
// of fault injected. The full profile runs them for 50 s.
func TestClusterMigration(t *testing.T) {
	d := 10 * time.Second
	if s := os.Getenv("TORTURE_MIGRATION"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("TORTURE_MIGRATION=%q: %v", s, err)
		}
		d = time.Duration(n) * time.Second
	}
	for _, sc := range migrationScenarios(d) {
		t.Run(sc.Name, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			env := testEnv(t, seed)
			env.Cluster = redistest.StartCluster(t)
			h, err := Run(context.Background(), env, sc)
			if err != nil {
				t.Fatal(err)
			}
			v := Check(h)
			t.Logf("seed %d: %s; faults %v; attempts %v", seed, v.Summary(), v.Faults, v.Attempts)
			errs := map[string]int{} // what the failed attempts ran into, by the error's last words
			for _, a := range h.Attempts {
				if a.Err != "" {
					e := a.Err
					if i := strings.LastIndex(e, ": "); i >= 0 {
						e = e[i+2:]
					}
					errs[e[:min(len(e), 60)]]++
				}
			}
			t.Logf("failed attempts: %v", errs)
			for _, s := range v.Violations[:min(len(v.Violations), 10)] {
				t.Error(s)
			}
			if len(v.Violations) > 0 {
				dump(t, h)
			}
			checkInjected(t, sc, v)
		})
	}
}

// TestClusterMigrationBites runs the migration scenario with migrations that
// drop the lock hashes instead of moving them: the checker must report two
// holders. Without failovers, which would excuse overlaps.
func TestClusterMigrationBites(t *testing.T) {
	loseLocks.Store(true)
	defer loseLocks.Store(false)
	sc := migrationScenarios(8 * time.Second)[0]
	sc.Name, sc.Faults = "cluster-migration-lossy", []string{FaultMigrate}
	env := testEnv(t, uint64(time.Now().UnixNano()))
	env.Cluster = redistest.StartCluster(t, redistest.WithReplicas(0))
	h, err := Run(context.Background(), env, sc)
	if err != nil {
		t.Fatal(err)
	}
	v := Check(h)
	t.Logf("%s; faults %v", v.Summary(), v.Faults)
	if v.Faults[FaultMigrate] == 0 {
		t.Fatal("no migration was injected")
	}
	if !slices.ContainsFunc(v.Violations, func(s string) bool { return strings.Contains(s, "two holders") }) {
		t.Fatalf("migrations that lose the locks went unnoticed: %v", v.Violations)
	}
}
