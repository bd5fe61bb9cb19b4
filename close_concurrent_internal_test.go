package dlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// holdMatch holds back the reply of the first command whose arguments
// contain match, after Redis ran it.
type holdMatch struct {
	match string
	once  sync.Once
	held  chan struct{}
	open  chan struct{}
}

func (h *holdMatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}
func (h *holdMatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *holdMatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && strings.Contains(fmt.Sprint(cmd.Args()...), h.match) {
			first := false
			h.once.Do(func() { first = true })
			if first {
				close(h.held)
				<-h.open
			}
		}
		return err
	}
}

func draining(c *Client) bool { return c.own.Draining() }

// closesWaiting counts the goroutines waiting in a select inside
// Client.Close (for the acquisitions in flight).
func closesWaiting() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "dlock.(*Client).Close(") && strings.Contains(g, " [select") {
			n++
		}
	}
	return n
}

// Two Close calls while an acquisition is in flight both return once it
// ends: they wait on one drained channel, which the acquisition's end
// closes, not each on its own with the second replacing the first's (which
// left the first waiting out its release timeout). A process's shutdown
// hooks closing the same Client from two places, or a deferred Close after
// an explicit one, meet this.
func TestConcurrentCloseDoesNotWaitOutReleaseTimeout(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	hook := &holdMatch{match: "dlock:{inflight2}", held: make(chan struct{}), open: make(chan struct{})}
	rdb.AddHook(hook)
	opened := false
	open := func() {
		if !opened {
			opened = true
			close(hook.open)
		}
	}
	defer open()
	const releaseTimeout = 4 * time.Second
	c, err := New(rdb, WithReleaseTimeout(releaseTimeout))
	if err != nil {
		t.Fatal(err)
	}

	acquired := make(chan error, 1)
	go func() {
		l, err := c.TryAcquire(context.Background(), "inflight2", WithTTL(10*time.Second))
		if err == nil {
			_ = l.Release(context.Background())
		}
		acquired <- err
	}()
	<-hook.held // the grant is in Redis, its reply held back

	first := make(chan time.Time, 1)
	go func() { _ = c.Close(context.Background()); first <- time.Now() }()
	waitInternal(t, "the first Close to wait for the acquisition", func() bool { return closesWaiting() == 1 && draining(c) })
	second := make(chan time.Time, 1)
	go func() { _ = c.Close(context.Background()); second <- time.Now() }()
	waitInternal(t, "the second Close to wait too", func() bool { return closesWaiting() == 2 })

	open() // the acquisition's reply comes; it releases its lock and ends
	freed := time.Now()
	if err := <-acquired; !errors.Is(err, ErrClosed) {
		t.Fatalf("the acquisition in flight returned %v, want ErrClosed", err)
	}
	for name, ch := range map[string]chan time.Time{"first": first, "second": second} {
		select {
		case at := <-ch:
			t.Logf("%s Close returned %v after the acquisition's reply", name, at.Sub(freed).Round(time.Millisecond))
		case <-time.After(releaseTimeout / 2):
			t.Errorf("the %s Close still waits %v after the acquisition in flight ended (release timeout %v)", name, releaseTimeout/2, releaseTimeout)
			<-ch
		}
	}
}

// waitInternal polls cond, bounded, for state other goroutines set up.
func waitInternal(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
