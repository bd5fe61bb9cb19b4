package main

import (
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// The connection flags reach a Cluster (several --addr) and Sentinel
// (--master-name with the sentinels' addresses), as the library does.
func TestRunAndListOnClusterAndSentinel(t *testing.T) {
	cs := redistest.StartCluster(t)
	var clusterArgs []string
	for _, a := range cs.Addrs {
		clusterArgs = append(clusterArgs, "--addr", a)
	}
	st := redistest.StartSentinel(t)
	sentinelArgs := []string{"--master-name", st.MasterName}
	for _, a := range st.SentinelAddrs {
		sentinelArgs = append(sentinelArgs, "--addr", a)
	}
	for _, tc := range []struct {
		name string
		conn []string
	}{{"cluster", clusterArgs}, {"sentinel", sentinelArgs}} {
		t.Run(tc.name, func(t *testing.T) {
			// Names over several slots: list must find them on every primary.
			names := []string{"a-" + tc.name, "b-" + tc.name, "c-" + tc.name, "d-" + tc.name}
			for _, n := range names {
				r := dlockRun(t, nil, append(tc.conn, "run", "--ttl", "30s", n, "--", "true")...)
				if r.code != 0 {
					t.Fatalf("run %s: exit %d: %s", n, r.code, r.stderr)
				}
			}
			held := startDlock(t, nil, append(tc.conn, "run", names[0], "--", "sleep", "30")...)
			var views []lockView
			waitFor(t, "the held lock listed", func() bool {
				r := dlockRun(t, nil, append(tc.conn, "list", "-o", "json")...)
				views = nil
				return r.code == 0 && json.Unmarshal([]byte(r.stdout), &views) == nil && len(views) == 1
			})
			if views[0].Name != names[0] {
				t.Fatalf("list shows %+v, want %s", views, names[0])
			}
			// A second run on the same name conflicts through the topology.
			if r := dlockRun(t, nil, append(tc.conn, "run", "-n", names[0], "--", "true")...); r.code != exitConflict {
				t.Fatalf("second holder: exit %d, want %d: %s", r.code, exitConflict, r.stderr)
			}
			// TERM reaches the child too; a KILL would orphan its sleep.
			_ = held.cmd.Process.Signal(syscall.SIGTERM)
			held.wait(t, 10*time.Second)
		})
	}
}
