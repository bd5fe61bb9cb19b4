package dlockgocron_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// This module cannot import dlock's internal/redistest (internal packages
// of another module are off limits), so it starts redis-server itself.

const installHint = "apt-get update && apt-get install -y redis-server (or run `make test`, which installs it)"

// exampleAddr is the redis-server the Example functions use; TestMain starts
// it, since an Example has no *testing.T to start one with.
var exampleAddr string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dlockgocron-example-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	addr, stop, err := launchRedis(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exampleAddr = addr
	code := m.Run()
	stop()
	_ = os.RemoveAll(dir)
	if code == 0 {
		// Every scheduler, renewal loop and pub/sub reader started by a
		// test must be gone by now.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// startRedis starts a redis-server for one test and stops it in t.Cleanup.
// A missing redis-server fails the test with the install command: a skipped
// test would pass without proving anything.
func startRedis(t testing.TB) string {
	t.Helper()
	addr, stop, err := launchRedis(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}

// launchRedis starts redis-server with persistence off on a free loopback
// port and waits until it answers PING. stop kills it and waits for it.
func launchRedis(dir string) (addr string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, errors.New("redis-server not found on PATH; install it: " + installHint)
	}
	// The free port is found by binding and closing it, so another process
	// may take it first: a few tries.
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		addr, stop, err = startOn(bin, dir, port)
		if err == nil {
			return addr, stop, nil
		}
	}
	return "", nil, err
}

func startOn(bin, dir string, port int) (string, func(), error) {
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	// Killed with the test binary, so a timed-out run leaves no server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return addr, stop, nil
		}
		select {
		case <-exited:
			return "", nil, fmt.Errorf("redis-server on port %d exited at start: %s", port, strings.TrimSpace(out.String()))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("redis-server on port %d did not answer PING: %v", port, err)
		}
	}
}
