package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// Several dlock processes run a read-modify-write through redis-cli (GET,
// then SET to the value plus one: not atomic), so only the lock keeps
// increments from being lost.
func TestRunMutualExclusion(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const procs, iters = 4, 25
	if err := rdb.Set(context.Background(), "counter", 0, 0).Err(); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`v=$(redis-cli -p %d GET counter); sleep 0.01; redis-cli -p %d SET counter $((v+1)) >/dev/null`, srv.Port, srv.Port)
	var wg sync.WaitGroup
	errs := make(chan string, procs*iters)
	for range procs {
		wg.Go(func() {
			for range iters {
				r := dlockRun(t, srv, "run", "-w", "50s", "counter", "--", "sh", "-c", script)
				if r.code != 0 {
					errs <- fmt.Sprintf("exit %d: %s", r.code, r.stderr)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if got := rdb.Get(context.Background(), "counter").Val(); got != strconv.Itoa(procs*iters) {
		t.Fatalf("counter = %s after %d locked increments: some overlapped", got, procs*iters)
	}
}

func TestRunExitCodes(t *testing.T) {
	srv := redistest.Start(t)
	closed, err := redistest.FreePort() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"success", []string{"run", "a", "--", "true"}, exitOK},
		{"without --", []string{"run", "a", "true"}, exitOK},
		{"child code passes through", []string{"run", "a", "--", "sh", "-c", "exit 7"}, 7},
		{"child 2 is not a usage error", []string{"run", "a", "--", "sh", "-c", "exit 2"}, 2},
		{"child killed by signal", []string{"run", "a", "--", "sh", "-c", "kill -TERM $$"}, 128 + int(syscall.SIGTERM)},
		{"command not found", []string{"run", "a", "--", "/nonexistent/command"}, exitNoCmd},
		{"usage: no command", []string{"run", "a"}, exitUsage},
		{"usage: no name", []string{"run", "--", "true"}, exitUsage},
		{"usage: unknown flag", []string{"run", "--bogus", "a", "--", "true"}, exitUsage},
		{"usage: ttl below the minimum", []string{"run", "--ttl", "1ns", "a", "--", "true"}, exitUsage},
		{"usage: -n with -w", []string{"run", "-n", "-w", "1s", "a", "--", "true"}, exitUsage},
		{"usage: unknown command", []string{"frobnicate"}, exitUsage},
		{"usage: bad output format", []string{"list", "-o", "yaml"}, exitUsage},
		{"usage: --url with --addr", []string{"--url", "redis://127.0.0.1:1", "list"}, exitUsage},
		{"not found: inspect a free lock", []string{"inspect", "a"}, exitNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r := dlockRun(t, srv, tt.args...); r.code != tt.want {
				t.Errorf("dlock %v: exit %d, want %d; stderr: %s", tt.args, r.code, tt.want, r.stderr)
			}
		})
	}
	t.Run("redis unreachable", func(t *testing.T) {
		for _, args := range [][]string{{"run", "a", "--", "true"}, {"list"}} {
			args = append([]string{"--addr", "127.0.0.1:" + strconv.Itoa(closed), "--timeout", "500ms"}, args...)
			if r := dlockRun(t, nil, args...); r.code != exitRedis {
				t.Errorf("dlock %v: exit %d, want %d; stderr: %s", args, r.code, exitRedis, r.stderr)
			}
		}
	})
}

func TestRunConflict(t *testing.T) {
	srv := redistest.Start(t)
	hold(t, srv, srv.Client(t), "busy")
	marker := filepath.Join(t.TempDir(), "ran")
	for _, tt := range []struct {
		flags []string
		want  int
	}{
		{[]string{"-n"}, exitConflict},
		{[]string{"-n", "-E", "75"}, 75},
		{[]string{"-E", "0", "--no-wait"}, 0},
		{[]string{"-w", "300ms"}, exitConflict},
	} {
		args := append(append([]string{"run"}, tt.flags...), "busy", "--", "touch", marker)
		r := dlockRun(t, srv, args...)
		if r.code != tt.want {
			t.Errorf("dlock %v: exit %d, want %d; stderr: %s", args, r.code, tt.want, r.stderr)
		}
		if !strings.Contains(r.stderr, "busy") {
			t.Errorf("dlock %v: stderr does not name the lock: %s", args, r.stderr)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran although the lock was busy")
	}
}

// The child learns its lock from the environment; the token only with
// --pass-env DLOCK_TOKEN (TestRunChildEnvHasNoSecrets).
func TestRunEnvironment(t *testing.T) {
	srv := redistest.Start(t)
	r := dlockRun(t, srv, "run", "env-test", "--", "sh", "-c", `echo "$DLOCK_NAME $DLOCK_FENCE ${#DLOCK_TOKEN}"`)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	f := strings.Fields(r.stdout)
	if len(f) != 3 || f[0] != "env-test" || f[2] != "0" {
		t.Fatalf("child saw %q, want name, fence and no token", r.stdout)
	}
	if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
		t.Fatalf("DLOCK_FENCE %q: %v", f[1], err)
	}
}

// Several names with a repeated -N: all or nothing, the busy one named, the
// others left free; the child sees every name and fence; COMMAND's own
// arguments after -- stay its own, a -N among them too.
func TestRunSeveralNames(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()

	r := dlockRun(t, srv, "run", "-N", "b,x", "-N", "a", "--", "sh", "-c", `echo "$DLOCK_NAME|$DLOCK_FENCES|$#"`, "sh", "-N", "c")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	f := strings.Split(strings.TrimSpace(r.stdout), "|")
	if len(f) != 3 || f[0] != "a,b,x" || len(strings.Split(f[1], ",")) != 2 || f[2] != "2" {
		t.Fatalf("child saw %q; want the names in order, two fences and its two arguments", r.stdout)
	}
	if n := rdb.Exists(ctx, lockKey("a"), lockKey("b,x")).Val(); n != 0 {
		t.Fatalf("%d locks still held after the command exited", n)
	}

	hold(t, srv, rdb, "m2")
	marker := filepath.Join(t.TempDir(), "ran")
	r = dlockRun(t, srv, "run", "-n", "-N", "m2", "-N", "m1", "--", "touch", marker)
	if r.code != exitConflict || !strings.Contains(r.stderr, `"m2"`) {
		t.Fatalf("exit %d, want %d naming m2; stderr: %s", r.code, exitConflict, r.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran although m2 was busy")
	}
	if rdb.Exists(ctx, lockKey("m1")).Val() != 0 {
		t.Fatal("m1 is still held after the conflict on m2")
	}

	for _, args := range [][]string{
		{"run", "-N", "a", "b", "--", "true"},       // NAME and -N
		{"run", "-N", "a"},                          // no command
		{"run", "-N", "a", "-N", "a", "--", "true"}, // twice
		{"run", "-N", "a", "-N", "", "--", "true"},  // empty
	} {
		if r := dlockRun(t, srv, args...); r.code != exitUsage {
			t.Errorf("dlock %q: exit %d, want %d; stderr: %s", args, r.code, exitUsage, r.stderr)
		}
	}
}
