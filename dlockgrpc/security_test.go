package dlockgrpc_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockgrpc"
)

// A stream kept open by its client (the handler blocked in Recv, not looking
// at its context) holds its lock no longer than the interceptor's bound: a
// second stream for the same order gets in once the bound has passed. Before
// the bound, renewal kept the lock for the stream's whole life.
func TestLongStreamCannotHoldPastBound(t *testing.T) {
	c, rdb := setup(t)
	const bound = time.Second
	hang := make(chan struct{})
	defer close(hang)
	first := make(chan error, 1)
	var calls atomic.Int32
	conn := serve(t, c, &orders{watch: func(ctx context.Context, id string, send func(string) error) error {
		if calls.Add(1) > 1 {
			return send("served")
		}
		<-hang // as a handler waiting on the client's next message
		first <- context.Cause(ctx)
		return nil
	}}, names, dlockgrpc.WithAcquireOptions(dlock.WithTTL(300*time.Millisecond)), dlockgrpc.WithMaxHold(bound))

	go func() { _ = watch(conn, "1") }()
	held := false
	for deadline := time.Now().Add(patience); !held && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		held = rdb.Exists(bg, "dlock:{watch:1}").Val() == 1
	}
	if !held {
		t.Fatal("the first stream never took its lock")
	}
	start := time.Now()
	var got result
	for time.Since(start) < 3*bound {
		if got = watch(conn, "1"); got.err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	got.expect(t, codes.OK, "served")
	if took := time.Since(start); took > bound+500*time.Millisecond {
		t.Fatalf("the lock freed %v after the first stream took it, want about the bound %v", took, bound)
	}
	hang <- struct{}{}
	if cause := await(t, first, "the first stream's handler"); !errors.Is(cause, dlock.ErrHoldLimit) {
		t.Fatalf("the first stream's context ended with %v, want the hold limit", cause)
	}
}

// Without options the interceptors bound a hold by DefaultMaxHold; a
// dlock.WithMaxHold of the user's replaces it.
func TestDefaultMaxHold(t *testing.T) {
	c, rdb := setup(t)
	for _, tc := range []struct {
		name string
		opts []dlockgrpc.Option
		max  time.Duration
	}{
		{"default", nil, dlockgrpc.DefaultMaxHold},
		{"user's bound wins", []dlockgrpc.Option{dlockgrpc.WithAcquireOptions(dlock.WithMaxHold(2 * time.Second))}, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pttl time.Duration
			opts := append([]dlockgrpc.Option{dlockgrpc.WithAcquireOptions(dlock.WithTTL(time.Minute))}, tc.opts...)
			conn := serve(t, c, &orders{place: func(ctx context.Context, id string) (string, error) {
				pttl = rdb.PTTL(ctx, "dlock:{order:dm}").Val()
				return "ok", nil
			}}, names, opts...)
			place(conn, "dm").expect(t, codes.OK, "ok")
			if pttl <= 0 || pttl > tc.max {
				t.Fatalf("lease %v with a TTL of a minute, want at most the bound %v", pttl, tc.max)
			}
		})
	}
}
