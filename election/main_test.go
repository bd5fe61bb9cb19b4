package election_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/election"
	"github.com/dlock-go/dlock/internal/redistest"
)

// exampleAddr is the redis-server of the Example functions.
var exampleAddr string

var bg = context.Background()

// helperEnv makes the test binary a candidate process (candidateProcess).
const helperEnv = "ELECTION_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(candidateProcess())
	}
	os.Exit(redistest.RunMain(m, &exampleAddr))
}

// setup starts a redis-server for one test and returns a plain client on it.
func setup(t *testing.T) (*redis.Client, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	return srv.Client(t), srv
}

// newClient returns a dlock Client closed at the end of the test. Each
// candidate on Redis gets one: a Client stands for a process.
func newClient(t *testing.T, rdb redis.UniversalClient, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c := dlock.MustNew(rdb, opts...)
	t.Cleanup(func() { _ = c.Close(bg) })
	return c
}

func mustNew(t *testing.T, l dlock.Locker, name string, opts ...election.Option) *election.Election {
	t.Helper()
	e, err := election.New(l, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// waitWaiters waits until n candidates wait in line for name, so the test
// knows the order in which they lined up.
func waitWaiters(t *testing.T, in election.Inspector, name string, n int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if info, err := in.Inspect(bg, name); err == nil && info.Waiters >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d candidates never lined up for %q", n, name)
		}
	}
}

// campaigned is the outcome of a Campaign run in the background.
type campaigned struct {
	l   *election.Leadership
	err error
	at  time.Time
}

func campaign(ctx context.Context, e *election.Election) <-chan campaigned {
	ch := make(chan campaigned, 1)
	go func() {
		l, err := e.Campaign(ctx)
		ch <- campaigned{l, err, time.Now()}
	}()
	return ch
}

// candidate is a candidate process started by a test.
type candidate struct {
	cmd   *exec.Cmd
	lines *bufio.Scanner
	stdin io.WriteCloser
}

func startCandidate(t *testing.T, addr, name, id string, ttl time.Duration) *candidate {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "REDIS_ADDR="+addr, "NAME="+name, "ID="+id, "TTL="+ttl.String())
	cmd.Stderr = os.Stderr
	// A test binary that dies must not leave a candidate behind, or one
	// stopped for ever.
	cmd.SysProcAttr = redistest.ChildAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = redistest.ResumeProcess(cmd.Process)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return &candidate{cmd: cmd, lines: bufio.NewScanner(out), stdin: stdin}
}

// next returns the candidate's next line, or fails the test after within.
func (c *candidate) next(t *testing.T, within time.Duration) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		if c.lines.Scan() {
			got <- c.lines.Text()
		} else {
			got <- "ended: " + fmt.Sprint(c.lines.Err())
		}
	}()
	select {
	case line := <-got:
		return line
	case <-time.After(within):
		t.Fatalf("no line from the candidate process within %v", within)
		return ""
	}
}

// candidateProcess campaigns once, says "leading FENCE" when it leads and
// "lost CAUSE" when its leadership ends, then waits for stdin to close.
func candidateProcess() int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	c := dlock.MustNew(rdb)
	defer c.Close(bg)
	ttl, _ := time.ParseDuration(os.Getenv("TTL"))
	e, err := election.New(c, os.Getenv("NAME"), election.WithIdentity(os.Getenv("ID")), election.WithTTL(ttl))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	l, err := e.Campaign(bg)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("leading", l.Fence())
	<-l.Context().Done()
	fmt.Println("lost", context.Cause(l.Context()))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}
