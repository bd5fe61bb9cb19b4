package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// With ContextTimeoutEnabled a command's read ends at its caller's deadline
// (the proxied clients of these tests rely on it: "a blackholed read ends at
// the caller's deadline"). A lock call that the Batcher put in a pipeline
// with a call of no deadline loses that: the pipeline runs on no deadline,
// and the caller waits for go-redis' ReadTimeout instead of its own.
func TestBatchedCallEndsAtItsDeadline(t *testing.T) {
	srv := redistest.Start(t)
	rdb, proxy := proxied(t, srv, redis.Options{ReadTimeout: 3 * time.Second, MaxRetries: -1})
	c := newLocker(t, rdb, dlock.WithBatchDepth(2)) // the two calls below fill the lane
	if l, err := c.TryAcquire(bg, "warm"); err != nil {
		t.Fatal(err)
	} else if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	t.Cleanup(proxy.Pass)

	// Two calls out, into the blackhole, each ending at its 600 ms deadline.
	outs := make(chan error, 2)
	for _, name := range []string{"out1", "out2"} {
		go func() {
			ctx, cancel := context.WithTimeout(bg, 600*time.Millisecond)
			defer cancel()
			_, err := c.TryAcquire(ctx, name)
			outs <- err
		}()
	}
	// A call with no deadline queues first (it will lead the batch) ...
	lead := make(chan error, 1)
	go func() { _, err := c.TryAcquire(bg, "lead"); lead <- err }()
	waitFor(t, "the lead call to queue", func() bool { return dlock.QueuedCalls(c) == 1 })
	// ... then one that must end by its deadline, 1.2 s from now: after the
	// outs come back at 600 ms, so it is taken into the batch.
	ctx, cancel := context.WithTimeout(bg, 1200*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	follower := make(chan error, 1)
	go func() { _, err := c.TryAcquire(ctx, "follower"); follower <- err }()
	waitFor(t, "the follower to queue", func() bool { return dlock.QueuedCalls(c) == 2 })

	err := <-follower
	late := time.Since(deadline)
	t.Logf("follower: %v, %v after its deadline", err, late.Round(time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, dlock.ErrNotObtained) {
		t.Logf("unexpected error kind: %v", err)
	}
	if late > 700*time.Millisecond {
		t.Errorf("a lock call on a ContextTimeoutEnabled client returned %v after its context's deadline (batched with a call of no deadline)", late.Round(time.Millisecond))
	}
	<-outs
	<-outs
	proxy.Pass()
	<-lead
}

type ctxKey struct{}

// The lock's context is made on the first call of Context: one asked for
// only after the lock ended must already be cancelled, with the cause of
// the end, and still carry the acquirer's values and the lock itself.
func TestLazyLockContextAfterEnd(t *testing.T) {
	c := newLocker(t, redistest.Start(t).Client(t))
	actx, acancel := context.WithCancel(context.WithValue(bg, ctxKey{}, "trace-1"))
	lost, err := c.TryAcquire(actx, "lazy-lost", dlock.WithTTL(300*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	released, err := c.TryAcquire(actx, "lazy-released")
	if err != nil {
		t.Fatal(err)
	}
	acancel() // the acquirer's cancellation is not the lock's
	if err := released.Release(bg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	for _, tc := range []struct {
		l    dlock.Lock
		want error
	}{{lost, dlock.ErrLockLost}, {released, dlock.ErrReleased}} {
		ctx := tc.l.Context()
		select {
		case <-ctx.Done():
		default:
			t.Fatalf("%s: context of an ended lock not cancelled", tc.l.Name())
		}
		if cause := context.Cause(ctx); !errors.Is(cause, tc.want) {
			t.Errorf("%s: cause %v, want %v", tc.l.Name(), cause, tc.want)
		}
		if v := ctx.Value(ctxKey{}); v != "trace-1" {
			t.Errorf("%s: acquirer's value %v lost", tc.l.Name(), v)
		}
		if got, ok := dlock.FromContext(ctx); !ok || got != tc.l {
			t.Errorf("%s: FromContext found %v, %v", tc.l.Name(), got, ok)
		}
		if tc.l.Context() != ctx {
			t.Errorf("%s: a second Context call made another context", tc.l.Name())
		}
	}
}
