package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisServer is a throwaway redis-server owned by this process. The
// benchmark never talks to a Redis it did not start: results would depend
// on whatever else that server is doing, and its CPU time and command
// counters, which we difference around each cell, would include other
// clients' traffic. Persistence is off so no fork or disk write lands in a
// measurement.
type redisServer struct {
	addr    string
	version string
	dir     string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd.Wait returns
	control *redis.Client // uncounted client for PING and INFO
}

// startRedis launches redisPath on a free loopback port with persistence
// off, waits until it answers PING and returns it. A few attempts are made
// because the port is chosen by binding :0 and closing it again, which
// another process could grab in between.
func startRedis(ctx context.Context, redisPath string) (*redisServer, error) {
	return startRedisUnder(ctx, redisPath, nil, 5*time.Second)
}

// startRedisUnder is startRedis with the server run by the command prefix
// (valgrind and its flags; none when empty), given ready to answer PING.
func startRedisUnder(ctx context.Context, redisPath string, prefix []string, ready time.Duration) (*redisServer, error) {
	dir, err := os.MkdirTemp("", "dlock-bench-redis-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 {
		if ctx.Err() != nil {
			break
		}
		var s *redisServer
		s, lastErr = startRedisOnce(ctx, redisPath, prefix, ready, dir)
		if lastErr == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	return nil, fmt.Errorf("starting redis-server: %w", lastErr)
}

func startRedisOnce(ctx context.Context, redisPath string, prefix []string, ready time.Duration, dir string) (*redisServer, error) {
	port, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "redis.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child keeps its own descriptor

	argv := append(append(prefix[:len(prefix):len(prefix)], redisPath),
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
	)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = dieWithUs()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &redisServer{
		addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		dir:    dir,
		cmd:    cmd,
		exited: make(chan struct{}),
	}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	s.control = newGoRedis(s.addr, nil)

	fail := func(err error) (*redisServer, error) {
		s.kill()
		_ = s.control.Close()
		return nil, err
	}
	if err := s.waitReady(ctx, ready); err != nil {
		log, _ := os.ReadFile(logPath)
		return fail(fmt.Errorf("%w; redis log tail:\n%s", err, tail(string(log), 800)))
	}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := s.control.Info(ictx, "server").Result()
	if err != nil {
		return fail(err)
	}
	// The port was free when chosen, not necessarily when the server
	// bound it (seconds later under valgrind): a server that answered but
	// is not ours would be measured, and then shut down. Ours runs in the
	// directory made for it, whatever wrapper started it.
	got, err := s.control.ConfigGet(ictx, "dir").Result()
	if err != nil {
		return fail(err)
	}
	want, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fail(err)
	}
	if got["dir"] != want {
		return fail(fmt.Errorf("the server on %s runs in %q, not in %q made for the one started: port taken meanwhile", s.addr, got["dir"], want))
	}
	s.version = infoField(info, "redis_version")
	return s, nil
}

// waitReady polls PING every 20 ms until the server answers, the process
// exits, or limit passes.
func (s *redisServer) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return errors.New("redis-server exited during start-up")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		// A bare dial first: go-redis logs every refused dial, and a server
		// under valgrind takes seconds to listen.
		c, err := net.DialTimeout("tcp", s.addr, 200*time.Millisecond)
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		_ = c.Close()
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err = s.control.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redis-server did not answer PING within %v", limit)
}

// stop shuts the server down (SIGTERM, then SIGKILL after 2 s) and removes
// its directory. It is safe to call more than once.
func (s *redisServer) stop() {
	if s == nil {
		return
	}
	_ = s.control.Close()
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(2 * time.Second):
			s.kill()
		}
	}
	_ = os.RemoveAll(s.dir)
}

// shutdown asks the server to stop (SHUTDOWN NOSAVE) and waits, up to
// limit, for the process to exit: valgrind writes its counts on the way out.
func (s *redisServer) shutdown(ctx context.Context, limit time.Duration) error {
	select {
	case <-s.exited:
		return errors.New("redis-server had exited before SHUTDOWN: its count is not of the cycles")
	default:
	}
	sctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	// On a connection of its own: the server closes it without a reply,
	// and go-redis would send the command again and log its refused dials.
	var d net.Dialer
	c, err := d.DialContext(sctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("SHUTDOWN: %w", err)
	}
	_, err = c.Write([]byte("SHUTDOWN NOSAVE\r\n"))
	_ = c.Close()
	if err != nil {
		return err
	}
	select {
	case <-s.exited:
		return nil
	case <-sctx.Done():
		return fmt.Errorf("redis-server did not exit within %v of SHUTDOWN", limit)
	}
}

func (s *redisServer) kill() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		select {
		case <-s.exited:
		case <-time.After(2 * time.Second):
		}
	}
}

// waitQuiet waits, up to limit, until the server has run no command but
// our own INFO for 300 ms: work a library starts in the background (a
// check of the server, a tracking set-up) must be over before counting.
func (s *redisServer) waitQuiet(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	prev, err := s.counters(ctx)
	if err != nil {
		return err
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
		cur, err := s.counters(ctx)
		if err != nil {
			return err
		}
		if cur.sub(prev).commands == 0 {
			return nil
		}
		prev = cur
	}
	return fmt.Errorf("redis-server still running commands of others %v after the warm-up", limit)
}

// flush empties the keyspace between cells, so keys left by one cell
// (a lock cut off at its end, rueidislock's keys) cost nothing in the next.
func (s *redisServer) flush(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return s.control.FlushAll(ctx).Err()
}

// serverCounters is one reading of the counters we difference around a cell.
type serverCounters struct {
	cpu      float64 // used_cpu_sys + used_cpu_user, seconds
	commands int64   // total_commands_processed (includes commands run by scripts)
}

// counters reads INFO cpu and stats in one command. The INFO itself is
// counted by total_commands_processed only after its reply is built, so a
// before/after pair adds exactly one command (the first INFO) to the delta;
// sub() removes it.
func (s *redisServer) counters(ctx context.Context) (serverCounters, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := s.control.Info(ctx, "cpu", "stats").Result()
	if err != nil {
		return serverCounters{}, err
	}
	sys, _ := strconv.ParseFloat(infoField(info, "used_cpu_sys"), 64)
	user, _ := strconv.ParseFloat(infoField(info, "used_cpu_user"), 64)
	cmds, _ := strconv.ParseInt(infoField(info, "total_commands_processed"), 10, 64)
	return serverCounters{cpu: sys + user, commands: cmds}, nil
}

func (after serverCounters) sub(before serverCounters) serverCounters {
	return serverCounters{cpu: after.cpu - before.cpu, commands: after.commands - before.commands - 1}
}

// infoField returns the value of "key:value" in an INFO reply.
func infoField(info, key string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return ""
}

func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// newGoRedis builds a go-redis client for addr. If rt is non-nil every
// command and every pipeline the client sends is counted in it (see
// hooks.go). Connection hand-shake extras are switched off so connection
// set-up does not differ between clients: CLIENT SETINFO (DisableIdentity)
// and the CLIENT MAINT_NOTIFICATIONS probe, which Redis 7.0 rejects anyway.
func newGoRedis(addr string, rt *roundTrips) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr:                     addr,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	if rt != nil {
		rdb.AddHook(goRedisCounter{rt})
	}
	return rdb
}
