package main

import (
	"context"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// A password in -u/--url shows in ps and the shell's history. It still
// works (scripts written that way must not break), but dlock says so on
// stderr, once, without repeating the password; through $DLOCK_URL it is
// silent, the environment being the place for it.
func TestURLPasswordOnCommandLineWarns(t *testing.T) {
	const pw = "pw-in-argv-Kq3"
	srv := redistest.Start(t)
	if err := srv.Client(t).ConfigSet(context.Background(), "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	withPW := "redis://:" + pw + "@" + srv.Addr

	for _, args := range [][]string{
		{"-u", withPW, "list"},
		{"--url=" + withPW, "run", "job", "--", "true"},
		{"-u", withPW, "doctor"}, // its own client, not a.redis's
	} {
		r := dlockRunEnv(t, nil, args...)
		if r.code != 0 {
			t.Fatalf("dlock %q: exit %d: %s", args, r.code, r.stderr)
		}
		if n := strings.Count(r.stderr, "warning"); n != 1 || !strings.Contains(r.stderr, "ps") || !strings.Contains(r.stderr, "DLOCK_URL") {
			t.Errorf("dlock %q: want one warning naming ps and $DLOCK_URL; stderr: %s", args, r.stderr)
		}
		if strings.Contains(r.stderr, pw) {
			t.Errorf("dlock %q: the warning repeats the password: %s", args, r.stderr)
		}
	}

	// The same URL through the environment, and a URL without a password:
	// nothing to warn about.
	r := dlockRunEnv(t, []string{"DLOCK_URL=" + withPW}, "list")
	if r.code != 0 || strings.Contains(r.stderr, "warning") {
		t.Errorf("DLOCK_URL with a password: exit %d, stderr %q; want 0 and no warning", r.code, r.stderr)
	}
	r = dlockRunEnv(t, []string{"DLOCK_PASSWORD=" + pw}, "-u", "redis://"+srv.Addr, "list")
	if r.code != 0 || strings.Contains(r.stderr, "warning") {
		t.Errorf("-u without a password: exit %d, stderr %q; want 0 and no warning", r.code, r.stderr)
	}
}
