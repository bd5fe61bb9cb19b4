package dlock_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// slowDial holds back every dial made while armed until released: a
// pub/sub connection to a Redis that is slow to accept.
type slowDial struct {
	armed   atomic.Bool
	dialing chan struct{} // closed at the first held dial
	open    chan struct{}
	once    atomic.Bool
}

func (d *slowDial) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if d.armed.Load() {
			if d.once.CompareAndSwap(false, true) {
				close(d.dialing)
			}
			select {
			case <-d.open:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return next(ctx, network, addr)
	}
}
func (d *slowDial) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (d *slowDial) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A waiter whose pub/sub connection is slow to dial holds up nobody else:
// the dial happens outside the mutex that every Acquire's hand-off
// bookkeeping takes, so a free lock is taken at once meanwhile.
func TestSlowPubSubDialStallsNoOtherAcquire(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	dial := &slowDial{dialing: make(chan struct{}), open: make(chan struct{})}
	rdb.AddHook(dial)
	t.Cleanup(func() { close(dial.open) })
	c := newLocker(t, rdb)
	other := newLocker(t, srv.Client(t))

	// The pool's connection is dialled before the dials slow down.
	if err := rdb.Ping(bg).Err(); err != nil {
		t.Fatal(err)
	}
	holder := mustAcquire(t, other, "busy", dlock.WithTTL(10*time.Second))
	defer holder.Release(bg)
	dial.armed.Store(true)

	waited := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		l, err := c.Acquire(ctx, "busy", dlock.WithWait(5*time.Second))
		if err == nil {
			_ = l.Release(bg)
		}
		waited <- err
	}()
	select {
	case <-dial.dialing: // the waiter's pub/sub dial is held
	case err := <-waited:
		t.Fatalf("the waiter returned before dialling its pub/sub connection: %v", err)
	}

	ctx, cancel := context.WithTimeout(bg, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	l, err := c.Acquire(ctx, "free", dlock.WithWait(time.Second))
	if err != nil {
		t.Fatalf("a free lock, while another waiter's dial hangs: %v after %v", err, time.Since(start))
	}
	_ = l.Release(bg)
}
