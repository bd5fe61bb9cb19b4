//go:build unix

package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// kill -9 of dlock (or the OOM killer) must not leave COMMAND's process
// group working on without the lock: nothing renews it any more, and the
// next holder gets it when the lease ends. The group gets SIGTERM, then
// SIGKILL after --kill-grace, the child and the grandchild it started.
func TestRunKilledDlockTakesCommandGroupAlong(t *testing.T) {
	for _, tt := range []struct {
		name, script string
	}{
		{"obeys SIGTERM", `sleep 60 & echo $$ $! > "$0"; wait`},
		// Ignored signals survive exec: the sleep ignores SIGTERM too.
		{"ignores SIGTERM", `trap "" TERM; sleep 60 & echo $$ $! > "$0"; wait`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t)
			pidFile := filepath.Join(t.TempDir(), "pids")
			ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
			defer cancel()
			// No pipes for stdout and stderr: the command's group would
			// hold them open, and this test waits for processes, not EOF.
			cmd := command(ctx, srv, "run", "--kill-grace", "0.5", "killed", "sh", "-c", tt.script, pidFile)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pids := readPIDs(t, pidFile, 2)
			t.Cleanup(func() {
				for _, pid := range pids {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			killed := time.Now()
			for i, pid := range pids {
				what := []string{"sh (the child)", "sleep (the grandchild)"}[i]
				deadline := time.Now().Add(10 * time.Second)
				for !gone(pid) && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				if !gone(pid) {
					t.Errorf("%s, pid %d, still runs %v after dlock was killed", what, pid, time.Since(killed).Round(time.Millisecond))
				}
			}
			t.Logf("command group gone %v after kill -9 of dlock", time.Since(killed).Round(time.Millisecond))
		})
	}
}

// The watchdog alone, as on macOS where no parent-death signal helps: a
// command in the watchdog's group whose leader ignores SIGTERM, no
// Pdeathsig. End of file on the pipe without "done" (dlock died) stops the
// whole group; "done" leaves it be.
func TestWatchdog(t *testing.T) {
	for _, died := range []bool{true, false} {
		t.Run(map[bool]string{true: "dlock died", false: "dlock disarmed it"}[died], func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pids")
			wd, err := startWatchdog(300 * time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sh", "-c", `trap "" TERM; sleep 60 & echo $$ $! > "$0"; wait`, pidFile)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: wd.pgid()}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waited := make(chan struct{})
			go func() { _ = cmd.Wait(); close(waited) }()
			pids := readPIDs(t, pidFile, 2)
			t.Cleanup(func() {
				_ = syscall.Kill(-wd.pgid(), syscall.SIGKILL)
				<-waited
			})
			if died {
				_ = wd.w.Close() // what the kernel does to dlock's end of the pipe
				<-wd.exited
			} else {
				wd.disarm()
			}
			time.Sleep(200 * time.Millisecond) // the watchdog has exited: nothing signals the group later
			for _, pid := range pids {
				if gone(pid) != died {
					t.Errorf("pid %d gone: %v, want %v", pid, gone(pid), died)
				}
			}
		})
	}
}

// A run that ends as usual disarms its watchdog: what COMMAND left running
// in its group is left alone, as before the watchdog (dlock waits for
// COMMAND, as flock does, not for its group). Were the watchdog not told,
// the end of dlock would look like its death and the leftover would die.
func TestRunDisarmsWatchdog(t *testing.T) {
	srv := redistest.Start(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	r := dlockRun(t, srv, "run", "--kill-grace", "0.2", "wd", "sh", "-c", `sleep 60 >/dev/null 2>&1 & echo $! > "$0"`, pidFile)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	pid := readPIDs(t, pidFile, 1)[0]
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	time.Sleep(time.Second) // past the grace a watchdog would have given
	if gone(pid) {
		t.Fatal("the command's leftover was killed after a normal run: the watchdog was not disarmed")
	}
}
