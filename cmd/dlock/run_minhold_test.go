package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// cron's habit: every machine runs `dlock run --min-hold D -n job -- cmd` on
// the same tick. The command is quick, yet a machine a moment late skips the
// tick: the lock outlives the command until the min hold has passed since it
// was taken, and then the next tick runs.
func TestRunMinHold(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const key = "dlock:{tick}"
	if r := dlockRun(t, srv, "run", "--min-hold", "2s", "-n", "tick", "--", "true"); r.code != exitOK {
		t.Fatalf("first machine: exit %d: %s", r.code, r.stderr)
	}
	if pttl := rdb.PTTL(context.Background(), key).Val(); pttl <= 0 || pttl > 2*time.Second {
		t.Fatalf("after the command ended: PTTL %v, want the rest of the 2s min hold", pttl)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	r := dlockRun(t, srv, "run", "--min-hold", "2s", "-n", "tick", "--", "touch", marker)
	if r.code != exitConflict {
		t.Fatalf("late machine: exit %d, want %d (busy); stderr: %s", r.code, exitConflict, r.stderr)
	}
	// The holder has ended: nothing renews the lease, and the message says
	// the name is kept for the min hold, not that a holder still works.
	if !strings.Contains(r.stderr, "min hold") || strings.Contains(r.stderr, "renewed while the holder works") {
		t.Errorf("late machine's message: %s; want it to say the name is kept for its min hold", r.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the late machine ran the command in the same tick")
	}
	waitFor(t, "the min hold to end", func() bool { return rdb.Exists(context.Background(), key).Val() == 0 })
	if r := dlockRun(t, srv, "run", "-n", "tick", "--", "touch", marker); r.code != exitOK {
		t.Fatalf("next tick: exit %d: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the next tick did not run the command")
	}
}

func TestRunMinHoldUsage(t *testing.T) {
	srv := redistest.Start(t)
	for _, args := range [][]string{
		{"run", "--min-hold", "-1s", "a", "--", "true"},
		{"run", "--min-hold", "25h", "a", "--", "true"}, // above the maximum TTL
	} {
		if r := dlockRun(t, srv, args...); r.code != exitUsage {
			t.Errorf("dlock %v: exit %d, want %d; stderr: %s", args, r.code, exitUsage, r.stderr)
		}
	}
}
