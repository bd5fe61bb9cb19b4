package dlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestRenewalKeepsShortLeaseHeld(t *testing.T) {
	c, rdb, _ := setup(t)
	l := mustAcquire(t, c, "renew", dlock.WithTTL(300*time.Millisecond))
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if got := rdb.HGet(bg, "dlock:{renew}", "token").Val(); got != l.Token() {
			t.Fatalf("a renewed 300ms lock was lost after %v", 3*time.Second-time.Until(deadline))
		}
		time.Sleep(25 * time.Millisecond)
	}
	if err := l.Context().Err(); err != nil {
		t.Fatalf("lock context ended while renewed: %v", context.Cause(l.Context()))
	}
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrReleased) {
		t.Fatalf("cause after Release = %v, want ErrReleased", cause)
	}
}

func TestManyLocksOneRenewalLoop(t *testing.T) {
	const n = 10000
	// Long enough that a loaded 2-core machine (race detector, parallel
	// packages) renews 10,000 locks in time; the point is batching.
	const ttl = 2 * time.Second
	_, rdb, srv := setup(t)
	var trips atomic.Int64
	own := srv.Client(t)
	own.AddHook(countHook(&trips))
	c := newLocker(t, own)

	first := mustAcquire(t, c, "many-0", dlock.WithTTL(ttl))
	runtime.Gosched()
	withOne := dlockGoroutines()
	locks := []dlock.Lock{first}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 1 + w; i < n; i += 8 {
				l, err := c.TryAcquire(bg, "many-"+strconv.Itoa(i), dlock.WithTTL(ttl))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				locks = append(locks, l)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	withAll := dlockGoroutines()
	trips.Store(0)
	start := time.Now()
	time.Sleep(3 * ttl)
	rate := float64(trips.Load()) / time.Since(start).Seconds()

	// All still ours in Redis, checked in one pipeline.
	pipe := rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(locks))
	for i, l := range locks {
		cmds[i] = pipe.HGet(bg, "dlock:{"+l.Name()+"}", "token")
	}
	if _, err := pipe.Exec(bg); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	for i, l := range locks {
		if cmds[i].Val() != l.Token() || l.Context().Err() != nil {
			t.Fatalf("lock %s lost while %d locks were renewed: %v", l.Name(), n, context.Cause(l.Context()))
		}
	}
	t.Logf("%d locks with a %v TTL: %.1f renewal round trips/s; dlock goroutines with 1 lock %d, with %d locks %d",
		n, ttl, rate, withOne, n, withAll)
	if withAll > withOne {
		t.Fatalf("goroutines grew from %d to %d with %d locks: renewal is not one loop", withOne, withAll, n)
	}
	// 10,000 locks renewed every TTL/3 one by one would be 30,000 round
	// trips a second; pipelined they are a few dozen.
	if rate > 1000 {
		t.Fatalf("%.0f renewal round trips/s for %d locks: not batched", rate, n)
	}
}

// dlockGoroutines counts the goroutines that code of package dlock started:
// the process' total also moves with go-redis' and other tests' goroutines.
// Started by, not running: the renewal loop (package lease) runs dlock's
// renewal callbacks on its own goroutine, and a snapshot taken while it
// answers a pipeline counted it (seen once in CI under -race).
func dlockGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "created by github.com/dlock-go/dlock.") {
			n++
		}
	}
	return n
}

func TestLostWhenTakenOver(t *testing.T) {
	c, rdb, _ := setup(t)
	l := mustAcquire(t, c, "taken", dlock.WithTTL(600*time.Millisecond))
	// Someone breaks in (a force-unlock and a new holder): the next renewal
	// must see it and tell the holder at once, long before the TTL.
	rdb.HSet(bg, "dlock:{taken}", "token", "someone-else")
	select {
	case <-l.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("holder not told that its lock was taken over")
	}
	cause := context.Cause(l.Context())
	if !errors.Is(cause, dlock.ErrLockLost) || !strings.Contains(cause.Error(), "taken over") {
		t.Fatalf("cause = %v, want ErrLockLost naming the take-over", cause)
	}
	if err := l.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release after loss: %v, want ErrNotHeld", err)
	}
	if got := rdb.HGet(bg, "dlock:{taken}", "token").Val(); got != "someone-else" {
		t.Fatal("Release after loss touched the new holder")
	}
	if err := l.Refresh(bg, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Refresh after loss: %v, want ErrNotHeld", err)
	}
}

func TestBlackholedHolderToldBeforeTTL(t *testing.T) {
	_, rdb, srv := setup(t)
	cut, proxy := proxied(t, srv, redis.Options{MaxRetries: -1})
	c := newLocker(t, cut)

	const ttl = 600 * time.Millisecond
	l := mustAcquire(t, c, "cut", dlock.WithTTL(ttl))
	time.Sleep(ttl / 2) // let a renewal or two through first
	proxy.Blackhole()

	// Watch the key from a connection that is not cut.
	gone := make(chan time.Time, 1)
	go func() {
		for range 1000 {
			if rdb.Exists(bg, "dlock:{cut}").Val() == 0 {
				gone <- time.Now()
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		close(gone)
	}()
	var told time.Time
	select {
	case <-l.Context().Done():
		told = time.Now()
	case <-time.After(5 * time.Second):
		t.Fatal("blackholed holder never told")
	}
	expired, ok := <-gone
	if !ok {
		t.Fatal("lock never expired on the server")
	}
	margin := expired.Sub(told)
	t.Logf("holder told %v before the server let the %v lease expire", margin, ttl)
	if margin <= 0 {
		t.Fatalf("holder told %v after the lease expired on the server", -margin)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause = %v", cause)
	}
}

func TestWithoutRenewalEndsAtTTL(t *testing.T) {
	c, rdb, _ := setup(t)
	l := mustAcquire(t, c, "fixed", dlock.WithTTL(300*time.Millisecond), dlock.WithoutRenewal())
	<-l.Context().Done()
	if rdb.Exists(bg, "dlock:{fixed}").Val() != 1 {
		t.Fatal("context ended after the key expired: the drift margin was not kept")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause = %v", cause)
	}
}

func TestDo(t *testing.T) {
	c, rdb, _ := setup(t)
	ran := false
	err := c.Do(bg, "do", func(ctx context.Context) error {
		ran = true
		if rdb.Exists(bg, "dlock:{do}").Val() != 1 {
			t.Error("fn ran without the lock")
		}
		return io.ErrUnexpectedEOF
	})
	if !ran || !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do = %v, want fn's error alone", err)
	}
	if rdb.Exists(bg, "dlock:{do}").Val() != 0 {
		t.Fatal("Do did not release")
	}

	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the panic to go on", p)
			}
		}()
		_ = c.Do(bg, "do", func(ctx context.Context) error { panic("boom") })
	}()
	if rdb.Exists(bg, "dlock:{do}").Val() != 0 {
		t.Fatal("Do did not release on panic")
	}

	err = c.Do(bg, "do", func(ctx context.Context) error {
		rdb.HSet(bg, "dlock:{do}", "token", "intruder")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
			return errors.New("fn's context not cancelled on loss")
		}
	}, dlock.WithTTL(300*time.Millisecond))
	if !errors.Is(err, dlock.ErrLockLost) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Do with the lock lost: %v, want fn's error joined with ErrLockLost", err)
	}
}

func TestCloseReleasesHeldLocks(t *testing.T) {
	_, rdb, srv := setup(t)
	c := dlock.MustNew(srv.Client(t))
	a := mustAcquire(t, c, "close-a")
	b := mustAcquire(t, c, "close-b")
	if err := c.Close(bg); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(bg, "dlock:{close-a}", "dlock:{close-b}").Val(); n != 0 {
		t.Fatalf("%d locks left after Close", n)
	}
	for _, l := range []dlock.Lock{a, b} {
		if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrReleased) {
			t.Fatalf("cause after Close = %v", cause)
		}
	}
	if _, err := c.Acquire(bg, "close-a"); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
	}
}

// child is a worker process (startHolder) that holds a lock through addr
// and reports on stdout; the test talks to it line by line.
type child struct {
	cmd   *exec.Cmd
	lines *bufio.Scanner
	stdin io.WriteCloser
}

func startHolder(t *testing.T, addr, name string, ttl time.Duration) *child {
	t.Helper()
	cmd, stdin, out := startWorker(t, "hold", "REDIS_ADDR="+addr, "LOCK="+name, "TTL="+ttl.String())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ch := &child{cmd: cmd, lines: bufio.NewScanner(out), stdin: stdin}
	if line := ch.next(t); !strings.HasPrefix(line, "acquired") {
		t.Fatalf("holder process: %q", line)
	}
	return ch
}

// startWorker re-executes the test binary as a worker process of kind (see
// helperProcess) with env added, and returns it with its stdin and stdout.
// The caller waits for it.
func startWorker(t *testing.T, kind string, env ...string) (*exec.Cmd, io.WriteCloser, io.ReadCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+kind), env...)
	cmd.Stderr = os.Stderr
	// A test binary that dies must not leave a worker behind, or one
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
	return cmd, stdin, out
}

func (ch *child) next(t *testing.T) string {
	t.Helper()
	if !ch.lines.Scan() {
		t.Fatalf("holder process ended: %v", ch.lines.Err())
	}
	return ch.lines.Text()
}

// holdProcess is the worker of startHolder: acquire, report, wait for the
// lock's context to end and report the cause, then release on request.
func holdProcess(rdb *redis.Client) int {
	ttl, _ := time.ParseDuration(os.Getenv("TTL"))
	c := dlock.MustNew(rdb)
	l, err := c.Acquire(bg, os.Getenv("LOCK"), dlock.WithTTL(ttl), dlock.WithWait(5*time.Second))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("acquired", l.Fence())
	<-l.Context().Done()
	fmt.Println("ended", context.Cause(l.Context()))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "release" {
			fmt.Println("release", l.Release(bg))
		}
	}
	_ = c.Close(bg)
	return 0
}

func TestPausedHolderFindsLockLostOnResume(t *testing.T) {
	_, rdb, srv := setup(t)
	proxy, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	const ttl = 500 * time.Millisecond
	ch := startHolder(t, proxy.Addr(), "paused", ttl)

	if err := redistest.PauseProcess(ch.cmd.Process); err != nil {
		t.Fatal(err)
	}
	waitGone(t, rdb, "dlock:{paused}")
	other := mustAcquire(t, newLocker(t, rdb), "paused", dlock.WithTTL(10*time.Second))
	// Cut the paused holder off too: on resuming it must find its lock lost
	// from its own clock, without any answer from Redis.
	proxy.Blackhole()
	resumed := time.Now()
	if err := redistest.ResumeProcess(ch.cmd.Process); err != nil {
		t.Fatal(err)
	}
	line := ch.next(t)
	after := time.Since(resumed)
	t.Logf("resumed holder: %q, %v after SIGCONT", line, after)
	if !strings.HasPrefix(line, "ended dlock: lock lost") {
		t.Fatalf("resumed holder's context: %q, want lost", line)
	}
	if after > ttl {
		t.Fatalf("resumed holder learned of the loss only after %v", after)
	}
	proxy.Pass()
	fmt.Fprintln(ch.stdin, "release")
	if line := ch.next(t); line != "release dlock: release \"paused\": not held" {
		t.Fatalf("resumed holder's release: %q, want not held", line)
	}
	if got := rdb.HGet(bg, "dlock:{paused}", "token").Val(); got != other.Token() {
		t.Fatal("resumed holder's release touched the new holder")
	}
}

func TestKilledHolderFreesLockWithinTTL(t *testing.T) {
	_, rdb, srv := setup(t)
	const ttl = 500 * time.Millisecond
	ch := startHolder(t, srv.Addr, "killed", ttl)
	if err := ch.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	l, err := newLocker(t, rdb).Acquire(bg, "killed", dlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(killed)
	t.Logf("acquired %v after the holder was killed (TTL %v)", took, ttl)
	if took > ttl+time.Second {
		t.Fatalf("killed holder blocked the lock for %v, TTL %v", took, ttl)
	}
	_ = l.Release(bg)
}

func TestCloseEndsWaits(t *testing.T) {
	c, _, srv := setup(t)
	mustAcquire(t, c, "busy-at-close", dlock.WithTTL(10*time.Second))
	waiter := newClients(t, srv, 1)[0]
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(bg, "busy-at-close", dlock.WithWait(time.Minute))
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // let it line up
	if err := waiter.Close(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, dlock.ErrClosed) {
			t.Fatalf("wait ended by Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a wait under way")
	}
}
