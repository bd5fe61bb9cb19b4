package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/torture"
)

// bin is the dlock binary the tests run as a user would, built once.
var bin string

func TestMain(m *testing.M) {
	// Tests that run torture in this process start its workers as this
	// test binary again, as main does for dlock's.
	if torture.IsWorker() {
		os.Exit(torture.WorkerMain())
	}
	dir, err := os.MkdirTemp("", "dlock-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "dlock")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build dlock: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// cmdTimeout bounds every dlock process a test runs.
const cmdTimeout = 60 * time.Second

type result struct {
	code           int
	stdout, stderr string
}

// cleanEnv is the test process' environment without the variables that
// would point dlock somewhere else than the test's server.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "DLOCK_") || k == "REDIS_URL" || k == "REDISCLI_AUTH" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// command returns dlock with args, connected to srv (nil: no --addr).
func command(ctx context.Context, srv *redistest.Server, args ...string) *exec.Cmd {
	if srv != nil {
		args = append([]string{"--addr", srv.Addr}, args...)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cleanEnv()
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// dlockRun runs dlock to its end and returns its exit code and output.
func dlockRun(t *testing.T, srv *redistest.Server, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := command(ctx, srv, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("dlock %v: %v", args, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
}

// background is a dlock process running while the test goes on.
type background struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan struct{}
	code   int
}

// startDlock starts dlock with args in the background; t.Cleanup kills it.
func startDlock(t *testing.T, srv *redistest.Server, args ...string) *background {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	b := &background{cmd: command(ctx, srv, args...), done: make(chan struct{})}
	b.cmd.Stderr = &b.stderr
	if err := b.cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start dlock %v: %v", args, err)
	}
	go func() {
		_ = b.cmd.Wait()
		b.code = b.cmd.ProcessState.ExitCode()
		close(b.done)
	}()
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-b.done
		cancel()
	})
	return b
}

// wait returns the exit code, failing the test after d.
func (b *background) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-b.done:
		return b.code
	case <-time.After(d):
		t.Fatalf("dlock %v still running after %v; stderr: %s", b.cmd.Args, d, b.stderr.String())
		return -1
	}
}

// hold starts `dlock run NAME -- sleep 30` in the background and returns
// once the lock is in Redis.
func hold(t *testing.T, srv *redistest.Server, rdb *redis.Client, name string, flags ...string) *background {
	t.Helper()
	args := append(append([]string{"run"}, flags...), name, "--", "sleep", "30")
	b := startDlock(t, srv, args...)
	waitFor(t, "lock "+name+" taken", func() bool {
		return rdb.Exists(context.Background(), lockKey(name)).Val() == 1
	})
	return b
}

func lockKey(name string) string { return "dlock:{" + name + "}" }

// waitFor polls cond every 20ms for up to 15s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
