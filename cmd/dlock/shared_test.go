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
	if r := dlockRun(t, srv, "run", "--without-writer-priority", "catalog", "--", "true"); r.code != exitUsage {
		t.Errorf("--without-writer-priority without -s: exit %d, want usage (%d)", r.code, exitUsage)
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	if code := w.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("writer after the readers left: exit %d: %s", code, w.stderr.String())
	}
}

// inspect and list of a read lock show its readers, each with its own
// owner, token and lease, and no single holder: not the readers' marker as
// a token, an empty owner, nor a lease of 0s.
func TestInspectReadLockShowsItsReaders(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	a := hold(t, srv, rdb, "shelf", "-s", "--owner", "reader-a", "--ttl", "30s")
	defer func() { _ = a.cmd.Process.Signal(syscall.SIGTERM) }()

	r := dlockRun(t, srv, "inspect", "shelf")
	if r.code != 0 {
		t.Fatalf("inspect: exit %d: %s", r.code, r.stderr)
	}
	for _, bad := range []string{"*readers", "of 0s", "owner:"} {
		if strings.Contains(r.stdout, bad) {
			t.Errorf("inspect of a read lock shows %q:\n%s", bad, r.stdout)
		}
	}
	for _, want := range []string{"kind:     shared", "readers:  1", "reader-a", "of 30s"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect of a read lock: no %q in\n%s", want, r.stdout)
		}
	}

	r = dlockRun(t, srv, "inspect", "shelf", "-o", "json")
	var v map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 {
		t.Fatalf("inspect -o json: exit %d, %v: %s %s", r.code, err, r.stdout, r.stderr)
	}
	for _, field := range []string{"owner", "token_prefix", "lease_ms"} {
		if x, ok := v[field]; ok {
			t.Errorf("inspect -o json of a read lock has %q: %v (each reader has its own)", field, x)
		}
	}
	if rs, _ := v["readers"].([]any); len(rs) != 1 {
		t.Errorf("inspect -o json: readers %v, want one", v["readers"])
	}

	r = dlockRun(t, srv, "list")
	if !strings.Contains(r.stdout, "1 reader ") || strings.Contains(r.stdout, "readers)") || strings.Contains(r.stdout, "*readers") {
		t.Errorf("list of a read lock:\n%s", r.stdout)
	}
}
