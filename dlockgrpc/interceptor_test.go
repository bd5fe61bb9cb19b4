package dlockgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockgrpc"
	"github.com/dlock-go/dlock/dlocktest"
)

// patience bounds every wait in these tests: far above what loopback needs,
// so only a real hang fails them.
const patience = 10 * time.Second

var bg = context.Background()

// The test service, registered by hand so no protoc is needed: Place and
// Echo are unary, Watch streams from the server. The handlers are fields,
// set per test.
type orders struct {
	place func(ctx context.Context, id string) (string, error)
	watch func(ctx context.Context, id string, send func(string) error) error
}

const (
	placeMethod = "/test.Orders/Place"
	echoMethod  = "/test.Orders/Echo"
	watchMethod = "/test.Orders/Watch"
)

func unaryHandler(method string, call func(s *orders, ctx context.Context, in string) (string, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: method[strings.LastIndex(method, "/")+1:],
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				out, err := call(srv.(*orders), ctx, req.(*wrapperspb.StringValue).GetValue())
				if err != nil {
					return nil, err
				}
				return wrapperspb.String(out), nil
			}
			if interceptor == nil {
				return h(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
		},
	}
}

var ordersDesc = grpc.ServiceDesc{
	ServiceName: "test.Orders",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		unaryHandler(placeMethod, func(s *orders, ctx context.Context, in string) (string, error) { return s.place(ctx, in) }),
		unaryHandler(echoMethod, func(_ *orders, _ context.Context, in string) (string, error) { return in, nil }),
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Watch",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			return srv.(*orders).watch(stream.Context(), in.GetValue(), func(s string) error {
				return stream.SendMsg(wrapperspb.String(s))
			})
		},
	}},
}

// names locks Place by the order in its request and Watch by the order in
// its metadata; Echo runs without a lock.
var names = dlockgrpc.ByMethod(map[string]dlockgrpc.NameFunc{
	placeMethod: dlockgrpc.FromRequest("order:", (*wrapperspb.StringValue).GetValue),
	watchMethod: dlockgrpc.FromMetadata("watch:", "x-order-id"),
})

// serve starts a gRPC server for svc on a loopback port, with both
// interceptors, and returns a client connection to it.
func serve(t *testing.T, c dlock.Locker, svc *orders, name dlockgrpc.NameFunc, opts ...dlockgrpc.Option) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(
		grpc.ChainUnaryInterceptor(dlockgrpc.MustUnaryServerInterceptor(c, name, opts...)),
		grpc.ChainStreamInterceptor(dlockgrpc.MustStreamServerInterceptor(c, name, opts...)),
	)
	s.RegisterService(&ordersDesc, svc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-served
	})
	// passthrough: the address is an IP literal, no resolver needed.
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// setup starts a redis-server for one test and returns a dlock client on it,
// closed at the end of the test, and a plain client to look at Redis with.
func setup(t *testing.T) (*dlock.Client, *redis.Client) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: startRedis(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c := dlock.MustNew(rdb)
	t.Cleanup(func() { _ = c.Close(bg) })
	return c, rdb
}

type result struct {
	out     string
	err     error
	trailer metadata.MD
}

func place(conn *grpc.ClientConn, id string) result {
	ctx, cancel := context.WithTimeout(bg, patience)
	defer cancel()
	out := new(wrapperspb.StringValue)
	var trailer metadata.MD
	err := conn.Invoke(ctx, placeMethod, wrapperspb.String(id), out, grpc.Trailer(&trailer))
	return result{out: out.GetValue(), err: err, trailer: trailer}
}

func echo(conn *grpc.ClientConn, s string) result {
	ctx, cancel := context.WithTimeout(bg, patience)
	defer cancel()
	out := new(wrapperspb.StringValue)
	err := conn.Invoke(ctx, echoMethod, wrapperspb.String(s), out)
	return result{out: out.GetValue(), err: err}
}

// watch opens a Watch stream with the order id in metadata (none when id is
// empty) and returns all it received, joined by commas.
func watch(conn *grpc.ClientConn, id string) result {
	ctx, cancel := context.WithTimeout(bg, patience)
	defer cancel()
	if id != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-order-id", id)
	}
	cs, err := conn.NewStream(ctx, &ordersDesc.Streams[0], watchMethod)
	if err != nil {
		return result{err: err}
	}
	if err := cs.SendMsg(wrapperspb.String(id)); err != nil {
		return result{err: err}
	}
	if err := cs.CloseSend(); err != nil {
		return result{err: err}
	}
	var got []string
	for range 100 { // the test streams send a few messages at most
		m := new(wrapperspb.StringValue)
		err := cs.RecvMsg(m)
		if err != nil {
			if err == io.EOF { // the stream ended with OK
				err = nil
			}
			return result{out: strings.Join(got, ","), err: err, trailer: cs.Trailer()}
		}
		got = append(got, m.GetValue())
	}
	return result{err: errors.New("stream did not end")}
}

func (r result) expect(t *testing.T, code codes.Code, has string) {
	t.Helper()
	st := status.Convert(r.err)
	text := r.out
	if r.err != nil {
		text = st.Message()
	}
	if st.Code() != code || !strings.Contains(text, has) {
		t.Fatalf("got %v %q, want %v with %q", st.Code(), text, code, has)
	}
}

func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(patience):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// Two calls for one order at once: one runs, the other is refused Aborted
// with the holder's remaining lease as RetryInfo and as retry pushback.
func TestSameOrderConcurrentCalls(t *testing.T) {
	c, rdb := setup(t)
	const ttl = 10 * time.Second
	entered := make(chan struct{}, 2)
	finish := make(chan struct{})
	var running atomic.Int32
	conn := serve(t, c, &orders{place: func(ctx context.Context, id string) (string, error) {
		running.Add(1)
		entered <- struct{}{}
		select {
		case <-finish:
			return "placed " + id, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}}, names,
		// A fixed lease, so the holder's remaining lease only goes down while
		// the test measures it.
		dlockgrpc.WithAcquireOptions(dlock.WithTTL(ttl), dlock.WithoutRenewal()))

	results := make(chan result, 2)
	for range 2 {
		go func() { results <- place(conn, "42") }()
	}
	busy := await(t, results, "the refused call")
	left, err := rdb.PTTL(bg, "dlock:{order:42}").Result()
	if err != nil {
		t.Fatal(err)
	}
	busy.expect(t, codes.Aborted, "busy")
	// The refusal left Redis after the script read the holder's lease, so
	// that lease lies between what is left now and the full TTL.
	var delay time.Duration
	for _, d := range status.Convert(busy.err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			delay = ri.GetRetryDelay().AsDuration()
		}
	}
	if delay < left || delay > ttl {
		t.Errorf("RetryInfo delay %v, want within [%v, %v]", delay, left, ttl)
	}
	pushback, err := strconv.Atoi(strings.Join(busy.trailer.Get("grpc-retry-pushback-ms"), ""))
	if err != nil || time.Duration(pushback)*time.Millisecond != delay.Truncate(time.Millisecond) {
		t.Errorf("grpc-retry-pushback-ms %v, want %d", busy.trailer.Get("grpc-retry-pushback-ms"), delay.Milliseconds())
	}

	await(t, entered, "the winner's handler")
	if n := running.Load(); n != 1 {
		t.Fatalf("%d handlers ran, want 1", n)
	}
	close(finish)
	await(t, results, "the winner's answer").expect(t, codes.OK, "placed 42")
	// Released: the next call for the order runs.
	go func() { results <- place(conn, "42") }()
	await(t, entered, "the handler after release")
	await(t, results, "the answer after release").expect(t, codes.OK, "placed 42")
}

// Calls for different orders run side by side: each handler waits until
// both are inside, which only happens if neither lock excludes the other.
func TestDifferentOrdersRunInParallel(t *testing.T) {
	c, _ := setup(t)
	var mu sync.Mutex
	inside := 0
	both := make(chan struct{})
	conn := serve(t, c, &orders{place: func(ctx context.Context, id string) (string, error) {
		mu.Lock()
		if inside++; inside == 2 {
			close(both)
		}
		mu.Unlock()
		select {
		case <-both:
			return "together", nil
		case <-time.After(patience):
			return "", status.Error(codes.Internal, "alone: the other order's handler never came in")
		}
	}}, names)
	results := make(chan result, 2)
	for _, id := range []string{"1", "2"} {
		go func() { results <- place(conn, id) }()
	}
	for range 2 {
		await(t, results, "an order's answer").expect(t, codes.OK, "together")
	}
}

// A handler whose lock is lost sees its context cancelled with a cause
// matching dlock.ErrLockLost; returning the context's error gives the client
// Aborted "lock lost"; the release-error handler is told of the loss.
func TestLostLockCancelsHandlerContext(t *testing.T) {
	c, rdb := setup(t)
	entered := make(chan string, 1)
	causes := make(chan error, 1)
	releaseErrs := make(chan error, 1)
	wait := func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			causes <- context.Cause(ctx)
			return ctx.Err()
		case <-time.After(patience):
			causes <- errors.New("never cancelled")
			return nil
		}
	}
	conn := serve(t, c, &orders{
		place: func(ctx context.Context, id string) (string, error) {
			entered <- "dlock:{order:" + id + "}"
			return "", wait(ctx)
		},
		watch: func(ctx context.Context, id string, send func(string) error) error {
			if err := send("started"); err != nil {
				return err
			}
			entered <- "dlock:{watch:" + id + "}"
			return wait(ctx)
		},
	}, names,
		// A short lease: renewal every 100ms notices the loss quickly.
		dlockgrpc.WithAcquireOptions(dlock.WithTTL(300*time.Millisecond)),
		dlockgrpc.WithReleaseErrorHandler(func(_ context.Context, _ string, err error) { releaseErrs <- err }))

	for _, tc := range []struct {
		name string
		call func() result
		lose func(key string) error
	}{
		{"unary, key deleted", func() result { return place(conn, "7") },
			func(key string) error { return rdb.Del(bg, key).Err() }},
		{"stream, token overwritten", func() result { return watch(conn, "8") },
			func(key string) error { return rdb.HSet(bg, key, "token", "someone-else").Err() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			results := make(chan result, 1)
			go func() { results <- tc.call() }()
			key := await(t, entered, "the handler")
			if err := tc.lose(key); err != nil {
				t.Fatal(err)
			}
			if cause := await(t, causes, "the handler's context"); !errors.Is(cause, dlock.ErrLockLost) {
				t.Fatalf("handler context ended with %v, want dlock.ErrLockLost", cause)
			}
			await(t, results, "the answer").expect(t, codes.Aborted, "lock was lost")
			if err := await(t, releaseErrs, "the release error"); !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("release error %v, want dlock.ErrLockLost", err)
			}
		})
	}
}

// Calls that name no valid lock are refused InvalidArgument (or the status
// the NameFunc chose) and never reach the handler or Redis.
func TestInvalidNames(t *testing.T) {
	c, rdb := setup(t)
	svc := &orders{
		place: func(context.Context, string) (string, error) { t.Error("Place ran"); return "", nil },
		watch: func(context.Context, string, func(string) error) error { t.Error("Watch ran"); return nil },
	}
	conn := serve(t, c, svc, names)
	place(conn, "").expect(t, codes.InvalidArgument, "lock key is empty")
	place(conn, strings.Repeat("x", dlock.MaxNameLength)).expect(t, codes.InvalidArgument, "invalid lock")
	watch(conn, "").expect(t, codes.InvalidArgument, `missing metadata "x-order-id"`)

	plain := serve(t, c, svc, func(context.Context, string, any) (string, error) {
		return "", errors.New("secret detail")
	})
	r := place(plain, "1")
	r.expect(t, codes.InvalidArgument, "names no lock")
	if strings.Contains(status.Convert(r.err).Message(), "secret") {
		t.Errorf("the message leaks the NameFunc's error: %v", r.err)
	}
	own := serve(t, c, svc, func(context.Context, string, any) (string, error) {
		return "", status.Error(codes.Unauthenticated, "who are you?")
	})
	place(own, "1").expect(t, codes.Unauthenticated, "who are you?")

	if keys, _ := rdb.Keys(bg, "*").Result(); len(keys) != 0 {
		t.Errorf("refused calls wrote to Redis: %v", keys)
	}
}

// With Redis unreachable or the dlock client closed, locked calls are
// refused Unavailable; calls that need no lock still run.
func TestRedisDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := l.Addr().String()
	l.Close() // nothing listens there now: every dial is refused
	rdb := redis.NewClient(&redis.Options{Addr: closedAddr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	down := dlock.MustNew(rdb)
	t.Cleanup(func() { _ = down.Close(bg) })
	closed, _ := setup(t)
	if err := closed.Close(bg); err != nil {
		t.Fatal(err)
	}
	svc := &orders{
		place: func(context.Context, string) (string, error) { t.Error("Place ran"); return "", nil },
		watch: func(context.Context, string, func(string) error) error { t.Error("Watch ran"); return nil },
	}
	for name, c := range map[string]*dlock.Client{"unreachable": down, "closed": closed} {
		t.Run(name, func(t *testing.T) {
			conn := serve(t, c, svc, names)
			r := place(conn, "1")
			r.expect(t, codes.Unavailable, "lock service unavailable")
			if strings.Contains(r.err.Error(), closedAddr) {
				t.Errorf("the message leaks the Redis address: %v", r.err)
			}
			watch(conn, "1").expect(t, codes.Unavailable, "lock service unavailable")
			echo(conn, "no lock needed").expect(t, codes.OK, "no lock needed")
		})
	}
}

// A stream whose lock is held elsewhere is refused; the handler reaches its
// lock through stream.Context().
func TestStreamBusyAndFromContext(t *testing.T) {
	c, _ := setup(t)
	conn := serve(t, c, &orders{watch: func(ctx context.Context, id string, send func(string) error) error {
		l, ok := dlock.FromContext(ctx)
		if !ok {
			return status.Error(codes.Internal, "no lock in the stream's context")
		}
		return send(fmt.Sprintf("%s fence>0:%t", l.Name(), l.Fence() > 0))
	}}, names, dlockgrpc.WithBusyCode(codes.ResourceExhausted))

	watch(conn, "5").expect(t, codes.OK, "watch:5 fence>0:true")

	held, err := c.TryAcquire(bg, "watch:6")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(bg)
	watch(conn, "6").expect(t, codes.ResourceExhausted, "busy")
	if _, ok := dlock.FromContext(bg); ok {
		t.Error("FromContext found a lock in a plain context")
	}
}

// The interceptor alone, as grpc calls it: a panicking handler releases
// its lock and the panic goes on; a call whose deadline ends its wait for a
// busy lock gets DeadlineExceeded; a misconfigured TTL is Internal.
func TestInterceptorDirect(t *testing.T) {
	c, _ := setup(t)
	info := &grpc.UnaryServerInfo{FullMethod: placeMethod}
	req := wrapperspb.String("9")

	t.Run("panic", func(t *testing.T) {
		boom := errors.New("boom")
		intercept := dlockgrpc.MustUnaryServerInterceptor(c, names)
		func() {
			defer func() {
				if p := recover(); p != boom {
					t.Fatalf("recovered %v, want the handler's panic value", p)
				}
			}()
			_, _ = intercept(bg, req, info, func(context.Context, any) (any, error) { panic(boom) })
			t.Fatal("no panic")
		}()
		l, err := c.TryAcquire(bg, "order:9")
		if err != nil {
			t.Fatalf("the lock was not released after the panic: %v", err)
		}
		_ = l.Release(bg)
	})

	t.Run("deadline while waiting", func(t *testing.T) {
		held, err := c.TryAcquire(bg, "order:9")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(bg)
		intercept := dlockgrpc.MustUnaryServerInterceptor(c, names, dlockgrpc.WithAcquireOptions(dlock.WithWait(patience)))
		ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
		defer cancel()
		_, err = intercept(ctx, req, info, func(context.Context, any) (any, error) {
			t.Error("the handler ran")
			return nil, nil
		})
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("got %v, want DeadlineExceeded", err)
		}
	})

	t.Run("misconfigured TTL", func(t *testing.T) {
		intercept := dlockgrpc.MustUnaryServerInterceptor(c, names, dlockgrpc.WithAcquireOptions(dlock.WithTTL(time.Nanosecond)))
		_, err := intercept(bg, req, info, func(context.Context, any) (any, error) {
			t.Error("the handler ran")
			return nil, nil
		})
		if status.Code(err) != codes.Internal {
			t.Fatalf("got %v, want Internal", err)
		}
	})
}

func TestInterceptorsRefuseBadWiring(t *testing.T) {
	c, _ := setup(t)
	for _, tc := range []struct {
		name   string
		locker dlock.Locker
		names  dlockgrpc.NameFunc
		opts   []dlockgrpc.Option
	}{
		{"nil locker", nil, names, nil},
		{"nil NameFunc", c, nil, nil},
		{"busy OK", c, names, []dlockgrpc.Option{dlockgrpc.WithBusyCode(codes.OK)}},
		{"busy 99", c, names, []dlockgrpc.Option{dlockgrpc.WithBusyCode(99)}},
		{"negative max hold", c, names, []dlockgrpc.Option{dlockgrpc.WithMaxHold(-time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if u, err := dlockgrpc.UnaryServerInterceptor(tc.locker, tc.names, tc.opts...); err == nil || u != nil {
				t.Errorf("UnaryServerInterceptor: %v; want an error and no interceptor", err)
			}
			if s, err := dlockgrpc.StreamServerInterceptor(tc.locker, tc.names, tc.opts...); err == nil || s != nil {
				t.Errorf("StreamServerInterceptor: %v; want an error and no interceptor", err)
			}
			for _, must := range []func(){
				func() { dlockgrpc.MustUnaryServerInterceptor(tc.locker, tc.names, tc.opts...) },
				func() { dlockgrpc.MustStreamServerInterceptor(tc.locker, tc.names, tc.opts...) },
			} {
				func() {
					defer func() {
						if recover() == nil {
							t.Error("a Must constructor did not panic")
						}
					}()
					must()
				}()
			}
		})
	}
}

// fieldErrors is a handler error of a type == cannot compare (a slice, like
// go-playground/validator's ValidationErrors).
type fieldErrors []string

func (e fieldErrors) Error() string { return strings.Join(e, "; ") }

func TestInterceptorReviewCases(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: placeMethod}
	req := wrapperspb.String("9")
	locker := dlocktest.MustNew()
	t.Cleanup(func() { _ = locker.Close(bg) })

	t.Run("uncomparable handler error", func(t *testing.T) {
		intercept := dlockgrpc.MustUnaryServerInterceptor(locker, names)
		_, err := intercept(bg, req, info, func(context.Context, any) (any, error) {
			return nil, fieldErrors{"order id", "amount"}
		})
		var fe fieldErrors
		if !errors.As(err, &fe) || len(fe) != 2 {
			t.Fatalf("got %v, want the handler's own error", err)
		}
	})
	t.Run("panic after a loss is reported", func(t *testing.T) {
		reported := make(chan error, 1)
		intercept := dlockgrpc.MustUnaryServerInterceptor(locker, names,
			dlockgrpc.WithReleaseErrorHandler(func(_ context.Context, _ string, err error) { reported <- err }))
		func() {
			defer func() { _ = recover() }()
			_, _ = intercept(bg, req, info, func(ctx context.Context, _ any) (any, error) {
				lock, _ := dlock.FromContext(ctx)
				locker.Expire(lock.Name())
				<-ctx.Done()
				panic("after the loss")
			})
		}()
		select {
		case err := <-reported:
			if !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("reported %v, want ErrLockLost", err)
			}
		default:
			t.Fatal("the release-error handler was not called")
		}
	})
	t.Run("nil client and negative wait refused", func(t *testing.T) {
		var nilClient *dlock.Client
		if _, err := dlockgrpc.UnaryServerInterceptor(nilClient, names); err == nil {
			t.Error("a nil *dlock.Client was accepted")
		}
		_, err := dlockgrpc.StreamServerInterceptor(locker, names, dlockgrpc.WithAcquireOptions(dlock.WithWait(-time.Second)))
		if !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("a negative wait: %v, want ErrInvalidOption", err)
		}
	})
}

// Method locks by the full method name: while one call of a method runs, a
// second call of it is refused as busy, whatever its request, and the lock
// is named prefix + the method.
func TestMethodLocksOneCallOfAMethod(t *testing.T) {
	c, _ := setup(t)
	info := &grpc.UnaryServerInfo{FullMethod: placeMethod}
	intercept := dlockgrpc.MustUnaryServerInterceptor(c, dlockgrpc.Method("rpc:"))
	_, err := intercept(bg, wrapperspb.String("1"), info, func(ctx context.Context, _ any) (any, error) {
		l, ok := dlock.FromContext(ctx)
		if !ok || l.Name() != "rpc:"+placeMethod {
			t.Errorf("the handler's lock: %v, %v; want %q", l, ok, "rpc:"+placeMethod)
		}
		// A second call of the method, with another request, meanwhile.
		_, err := intercept(bg, wrapperspb.String("2"), info, func(context.Context, any) (any, error) {
			t.Error("a second call of the method ran while the first held its lock")
			return nil, nil
		})
		if status.Code(err) != codes.Aborted { // the default busy code
			t.Errorf("the second call: %v, want it refused as busy (Aborted)", err)
		}
		return "ok", nil
	})
	if err != nil {
		t.Fatalf("the first call: %v", err)
	}
}
