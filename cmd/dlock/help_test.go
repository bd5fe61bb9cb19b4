package main

import (
	"strings"
	"testing"
)

// A command's help starts with how to call it and examples; the long
// explanation follows the flags, for whoever reads on. run's help had 55
// lines of prose before its Usage.
func TestHelpShowsUsageFirst(t *testing.T) {
	for _, c := range []string{"run", "lock", "torture", "unlock"} {
		r := dlockRun(t, nil, c, "--help")
		if r.code != 0 {
			t.Fatalf("dlock %s --help: exit %d: %s", c, r.code, r.stderr)
		}
		lines := strings.Split(r.stdout, "\n")
		usage := -1
		for i, l := range lines {
			if l == "Usage:" {
				usage = i
				break
			}
		}
		if usage < 0 || usage > 2 {
			t.Errorf("dlock %s --help: \"Usage:\" at line %d, want within the first 3:\n%s", c, usage+1, r.stdout)
		}
		ex, fl := strings.Index(r.stdout, "Examples:"), strings.Index(r.stdout, "Flags:")
		if c == "run" && (ex < 0 || ex > fl) {
			t.Errorf("dlock run --help: examples not before the flags:\n%s", r.stdout)
		}
	}
	r := dlockRun(t, nil, "run", "--help")
	if !strings.Contains(r.stdout, "Description:") || !strings.Contains(r.stdout, "COMMAND's exit code is dlock's exit code") ||
		strings.Index(r.stdout, "Description:") < strings.Index(r.stdout, "Flags:") {
		t.Errorf("dlock run --help: the long description is missing or not after the flags:\n%s", r.stdout)
	}
}

// dlock with no command is a usage error: a short usage on stderr and exit
// 2, not the whole help and 0, which a script would take for success.
func TestNoCommandPrintsShortUsage(t *testing.T) {
	r := dlockRun(t, nil)
	if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "dlock COMMAND") || !strings.Contains(r.stderr, "run, ") ||
		!strings.Contains(r.stderr, "dlock --help") || strings.Count(r.stderr, "\n") > 4 {
		t.Errorf("dlock alone: exit %d, stdout %q, stderr %q; want %d and a short usage on stderr", r.code, r.stdout, r.stderr, exitUsage)
	}
	if r := dlockRun(t, nil, "--help"); r.code != 0 || !strings.Contains(r.stdout, "Exit codes:") {
		t.Errorf("dlock --help: exit %d, stdout %q", r.code, r.stdout)
	}
}
