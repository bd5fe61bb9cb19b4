package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// startLines starts dlock ARGS... as a user would and returns it with its
// stdout, a line at a time; the channel closes at the end of stdout.
func startLines(t *testing.T, srv *redistest.Server, args ...string) (*background, <-chan string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	b := &background{cmd: command(ctx, srv, args...), done: make(chan struct{})}
	b.cmd.Stderr = lockedWriter{&b.stderr}
	out, err := b.cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := b.cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start dlock %v: %v", args, err)
	}
	lines := make(chan string, 1000)
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // a test that stopped reading; the pipe is still drained
			}
		}
	}()
	go func() {
		<-read // Wait closes the pipe: not before the reader saw its end
		_ = b.cmd.Wait()
		b.code = b.cmd.ProcessState.ExitCode()
		close(b.done)
	}()
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-b.done
		cancel()
	})
	return b, lines
}

// stderrMu guards the stderr buffers of the processes startLines starts,
// which tests read while the process still writes.
var stderrMu sync.Mutex

type lockedWriter struct{ w io.Writer }

func (l lockedWriter) Write(p []byte) (int, error) {
	stderrMu.Lock()
	defer stderrMu.Unlock()
	return l.w.Write(p)
}

// liveStderr is what b wrote on stderr so far.
func liveStderr(b *background) string {
	stderrMu.Lock()
	defer stderrMu.Unlock()
	return b.stderr.String()
}

// nextLine returns the next line of lines, failing the test after d.
func nextLine(t *testing.T, b *background, lines <-chan string, d time.Duration) string {
	t.Helper()
	select {
	case line, ok := <-lines:
		if !ok {
			<-b.done
			t.Fatalf("dlock %v: stdout ended, exit %d; stderr: %s", b.cmd.Args[1:], b.code, liveStderr(b))
		}
		return line
	case <-time.After(d):
		t.Fatalf("dlock %v printed no line within %v; stderr: %s", b.cmd.Args[1:], d, liveStderr(b))
		return ""
	}
}

// startLock starts `dlock lock ARGS...` and returns it with the first line
// it printed on stdout, once it printed one.
func startLock(t *testing.T, srv *redistest.Server, args ...string) (*background, string) {
	t.Helper()
	b, lines := startLines(t, srv, append([]string{"lock"}, args...)...)
	return b, nextLine(t, b, lines, 15*time.Second)
}

// The line names the lock and its fence; inspect shows the lock held, also
// after several TTLs (renewed); SIGTERM releases it and exits 0.
func TestLockHoldsUntilSignal(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT} {
		t.Run(sig.String(), func(t *testing.T) {
			name := "held lock " + strconv.Itoa(int(sig)) // a space: the fence is the last field
			b, line := startLock(t, srv, "--ttl", "1s", "--owner", "tester", name)
			cut := strings.LastIndexByte(line, ' ')
			if cut < 0 || line[:cut] != name {
				t.Fatalf("line %q: want %q then the fence", line, name)
			}
			fence, err := strconv.ParseInt(line[cut+1:], 10, 64)
			if err != nil || fence <= 0 {
				t.Fatalf("line %q: fence %q: %v", line, line[cut+1:], err)
			}
			// Past two TTLs: held only if renewed.
			time.Sleep(2500 * time.Millisecond)
			r := dlockRun(t, srv, "inspect", "-o", "json", name)
			var v lockView
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil {
				t.Fatalf("inspect after 2.5 TTLs: exit %d: %s%s", r.code, r.stdout, r.stderr)
			}
			if v.Fence != fence || v.Owner != "tester" {
				t.Fatalf("inspect shows fence %d owner %q, want %d and tester", v.Fence, v.Owner, fence)
			}
			_ = b.cmd.Process.Signal(sig)
			if code := b.wait(t, 10*time.Second); code != exitOK {
				t.Fatalf("after %v: exit %d, want 0; stderr: %s", sig, code, b.stderr.String())
			}
			if n := rdb.Exists(context.Background(), lockKey(name)).Val(); n != 0 {
				t.Fatalf("lock %q still in Redis after dlock lock exited", name)
			}
		})
	}
}

func TestLockJSONAndKinds(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		flags []string
		kind  string
	}{
		{nil, "exclusive"},
		{[]string{"-s"}, "shared"},
		{[]string{"--permits", "2"}, "semaphore"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			name := "json-" + tc.kind
			b, line := startLock(t, srv, append(tc.flags, "-o", "json", "--ttl", "5s", name)...)
			var got lockedLine
			if err := json.Unmarshal([]byte(line), &got); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			if got.Name != name || got.Fence <= 0 || got.Kind != tc.kind || got.TTLMS != 5000 || !strings.Contains(got.Owner, "dlock lock") {
				t.Fatalf("line %+v: want name %s, a fence, kind %s, ttl 5000, the default owner", got, name, tc.kind)
			}
			r := dlockRun(t, srv, "inspect", "-o", "json", name)
			var v lockView
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil || v.Kind != tc.kind {
				t.Fatalf("inspect: exit %d kind %q, want %s: %s%s", r.code, v.Kind, tc.kind, r.stdout, r.stderr)
			}
			_ = b.cmd.Process.Signal(syscall.SIGTERM)
			if code := b.wait(t, 10*time.Second); code != exitOK {
				t.Fatalf("exit %d; stderr: %s", code, b.stderr.String())
			}
			if r := dlockRun(t, srv, "inspect", name); r.code != exitNotFound {
				t.Fatalf("inspect after SIGTERM: exit %d, want %d (released): %s", r.code, exitNotFound, r.stdout)
			}
		})
	}
}

// A lock broken under dlock lock, by unlock --force or by deleting its key,
// ends it with exit 4 and a message naming the lock.
func TestLockLost(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	for _, tc := range []struct {
		how     string
		breakIt func(name string)
	}{
		{"unlock --force", func(name string) {
			if r := dlockRun(t, srv, "unlock", "--force", "--yes", name); r.code != 0 {
				t.Fatalf("unlock --force: exit %d: %s", r.code, r.stderr)
			}
		}},
		{"DEL", func(name string) {
			if err := rdb.Del(context.Background(), lockKey(name)).Err(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.how, func(t *testing.T) {
			name := "lost-" + strings.Fields(tc.how)[0]
			b, _ := startLock(t, srv, "--ttl", "1s", name)
			tc.breakIt(name)
			// Found at the next renewal, within a third of the TTL.
			if code := b.wait(t, 5*time.Second); code != exitLost {
				t.Fatalf("exit %d, want %d; stderr: %s", code, exitLost, b.stderr.String())
			}
			if s := b.stderr.String(); !strings.Contains(s, "lost") || !strings.Contains(s, name) {
				t.Fatalf("stderr does not say the lock %s was lost: %s", name, s)
			}
		})
	}
}

func TestLockBusyAndUsage(t *testing.T) {
	srv := redistest.Start(t)
	b, _ := startLock(t, srv, "busy")
	if r := dlockRun(t, srv, "lock", "-n", "busy"); r.code != exitConflict || r.stdout != "" {
		t.Fatalf("second lock -n: exit %d stdout %q, want %d and no line; stderr: %s", r.code, r.stdout, exitConflict, r.stderr)
	}
	if r := dlockRun(t, srv, "lock", "-w", "300ms", "busy"); r.code != exitConflict {
		t.Fatalf("second lock -w 300ms: exit %d, want %d: %s", r.code, exitConflict, r.stderr)
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	b.wait(t, 10*time.Second)
	for _, args := range [][]string{
		{"lock"},
		{"lock", "a", "b"},
		{"lock", "--permits", "0", "a"},
		{"lock", "-n", "-w", "1s", "a"},
		{"lock", "--without-writer-priority", "a"},
		{"lock", "-o", "yaml", "a"},
		{"lock", "--ttl", "1ns", "a"},
		{"lock", ""},
	} {
		if r := dlockRun(t, srv, args...); r.code != exitUsage {
			t.Errorf("dlock %q: exit %d, want %d; stderr: %s", args, r.code, exitUsage, r.stderr)
		}
	}
}

// lock takes run's durations (bare seconds) and refuses the TTLs run
// refuses, with the same reason.
func TestLockDurationsAndTTLFloor(t *testing.T) {
	srv := redistest.Start(t)
	r := dlockRun(t, srv, "lock", "--ttl", "10ms", "floor")
	if r.code != exitUsage || !strings.Contains(r.stderr, "1s") {
		t.Errorf("lock --ttl 10ms: exit %d, stderr %q; want a usage error naming the 1s floor", r.code, r.stderr)
	}
	b, line := startLock(t, srv, "--ttl", "2", "-w", "0.5", "seconds")
	if !strings.HasPrefix(line, "seconds ") {
		t.Errorf("lock --ttl 2 -w 0.5: line %q", line)
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	if code := b.wait(t, 10*time.Second); code != exitOK {
		t.Errorf("exit %d after SIGTERM; stderr: %s", code, b.stderr.String())
	}
}
