package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// The habit of flock(1) and etcdctl lock: everything after NAME is the
// command, its flags included, with or without "--". Each of these commands
// went wrong when dlock read their flags as its own: cp -n overwrote the
// file, echo -n printed a newline, printf lost -n, -E and --ttl, grep -h
// printed dlock's help.
func TestRunCommandFlagsWithoutDash(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	mustWrite(t, src, "new\n")
	mustWrite(t, dst, "keep\n")
	hay := filepath.Join(dir, "hay")
	mustWrite(t, hay, "x marks\nnothing\n")

	for _, tt := range []struct {
		name    string
		args    []string
		stdout  string
		checkFn func(t *testing.T)
	}{
		{name: "cp -n keeps dst", args: []string{"run", "t1", "cp", "-n", src, dst}, checkFn: func(t *testing.T) {
			if b, _ := os.ReadFile(dst); string(b) != "keep\n" {
				t.Errorf("cp -n under dlock run overwrote dst: %q", b)
			}
		}},
		{name: "echo -n", args: []string{"run", "t1", "echo", "-n", "hi"}, stdout: "hi"},
		{name: "printf gets every argument", args: []string{"run", "t1", "printf", "%s|", "a", "-n", "b", "-E", "0", "--ttl", "5s"}, stdout: "a|-n|b|-E|0|--ttl|5s|"},
		{name: "grep -h", args: []string{"run", "t1", "grep", "-h", "x", hay}, stdout: "x marks\n"},
		// dlock's own flags before NAME still count, and "--" right
		// after NAME is still dlock's.
		{name: "flags before NAME, -- after", args: []string{"run", "-w", "5s", "t1", "--", "echo", "-n", "hi"}, stdout: "hi"},
		// With -N the command starts at the first argument that is not
		// dlock's flag.
		{name: "-N then command flags", args: []string{"run", "-N", "t1", "-N", "t2", "echo", "-n", "hi"}, stdout: "hi"},
		{name: "-N, --, command", args: []string{"run", "-N", "t1", "--", "echo", "-n", "--", "hi"}, stdout: "-- hi"},
		// A "--" later in the command is the command's (git diff -- file).
		{name: "-- inside the command", args: []string{"run", "t1", "printf", "%s|", "x", "--", "y"}, stdout: "x|--|y|"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := dlockRun(t, srv, tt.args...)
			if r.code != 0 {
				t.Fatalf("dlock %q: exit %d; stderr: %s", tt.args, r.code, r.stderr)
			}
			if tt.checkFn != nil {
				tt.checkFn(t)
			} else if r.stdout != tt.stdout {
				t.Errorf("dlock %q: stdout %q, want %q", tt.args, r.stdout, tt.stdout)
			}
		})
	}
}

// Errors that are dlock's own: a flag before NAME it does not know, or one
// of its flags put after NAME, where it would be the command's name.
func TestRunArgsUsage(t *testing.T) {
	srv := redistest.Start(t)
	for _, tt := range []struct {
		args []string
		want string // in stderr
		not  string // not in stderr
	}{
		{[]string{"run", "--bogus", "a", "true"}, "unknown flag: --bogus", "put --"},
		{[]string{"run", "a", "--ttl", "5s", "true"}, "go before NAME", ""},
		{[]string{"run", "a", "-n", "true"}, "go before NAME", ""},
		{[]string{"run", "a", "--", "-n", "true"}, "go before NAME", ""},
		{[]string{"run", "a", "--"}, "needs a COMMAND", ""},
		{[]string{"run", "-N", "a", "b", "--", "true"}, "-N NAME -- COMMAND", ""},
		{[]string{"run", "--"}, "needs a lock NAME", ""},
		{[]string{"run", "-N", "a", "-N", "a", "--", "true"}, `-N/--name "a" is given twice`, "AcquireAll"},
	} {
		r := dlockRun(t, srv, tt.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) || (tt.not != "" && strings.Contains(r.stderr, tt.not)) {
			t.Errorf("dlock %q: exit %d, stderr %q; want exit %d with %q (and not %q)", tt.args, r.code, r.stderr, exitUsage, tt.want, tt.not)
		}
	}
}

func mustWrite(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A TTL too short to be renewed over a real network is refused up front,
// with the reason, instead of every run ending in exit 4 "lock lost".
func TestRunRefusesTTLItCannotKeep(t *testing.T) {
	srv := redistest.Start(t)
	for _, ttl := range []string{"10ms", "999ms", "0.5"} {
		r := dlockRun(t, srv, "run", "--ttl", ttl, "short", "sleep", "0.3")
		if r.code != exitUsage || !strings.Contains(r.stderr, "--ttl") || !strings.Contains(r.stderr, "at least 1s") || !strings.Contains(r.stderr, "renew") {
			t.Errorf("--ttl %s: exit %d, stderr %q; want %d saying at least 1s and why", ttl, r.code, r.stderr, exitUsage)
		}
	}
	if r := dlockRun(t, srv, "run", "--ttl", "1", "short", "sleep", "0.3"); r.code != 0 {
		t.Errorf("--ttl 1: exit %d: %s", r.code, r.stderr)
	}
}

// "--" before NAME is a common slip (as in `sudo -- cmd`): both NAME and
// COMMAND were given, so the message says where "--" goes, with the user's
// own NAME and COMMAND, instead of asking for what is there.
func TestRunDashBeforeNameSaysWhereItGoes(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--", "job", "echo", "hi"}, "dlock run job -- echo hi"},
		{[]string{"run", "--ttl", "5s", "--", "job", "echo"}, "dlock run job -- echo"},
		{[]string{"run", "--", "job"}, "dlock run job -- COMMAND"},
		{[]string{"run", "--", "my job", "sh", "-c", "echo hi"}, `dlock run 'my job' -- sh -c 'echo hi'`},
	} {
		r := dlockRun(t, nil, tt.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, `NAME goes before "--"`) || !strings.Contains(r.stderr, tt.want) ||
			strings.Contains(r.stderr, "needs a lock NAME") {
			t.Errorf("dlock %q: exit %d, stderr %q; want %d saying NAME goes before \"--\" (%s)", tt.args, r.code, r.stderr, exitUsage, tt.want)
		}
	}
}
