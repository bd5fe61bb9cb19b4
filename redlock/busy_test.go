package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
)

// TestBusyIsNotNoQuorum (issue 17, item 5): a lock held by another Redlock
// is reported busy, never ErrNoQuorum, whenever the nodes that failed leave
// a quorum reachable: with an even N (the first busy reply decides, before
// the others are in) and with a node down (its error often comes first).
// Acquire then keeps waiting, and gets the lock once the holder let it go.
func TestBusyIsNotNoQuorum(t *testing.T) {
	for _, c := range []struct{ nodes, down int }{{2, 0}, {4, 0}, {3, 1}, {5, 2}} {
		t.Run(fmt.Sprintf("%d nodes, %d down", c.nodes, c.down), func(t *testing.T) {
			_, rdbs := startNodes(t, c.nodes)
			// A node down whose error comes first, before any busy reply:
			// a hook that fails every command at once (a killed node's
			// client dials again and again, and its error often comes
			// last).
			for _, rdb := range rdbs[c.nodes-c.down:] {
				rdb.AddHook(down{})
			}
			holder := newRedlock(t, rdbs)
			waiter := newRedlock(t, rdbs)
			const ttl = 5 * time.Second
			l, err := holder.TryAcquire(bg, "busy", dlock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			for try := range 5 {
				_, err := waiter.TryAcquire(bg, "busy", dlock.WithTTL(ttl))
				if errors.Is(err, redlock.ErrNoQuorum) || !errors.Is(err, dlock.ErrNotObtained) {
					t.Fatalf("try %d: TryAcquire of a held lock: %v, want not obtained (busy)", try, err)
				}
			}
			time.AfterFunc(500*time.Millisecond, func() { _ = l.Release(bg) })
			start := time.Now()
			l2, err := waiter.Acquire(bg, "busy", dlock.WithTTL(ttl), dlock.WithWait(5*time.Second))
			if err != nil {
				t.Fatalf("Acquire while the holder releases after 500ms: %v", err)
			}
			defer l2.Release(bg)
			if d := time.Since(start); d < 400*time.Millisecond {
				t.Fatalf("got the lock after %v, before the holder released it", d)
			}
		})
	}
}

// down is a go-redis hook that fails every command at once, unsent.
type down struct{}

func (down) DialHook(next redis.DialHook) redis.DialHook { return next }

func (down) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		err := errors.New("injected: node down")
		cmd.SetErr(err)
		return err
	}
}

func (down) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		err := errors.New("injected: node down")
		for _, cmd := range cmds {
			cmd.SetErr(err)
		}
		return err
	}
}
