package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// Close ends everything it started: an acquisition whose grant is in
// Redis, with its reply still on the way when Close begins, is released (or
// given back) before Close returns. A process that closes its go-redis
// client or exits right after Close leaves nothing held for a TTL.
func TestCloseReleasesGrantInFlight(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	gate := newReplyGate("dlock:{inflight}", 1)
	rdb.AddHook(gate)
	t.Cleanup(gate.release)
	c := dlock.MustNew(rdb)

	got := make(chan error, 1)
	go func() {
		l, err := c.TryAcquire(bg, "inflight", dlock.WithTTL(30*time.Second))
		if err == nil {
			_ = l.Release(bg)
		}
		got <- err
	}()
	<-gate.held // the grant is in Redis, its reply held back
	closed := make(chan error, 1)
	go func() { closed <- c.Close(bg) }()

	select {
	case err := <-closed:
		// Close did not wait for the acquisition: is the grant still there?
		holder := rdb.HGet(bg, "dlock:{inflight}", "token").Val()
		gate.release()
		acqErr := <-got
		if holder != "" {
			t.Fatalf("Close returned (%v) with a grant in flight still held in Redis (the acquisition then returned %v)", err, acqErr)
		}
		got <- acqErr
	case <-time.After(300 * time.Millisecond):
		// Close waits for the acquisition: let its reply through.
		gate.release()
		if err := <-closed; err != nil {
			t.Fatalf("Close: %v", err)
		}
		if n := rdb.Exists(bg, "dlock:{inflight}").Val(); n != 0 {
			t.Fatal("Close returned, the acquisition's grant still held in Redis")
		}
	}
	if err := <-got; !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("the acquisition Close overtook returned %v, want ErrClosed", err)
	}
}

// Close keeps to its bound, the release timeout, with the Redis node
// stopped: the release of a held lock and the wait for an acquisition in
// flight both end by then, instead of Close hanging on the node.
func TestCloseBoundedWithNodeStopped(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const bound = 300 * time.Millisecond
	c := dlock.MustNew(rdb, dlock.WithReleaseTimeout(bound))
	mustAcquire(t, c, "stopped-held", dlock.WithTTL(10*time.Second))
	// The one-time server check has its own bound (5 s): done before the stop.
	waitFor(t, "the server check", func() bool { return dlock.ServerChecked(c) })

	srv.Pause()
	t.Cleanup(srv.Resume)
	inflight := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		_, err := c.TryAcquire(ctx, "stopped-inflight")
		inflight <- err
	}()
	waitFor(t, "the acquisition to be under way", func() bool { return dlock.InFlight(c) == 1 })

	start := time.Now()
	err := c.Close(bg)
	took := time.Since(start)
	if took > 4*bound {
		t.Fatalf("Close with the node stopped took %v, bound %v", took, bound)
	}
	if err == nil {
		t.Fatal("Close reported no error although the held lock could not be released")
	}
	t.Logf("Close returned after %v: %v", took, err)
	srv.Resume()
	if err := <-inflight; err == nil {
		t.Fatal("an acquisition under way at Close, node stopped, returned a lock")
	}
}
