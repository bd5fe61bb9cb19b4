package dlockgrpc_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockgrpc"
	"github.com/dlock-go/dlock/redlock"
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

// stallHook holds every script call (the acquire) until its context ends,
// while on: a Redis round trip the client can walk away from.
type stallHook struct {
	on      *atomic.Bool
	entered chan<- struct{}
}

func (stallHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h stallHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); h.on.Load() && (n == "evalsha" || n == "eval") {
			select {
			case h.entered <- struct{}{}:
			default:
			}
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}
func (stallHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A client that cancels its call while the lock is being acquired gets
// Canceled on the server's side too, not Unavailable: a server's
// Unavailable rate is read as "the lock service is down". What the
// server returns is recorded by an interceptor outside dlockgrpc's, as a
// metrics interceptor would see it.
func TestClientCancelIsNotUnavailable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: startRedis(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	var on atomic.Bool
	on.Store(true)
	entered := make(chan struct{}, 1)
	rdb.AddHook(stallHook{on: &on, entered: entered})
	c := dlock.MustNew(rdb)
	t.Cleanup(func() { _ = c.Close(bg) })

	returned := make(chan error, 1)
	record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		returned <- err
		return resp, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(record, dlockgrpc.MustUnaryServerInterceptor(c, names)))
	s.RegisterService(&ordersDesc, &orders{place: func(context.Context, string) (string, error) {
		t.Error("the handler ran")
		return "", nil
	}})
	served := make(chan struct{})
	go func() { defer close(served); _ = s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(); <-served })
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- conn.Invoke(ctx, placeMethod, wrapperspb.String("c"), new(wrapperspb.StringValue))
	}()
	await(t, entered, "the acquire's round trip")
	cancel()
	await(t, done, "the client")
	on.Store(false) // the give-back after the cut round trip may go through
	if got := status.Code(await(t, returned, "the server's answer")); got != codes.Canceled {
		t.Fatalf("the server answered %v for a call its client cancelled, want Canceled", got)
	}
}

// The default hold bound must not break a Locker that refuses
// dlock.WithMaxHold: a Redlock behind the interceptor answered Internal to
// every call when the default came in. It is asked again without it.
func TestDefaultBoundSparesRedlock(t *testing.T) {
	_, rdb := setup(t)
	r, err := redlock.New([]redis.UniversalClient{rdb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	conn := serve(t, r, &orders{place: func(ctx context.Context, id string) (string, error) { return "ok", nil }}, names)
	for range 3 {
		place(conn, "rl").expect(t, codes.OK, "ok")
	}
}
