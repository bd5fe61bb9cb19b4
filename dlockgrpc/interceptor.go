package dlockgrpc

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/holdbound"
)

// UnaryServerInterceptor returns an interceptor that runs each unary call's
// handler while holding the lock name(ctx, method, req) from locker: see the
// package documentation for the codes it answers when it does not run the
// handler.
//
// The handler's context is cancelled when the call ends or the lock is
// lost; context.Cause tells which. The lock is released when the handler
// returns, and also when it panics (the panic goes on unchanged).
//
// locker is any dlock.Locker: a *dlock.Client, a Redlock, or dlocktest's
// Locker in unit tests. It returns an error when locker or name is nil or an
// option is invalid: mistakes in the program's wiring, found at start-up
// rather than on the first call.
func UnaryServerInterceptor(locker dlock.Locker, name NameFunc, opts ...Option) (grpc.UnaryServerInterceptor, error) {
	g, err := newGuard(locker, name, opts)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		lock, err := g.acquire(ctx, info.FullMethod, req, func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) })
		if err != nil || lock == nil {
			if err == nil { // ErrNoLock
				return handler(ctx, req)
			}
			return nil, err
		}
		var resp any
		err = g.run(ctx, info.FullMethod, lock, func(ctx context.Context) (err error) {
			resp, err = handler(ctx, req)
			return err
		})
		return resp, err
	}, nil
}

// MustUnaryServerInterceptor is UnaryServerInterceptor for wiring fixed in
// the program: it panics where UnaryServerInterceptor returns an error.
func MustUnaryServerInterceptor(locker dlock.Locker, name NameFunc, opts ...Option) grpc.UnaryServerInterceptor {
	i, err := UnaryServerInterceptor(locker, name, opts...)
	if err != nil {
		panic(err)
	}
	return i
}

// StreamServerInterceptor returns an interceptor that runs each streaming
// call's handler while holding the lock name(ctx, method, nil) from locker. The
// name comes from the method and the call's context only: see Streams in the
// package documentation. Otherwise it behaves as UnaryServerInterceptor:
// stream.Context() in the handler is cancelled when the lock is lost.
func StreamServerInterceptor(locker dlock.Locker, name NameFunc, opts ...Option) (grpc.StreamServerInterceptor, error) {
	g, err := newGuard(locker, name, opts)
	if err != nil {
		return nil, err
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		lock, err := g.acquire(ss.Context(), info.FullMethod, nil, ss.SetTrailer)
		if err != nil || lock == nil {
			if err == nil { // ErrNoLock
				return handler(srv, ss)
			}
			return err
		}
		return g.run(ss.Context(), info.FullMethod, lock, func(ctx context.Context) error {
			return handler(srv, &lockedStream{ServerStream: ss, ctx: ctx})
		})
	}, nil
}

// MustStreamServerInterceptor is StreamServerInterceptor for wiring fixed in
// the program: it panics where StreamServerInterceptor returns an error.
func MustStreamServerInterceptor(locker dlock.Locker, name NameFunc, opts ...Option) grpc.StreamServerInterceptor {
	i, err := StreamServerInterceptor(locker, name, opts...)
	if err != nil {
		panic(err)
	}
	return i
}

// lockedStream is the handler's view of a stream: its context ends when the
// lock is lost.
type lockedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *lockedStream) Context() context.Context { return s.ctx }

// guard is what the unary and stream interceptors share.
type guard struct {
	locker dlock.Locker
	name   NameFunc
	cfg    config
	take   func(context.Context, string) (dlock.Lock, error) // Acquire, with the hold bound where the Locker takes it
}

func newGuard(locker dlock.Locker, name NameFunc, opts []Option) (*guard, error) {
	if isNil(locker) || name == nil {
		return nil, errors.New("dlockgrpc: an interceptor needs a dlock.Locker and a NameFunc")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	take, err := holdbound.Acquire(locker, cfg.acquire, cfg.maxHold, cfg.maxHoldSet)
	if err != nil {
		return nil, fmt.Errorf("dlockgrpc: %w", err)
	}
	return &guard{locker: locker, name: name, cfg: cfg, take: take}, nil
}

// isNil reports a nil Locker, also a nil pointer in a non-nil interface (a
// *dlock.Client from a New that failed), which would panic on the first call.
func isNil(l dlock.Locker) bool {
	if l == nil {
		return true
	}
	v := reflect.ValueOf(l)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// acquire takes the call's lock. It returns a nil lock and a nil error when
// the NameFunc asked for no lock, and a gRPC status error when the call must
// not run. setTrailer sends the retry pushback of a busy answer.
func (g *guard) acquire(ctx context.Context, method string, req any, setTrailer func(metadata.MD)) (dlock.Lock, error) {
	n, err := g.name(ctx, method, req)
	switch {
	case errors.Is(err, ErrNoLock):
		return nil, nil
	case err != nil:
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		// A plain error's text may hold internals: the client gets the code.
		return nil, status.Error(codes.InvalidArgument, "dlockgrpc: the call names no lock")
	}
	lock, err := g.take(ctx, n)
	if err == nil {
		return lock, nil
	}
	var busy *dlock.NotObtainedError
	if errors.As(err, &busy) && ctx.Err() == nil && busy.HolderTTL > 0 {
		setTrailer(metadata.Pairs("grpc-retry-pushback-ms", strconv.FormatInt(busy.HolderTTL.Milliseconds(), 10)))
	}
	return nil, g.statusOf(ctx, err)
}

// statusOf maps an error of Acquire to the status the client gets.
func (g *guard) statusOf(ctx context.Context, err error) error {
	var busy *dlock.NotObtainedError
	switch {
	case ctx.Err() != nil:
		// The call's own deadline or cancellation ended the wait or cut a
		// Redis round trip short: say so, as every gRPC server does for an
		// ended context. Unavailable would count the client's leaving as an
		// outage of the lock service.
		return status.FromContextError(ctx.Err()).Err()
	case errors.As(err, &busy):
		st := status.New(g.cfg.busy, "dlockgrpc: busy: another call holds the lock; retry later")
		if busy.HolderTTL > 0 {
			// A lease without expiry (a key dlock did not write), or one a
			// Locker cannot tell (0), frees at no known time: then no delay
			// is promised.
			if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(busy.HolderTTL)}); derr == nil {
				st = d
			}
		}
		return st.Err()
	case errors.Is(err, dlock.ErrInvalidName):
		return status.Error(codes.InvalidArgument, "dlockgrpc: the call names an invalid lock (empty or too long)")
	case errors.Is(err, dlock.ErrInvalidTTL), errors.Is(err, dlock.ErrInvalidOption), errors.Is(err, dlock.ErrWrongType),
		errors.Is(err, dlock.ErrReentrant):
		// The program's configuration or the data in Redis is wrong: no
		// retry helps, and Unavailable would hide it as an outage.
		return status.Error(codes.Internal, "dlockgrpc: lock misconfigured")
	default:
		// dlock.ErrClosed and everything Redis or the network returned.
		return status.Error(codes.Unavailable, "dlockgrpc: lock service unavailable")
	}
}

// run calls fn under lock through dlock.Run: fn's context also ends when
// lock is lost, and lock is released afterwards, also when fn panics (the
// panic keeps its value and stack).
func (g *guard) run(ctx context.Context, method string, lock dlock.Lock, fn func(context.Context) error) error {
	returned := false
	if g.cfg.releaseError != nil {
		defer func() {
			if !returned {
				// fn panicked: Run released on the way out, and its error
				// is lost with the panic; the lock's cause still tells a
				// loss or a failed release from a clean end.
				if err := panicEnd(lock); err != nil {
					g.cfg.releaseError(ctx, method, err)
				}
			}
		}()
	}
	// fn's error stays out of Run's, which is then only the lock's: a loss
	// or a failed release.
	var ferr error
	err := dlock.Run(ctx, lock, func(ctx context.Context) error {
		ferr = fn(ctx)
		return nil
	})
	returned = true
	if err == nil {
		return ferr // held to the end and released
	}
	if g.cfg.releaseError != nil {
		g.cfg.releaseError(ctx, method, err)
	}
	if _, isStatus := status.FromError(ferr); ferr != nil && !isStatus && errors.Is(err, dlock.ErrLockLost) {
		// Most likely the handler's context error: gRPC would send it as
		// Unknown. Aborted tells the client to redo the whole operation.
		return status.Error(codes.Aborted, "dlockgrpc: the lock was lost while the call ran")
	}
	return ferr
}

// panicEnd is what the release-error handler hears of a lock whose handler
// panicked, from the lock's context: Run's own error went with the panic.
func panicEnd(lock dlock.Lock) error {
	switch cause := context.Cause(lock.Context()); {
	case errors.Is(cause, dlock.ErrReleased):
		return nil
	case cause == nil:
		return fmt.Errorf("%s: handler panicked; lock %q: the release did not complete (the lock expires with its TTL)", "dlockgrpc", lock.Name())
	default:
		return fmt.Errorf("%s: handler panicked; lock %q: %w", "dlockgrpc", lock.Name(), cause)
	}
}
