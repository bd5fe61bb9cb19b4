package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// list and inspect show a lock another process holds, with the token's
// prefix and never the whole token.
func TestListAndInspectShowAnotherProcessLock(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	hold(t, srv, rdb, "jobs:nightly", "--owner", "list-test-owner")
	token := rdb.HGet(context.Background(), lockKey("jobs:nightly"), "token").Val()
	if len(token) < 16 {
		t.Fatalf("token in Redis: %q", token)
	}

	r := dlockRun(t, srv, "list", "-o", "json")
	if r.code != 0 {
		t.Fatalf("list: exit %d: %s", r.code, r.stderr)
	}
	var views []lockView
	if err := json.Unmarshal([]byte(r.stdout), &views); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, r.stdout)
	}
	if len(views) != 1 {
		t.Fatalf("list shows %d locks, want 1: %s", len(views), r.stdout)
	}
	v := views[0]
	if v.Name != "jobs:nightly" || v.Owner != "list-test-owner" || v.TokenPrefix != token[:8] || v.Fence <= 0 ||
		v.TTLMS <= 0 || v.LeaseMS != 30000 {
		t.Errorf("list shows %+v", v)
	}

	for _, args := range [][]string{
		{"list"}, {"list", "-o", "json", "--match", "jobs:*"},
		{"inspect", "jobs:nightly"}, {"inspect", "jobs:nightly", "-o", "json"},
	} {
		r := dlockRun(t, srv, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "list-test-owner") || !strings.Contains(r.stdout, token[:8]) {
			t.Errorf("dlock %v: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
		if strings.Contains(r.stdout, token) {
			t.Errorf("dlock %v shows the whole token: %s", args, r.stdout)
		}
	}
	if r := dlockRun(t, srv, "list", "-o", "json", "--match", "other*"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("list --match other*: exit %d, stdout %q", r.code, r.stdout)
	}
}

func TestUnlockRefusesWithoutForce(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	hold(t, srv, rdb, "keep")
	token := rdb.HGet(context.Background(), lockKey("keep"), "token").Val()

	r := dlockRun(t, srv, "unlock", "keep")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--force") {
		t.Errorf("unlock without --force: exit %d, stderr %q", r.code, r.stderr)
	}
	// No terminal to confirm on (stdin is /dev/null) and no --yes.
	r = dlockRun(t, srv, "unlock", "--force", "keep")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--yes") {
		t.Errorf("unlock --force without a terminal: exit %d, stderr %q", r.code, r.stderr)
	}
	if got := rdb.HGet(context.Background(), lockKey("keep"), "token").Val(); got != token {
		t.Fatal("the lock changed although unlock refused")
	}
	if r := dlockRun(t, srv, "unlock", "--force", "--yes", "free"); r.code != exitNotFound {
		t.Errorf("unlock of a free lock: exit %d, want %d; stderr %q", r.code, exitNotFound, r.stderr)
	}
}

// unlock --force --yes deletes the lock, wakes the waiter, and the holder's
// dlock run finds its lock lost and stops its command.
func TestUnlockForce(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	holder := hold(t, srv, rdb, "stuck", "--ttl", "1s", "--owner", "stuck-owner")
	waiter := startDlock(t, srv, "run", "-w", "30s", "stuck", "--", "true")
	waitFor(t, "the waiter to queue", func() bool {
		return rdb.ZCard(context.Background(), lockKey("stuck")+":q").Val() == 1
	})

	r := dlockRun(t, srv, "unlock", "--force", "--yes", "stuck")
	if r.code != 0 {
		t.Fatalf("unlock --force --yes: exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"stuck-owner", "1 waiter(s) were woken"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("unlock output lacks %q:\n%s", want, r.stdout)
		}
	}
	if code := waiter.wait(t, 20*time.Second); code != 0 {
		t.Errorf("waiter: exit %d; stderr: %s", code, waiter.stderr.String())
	}
	if code := holder.wait(t, 20*time.Second); code != exitLost {
		t.Errorf("holder: exit %d, want %d; stderr: %s", code, exitLost, holder.stderr.String())
	}
}
