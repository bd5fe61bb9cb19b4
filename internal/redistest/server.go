// Package redistest starts real redis-server processes on free loopback
// ports, for dlock's tests, examples and demo. Nothing here talks to a shared
// server: every caller gets its own process, its own port and its own
// directory, and stops them when done.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// InstallHint is what to run when redis-server is missing.
const InstallHint = "apt-get update && apt-get install -y redis-server (or run `make test`, which installs it)"

// ErrNoRedis is matched by the error of a server program (of the flavor
// FlavorEnv picks) not found on PATH; that error says how to install it.
var ErrNoRedis = errors.New("redistest: server program not found on PATH")

// Server is one redis-server process on 127.0.0.1.
type Server struct {
	Port int
	Addr string // 127.0.0.1:Port
	Dir  string // the server's working directory

	binary string
	args   []string // extra arguments, kept for Restart
	env    []string // extra environment, kept for Restart

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Launch starts redis-server with persistence off on a free loopback port and
// waits until it answers PING. dir must exist; the server writes nothing there
// unless extra arguments ask it to. extra is appended to the command line
// (for example "--enable-debug-command", "local").
func Launch(ctx context.Context, dir string, extra ...string) (*Server, error) {
	bin, err := ServerBinary()
	if err != nil {
		return nil, err
	}
	return launch(ctx, bin, dir, nil, extra)
}

// LaunchFlavor is Launch with the server of the flavor named ("redis" or
// "valkey"), whatever FlavorEnv says: for the tests of what one server has
// and the other lacks (WAITAOF: Valkey has it, Debian's Redis 7.0 not).
func LaunchFlavor(ctx context.Context, flavor, dir string, extra ...string) (*Server, error) {
	return LaunchFlavorEnv(ctx, flavor, dir, nil, extra...)
}

// LaunchFlavorEnv is LaunchFlavor with env added to the server's
// environment, at start and at every Restart (LD_PRELOAD of a library
// that watches its fsyncs, for the torture run's crash). flavor "" is
// FlavorEnv's.
func LaunchFlavorEnv(ctx context.Context, flavor, dir string, env []string, extra ...string) (*Server, error) {
	if flavor == "" {
		f, err := current()
		if err != nil {
			return nil, err
		}
		flavor = f.Name
	}
	f, ok := flavors[flavor]
	if !ok {
		return nil, fmt.Errorf("redistest: flavor %q: want redis or valkey", flavor)
	}
	bin, err := exec.LookPath(f.Server)
	if errors.Is(err, exec.ErrNotFound) {
		return nil, missing{f, f.Server}
	}
	if err != nil {
		return nil, err
	}
	return launch(ctx, bin, dir, env, extra)
}

func launch(ctx context.Context, bin, dir string, env, extra []string) (*Server, error) {
	var lastErr error
	// The free port is found by binding and closing it, so another process can
	// take it before redis-server binds: try a few ports before giving up.
	for range 3 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: dir, binary: bin, args: extra, env: env}
		if lastErr = s.start(ctx); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistest: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start(ctx context.Context) error {
	args := append([]string{
		"--port", strconv.Itoa(s.Port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.Dir,
	}, s.args...)
	cmd := exec.Command(s.binary, args...)
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	// Kill the server if the process that started it dies without cleanup
	// (a test binary killed by a timeout), so no orphan keeps the port.
	cmd.SysProcAttr = ChildAttr()
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		if Ping(wait, s.Addr) == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redistest: redis-server on port %d exited at start: %s", s.Port, strings.TrimSpace(out.String()))
		case <-wait.Done():
			s.Kill()
			return fmt.Errorf("redistest: redis-server on port %d did not answer PING: %w", s.Port, wait.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Ping sends one PING over a fresh connection and expects PONG.
func Ping(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(time.Second))
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redistest: PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// Kill stops the server at once with SIGKILL and waits for it to exit. It is
// safe to call more than once.
func (s *Server) Kill() {
	s.signal(sigKill)
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done != nil {
		<-done
	}
}

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Restart kills the server and starts a new, empty one on the same port with
// the same arguments: what a crash of a Redis without persistence looks like
// to its clients.
func (s *Server) Restart(ctx context.Context) error {
	s.Kill()
	return s.start(ctx)
}
