package main

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// dlock run -s behaves as flock -s: two shared runs hold the name at once,
// an exclusive run is refused while they do, and list/inspect show both
// readers and the exclusive run waiting, with owners.
func TestRunSharedAndListReaders(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	a := hold(t, srv, rdb, "catalog", "-s", "--owner", "reader-a")
	b := startDlock(t, srv, "run", "--shared", "--owner", "reader-b", "catalog", "--", "sleep", "30")
	waitFor(t, "two readers", func() bool {
		return len(rdb.HKeys(context.Background(), lockKey("catalog")).Val()) == 4 // token, fence, two readers
	})
	if r := dlockRun(t, srv, "run", "-n", "catalog", "--", "true"); r.code != exitConflict {
		t.Fatalf("exclusive run while two readers hold: exit %d, stderr %q", r.code, r.stderr)
	}
	w := startDlock(t, srv, "run", "-w", "20s", "--owner", "the-writer", "catalog", "--", "true")
	waitFor(t, "writer in line", func() bool { return rdb.ZCard(context.Background(), lockKey("catalog")+":q").Val() == 1 })

	r := dlockRun(t, srv, "inspect", "catalog", "-o", "json")
	var v lockView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 {
		t.Fatalf("inspect -o json: exit %d, %v: %s %s", r.code, err, r.stdout, r.stderr)
	}
	if v.Kind != "shared" || len(v.Readers) != 2 || len(v.Queue) != 1 || v.Queue[0].Owner != "the-writer" || v.Queue[0].Shared {
		t.Fatalf("inspect shows %+v", v)
	}
	owners := v.Readers[0].Owner + " " + v.Readers[1].Owner
	if !strings.Contains(owners, "reader-a") || !strings.Contains(owners, "reader-b") {
		t.Fatalf("readers %+v", v.Readers)
	}
	for _, args := range [][]string{{"inspect", "catalog"}, {"list"}} {
		r := dlockRun(t, srv, args...)
		for _, want := range []string{"read", "reader-a", "the-writer"} {
			if args[0] == "list" && want != "read" {
				continue // one line per lock
			}
			if !strings.Contains(r.stdout, want) {
				t.Errorf("dlock %v: no %q in %q", args, want, r.stdout)
			}
		}
	}
	if r := dlockRun(t, srv, "run", "--skip-waiting-writers", "catalog", "--", "true"); r.code != exitUsage {
		t.Errorf("--skip-waiting-writers without -s: exit %d, want usage (%d)", r.code, exitUsage)
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	if code := w.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("writer after the readers left: exit %d: %s", code, w.stderr.String())
	}
}
