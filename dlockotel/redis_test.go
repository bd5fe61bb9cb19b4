package dlockotel_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// This module cannot import the root module's internal/redistest, so it
// starts its redis-server processes itself, the same way: a free loopback
// port, no persistence, a directory of its own, killed when done.

const installHint = "apt-get update && apt-get install -y redis-server (or run `make test`, which installs it)"

var errNoRedis = errors.New("redis-server not found on PATH; install it: " + installHint)

// redisServer is one redis-server process on 127.0.0.1.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// launchRedis starts redis-server in dir on a free loopback port and waits
// until it answers PING.
func launchRedis(dir string) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNoRedis
	}
	var lastErr error
	// The port is found by binding and closing it, so another process may
	// take it first: try a few.
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		s, err := startRedis(bin, dir, port)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startRedis(bin, dir string, port int) (*redisServer, error) {
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	// Die with the test binary, even when it is killed by a timeout.
	cmd.SysProcAttr = dieWithParent()
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for ping(s.addr) != nil {
		select {
		case <-s.done:
			return nil, fmt.Errorf("redis-server on port %d exited at start: %s", port, strings.TrimSpace(out.String()))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("redis-server on port %d did not answer PING", port)
		}
	}
	return s, nil
}

func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// kill stops the server and waits for it to exit.
func (s *redisServer) kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// newRedis starts a redis-server for one test and returns a client of it.
// A missing redis-server fails the test loudly: a skip would count as a pass
// that proved nothing.
func newRedis(t *testing.T) *redis.Client {
	t.Helper()
	s, err := launchRedis(t.TempDir())
	if err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	t.Cleanup(s.kill)
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

var bg = context.Background()
