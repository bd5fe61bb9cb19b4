//go:build unix

package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// readPIDs waits for the child to write its pids into file.
func readPIDs(t *testing.T, file string, n int) []int {
	t.Helper()
	var pids []int
	waitFor(t, "the command's pids", func() bool {
		b, err := os.ReadFile(file)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			p, err := strconv.Atoi(f)
			if err != nil {
				return false
			}
			pids = append(pids, p)
		}
		return len(pids) == n
	})
	return pids
}

// gone reports whether pid has exited: no such process, or a zombie
// nobody reaped (the container's init may not reap orphans).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses, which may hold
	// spaces: look after the last ')'.
	s := string(b)
	rest := s[strings.LastIndexByte(s, ')')+1:]
	return strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

// A lock deleted behind the holder's back is lost at the next renewal: the
// command's whole process group is stopped and dlock exits 4.
func TestRunLostLockStopsCommand(t *testing.T) {
	for _, tt := range []struct {
		name, script string
	}{
		// sh and its background sleep both die of SIGTERM.
		{"obeys SIGTERM", `sleep 60 & echo $$ $! > "$0"; wait`},
		// Both ignore SIGTERM (ignored signals survive exec): only the
		// SIGKILL after --kill-grace stops them.
		{"ignores SIGTERM", `trap "" TERM; sleep 60 & echo $$ $! > "$0"; wait`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			pidFile := filepath.Join(t.TempDir(), "pids")
			b := startDlock(t, srv, "run", "--ttl", "1s", "--kill-grace", "500ms", "lost", "--", "sh", "-c", tt.script, pidFile)
			pids := readPIDs(t, pidFile, 2)
			if err := rdb.Del(context.Background(), lockKey("lost")).Err(); err != nil {
				t.Fatal(err)
			}
			if code := b.wait(t, 20*time.Second); code != exitLost {
				t.Fatalf("exit %d, want %d; stderr: %s", code, exitLost, b.stderr.String())
			}
			if !strings.Contains(b.stderr.String(), "lost") {
				t.Errorf("stderr does not say the lock was lost: %s", b.stderr.String())
			}
			for _, pid := range pids {
				waitFor(t, "pid "+strconv.Itoa(pid)+" to be gone", func() bool { return gone(pid) })
			}
		})
	}
}

// SIGTERM to dlock reaches the command; the command's code passes through
// and the lock is released once it has exited.
func TestRunForwardsSignalThenReleases(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ready := filepath.Join(t.TempDir(), "ready")
	b := startDlock(t, srv, "run", "sig", "--", "sh", "-c", `trap "exit 42" TERM; sleep 60 & echo ready > "$0"; wait`, ready)
	waitFor(t, "the command to start", func() bool {
		_, err := os.Stat(ready)
		return err == nil
	})
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(t, 20*time.Second); code != 42 {
		t.Fatalf("exit %d, want the command's 42; stderr: %s", code, b.stderr.String())
	}
	if n := rdb.Exists(context.Background(), lockKey("sig")).Val(); n != 0 {
		t.Fatal("the lock is still held after the command exited")
	}
}

// On a terminal the command is in a background process group: a read from
// the terminal must fail, not stop the command for good with the lock held.
// script(1) gives dlock a terminal.
func TestRunCommandReadingTerminalDoesNotHang(t *testing.T) {
	if _, err := exec.LookPath("script"); err != nil {
		// util-linux ships it on every Debian; a skip would pass unproven.
		t.Fatal("script(1) not found: apt-get install -y bsdutils (util-linux)")
	}
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inner := bin + " --addr " + srv.Addr + ` run tty -- sh -c 'read line; echo "read exit $?"'`
	cmd := exec.CommandContext(ctx, "script", "-qec", inner, "/dev/null")
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("dlock run hung on a command reading the terminal: %s", out)
	}
	if err != nil || !strings.Contains(string(out), "read exit 1") {
		t.Fatalf("err %v, output %q", err, out)
	}
}
