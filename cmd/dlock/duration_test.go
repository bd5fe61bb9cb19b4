package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestParseSeconds(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"5", 5 * time.Second, ""},
		{"0.5", 500 * time.Millisecond, ""},
		{".25", 250 * time.Millisecond, ""},
		{"0.1", 100 * time.Millisecond, ""},
		{"2.", 2 * time.Second, ""},
		{"0", 0, ""},
		{"-1", -time.Second, ""}, // refused by the command, naming the bound
		{"1m30s", 90 * time.Second, ""},
		{"1.5s", 1500 * time.Millisecond, ""},
		{"300ms", 300 * time.Millisecond, ""},
		{" 5 ", 5 * time.Second, ""},
		{"", 0, "not a duration"},
		{"abc", 0, "not a duration"},
		{"5 s", 0, "not a duration"},
		{"1e3", 0, "not a duration"},
		{"0x10", 0, "not a duration"},
		{"inf", 0, "not a duration"},
		{"NaN", 0, "not a duration"},
		{"1.2.3", 0, "not a duration"},
		{"99999999999", 0, "out of range"},
		{"9999999999999h", 0, "not a duration"},
	} {
		got, err := parseSeconds(tt.in)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("parseSeconds(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("parseSeconds(%q) = %v, %v; want an error with %q", tt.in, got, err, tt.err)
		}
	}
}

// The error names the flag (pflag adds it) and shows what would work; the
// default shows as a duration in --help.
func TestDurationFlag(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	var d time.Duration
	durationFlag(fs, &d, "wait", "w", 10*time.Second, "how long")
	if d != 10*time.Second {
		t.Fatalf("default %v, want 10s", d)
	}
	if f := fs.Lookup("wait"); f.DefValue != "10s" {
		t.Errorf("default shown as %q", f.DefValue)
	}
	if err := fs.Parse([]string{"-w", "2.5"}); err != nil || d != 2500*time.Millisecond {
		t.Fatalf("-w 2.5: %v, %v", d, err)
	}
	err := fs.Parse([]string{"--wait", "soon"})
	if err == nil || !strings.Contains(err.Error(), `"-w, --wait"`) || !strings.Contains(err.Error(), "30s") {
		t.Fatalf("--wait soon: %v; want an error naming -w, --wait with an example", err)
	}
}

// As a user of flock -w 5 and etcdctl --ttl 5 writes them, through the
// binary: every duration flag of run takes seconds, and -w 0.5 waits half a
// second on a busy lock.
func TestRunDurationsInSeconds(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	r := dlockRun(t, srv, "--timeout", "2", "run", "--ttl", "5", "-w", "1", "--kill-grace", "1", "--min-hold", "0.2", "secs", "true")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}

	hold(t, srv, rdb, "busy-secs")
	start := time.Now()
	r = dlockRun(t, srv, "run", "-w", "0.5", "busy-secs", "true")
	took := time.Since(start)
	if r.code != exitConflict {
		t.Fatalf("-w 0.5 on a busy lock: exit %d, want %d; stderr: %s", r.code, exitConflict, r.stderr)
	}
	if took < 500*time.Millisecond || took > 10*time.Second {
		t.Errorf("-w 0.5 gave up after %v", took)
	}

	for _, tt := range []struct {
		args []string
		flag string
	}{
		{[]string{"run", "-w", "five", "a", "true"}, "-w, --wait"},
		{[]string{"run", "--ttl", "1e3", "a", "true"}, "--ttl"},
		{[]string{"run", "--kill-grace", "x", "a", "true"}, "--kill-grace"},
		{[]string{"--timeout", "x", "list"}, "--timeout"},
	} {
		r := dlockRun(t, srv, tt.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.flag) || !strings.Contains(r.stderr, "1m30s") {
			t.Errorf("dlock %q: exit %d, stderr %q; want %d naming %s with an example", tt.args, r.code, r.stderr, exitUsage, tt.flag)
		}
	}
}
