package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// cron mails whatever a job prints: with -q a busy lock is silent, with
// -n -E 0 a success too, while real errors still print. Without -q the
// message says who holds the lock and that its lease is renewed while the
// holder works: "for another 29.3s" read like a release time.
func TestRunBusyMessageAndQuiet(t *testing.T) {
	srv := redistest.Start(t)
	hold(t, srv, srv.Client(t), "nightly", "--owner", "the-holder")

	r := dlockRun(t, srv, "run", "-n", "-E", "0", "nightly", "true")
	if r.code != 0 {
		t.Fatalf("-n -E 0: exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{`"nightly" is busy`, `"the-holder"`, "renewed while", "fence"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("busy message %q does not say %q", r.stderr, want)
		}
	}
	if strings.Contains(r.stderr, "for another") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("busy message %q: want one line, no release time", r.stderr)
	}
	r = dlockRun(t, srv, "run", "-w", "0.3", "nightly", "true")
	if r.code != exitConflict || !strings.Contains(r.stderr, "waited 300ms") {
		t.Errorf("-w 0.3: exit %d, stderr %q; want %d saying how long it waited", r.code, r.stderr, exitConflict)
	}
	// The waiters ahead, as the library's busy error counts them.
	startDlock(t, srv, "run", "-w", "20", "nightly", "--", "true")
	rdb := srv.Client(t)
	waitFor(t, "a waiter in line", func() bool { return rdb.ZCard(context.Background(), lockKey("nightly")+":q").Val() == 1 })
	if r := dlockRun(t, srv, "run", "-n", "nightly", "true"); !strings.Contains(r.stderr, "; 1 in line") {
		t.Errorf("busy with a waiter in line: %q does not say \"1 in line\"", r.stderr)
	}

	for _, tt := range []struct {
		args []string
		want int
	}{
		{[]string{"run", "-q", "-n", "-E", "0", "nightly", "true"}, 0},
		{[]string{"run", "--quiet", "-n", "nightly", "true"}, exitConflict},
		{[]string{"run", "-q", "-w", "0.2", "-N", "nightly", "-N", "other", "true"}, exitConflict},
	} {
		if r := dlockRun(t, srv, tt.args...); r.code != tt.want || r.stderr != "" || r.stdout != "" {
			t.Errorf("dlock %q: exit %d, stderr %q; want %d and silence", tt.args, r.code, r.stderr, tt.want)
		}
	}

	// Errors other than busy still print with -q.
	closed, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want int
	}{
		{[]string{"run", "-q", "--ttl", "10ms", "nightly", "true"}, exitUsage},
		{[]string{"--addr", "127.0.0.1:" + strconv.Itoa(closed), "--timeout", "0.5", "run", "-q", "-n", "-E", "0", "x", "true"}, exitRedis},
	} {
		var r result
		if tt.args[0] == "--addr" {
			r = dlockRun(t, nil, tt.args...)
		} else {
			r = dlockRun(t, srv, tt.args...)
		}
		if r.code != tt.want || !strings.HasPrefix(r.stderr, "dlock: ") {
			t.Errorf("dlock %q: exit %d, stderr %q; want %d with the error", tt.args, r.code, r.stderr, tt.want)
		}
	}
}
