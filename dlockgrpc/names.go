package dlockgrpc

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A NameFunc derives the lock name of a call from its context (metadata,
// peer, auth info), its full method ("/package.Service/Method") and, for
// unary calls, its request message; for streams req is nil (see Streams in
// the package documentation). It runs on every call, before anything is
// sent to Redis: keep it cheap.
//
// Return ErrNoLock to run the call without a lock. Any other error refuses
// the call: a gRPC status error as it is, other errors as InvalidArgument.
type NameFunc func(ctx context.Context, fullMethod string, req any) (string, error)

// ErrNoLock, returned by a NameFunc, runs the call without a lock.
var ErrNoLock = errors.New("dlockgrpc: no lock for this call")

// ByMethod routes each method to its own NameFunc, by full method name
// ("/package.Service/Method"); methods it does not list run without a lock.
// ByMethod reads the map on every call and never changes it: do not change
// it after ByMethod returns.
func ByMethod(byMethod map[string]NameFunc) NameFunc {
	return func(ctx context.Context, fullMethod string, req any) (string, error) {
		f, ok := byMethod[fullMethod]
		if !ok {
			return "", ErrNoLock
		}
		return f(ctx, fullMethod, req)
	}
}

// Method names the lock prefix + the full method: one call of each method at
// a time, for methods that must not overlap whatever their arguments (a
// re-index, a migration).
func Method(prefix string) NameFunc {
	return func(_ context.Context, fullMethod string, _ any) (string, error) {
		return prefix + fullMethod, nil
	}
}

// FromRequest names the lock prefix + key(req) for unary calls whose request
// is a T; with generated messages, key is usually a getter:
//
//	dlockgrpc.FromRequest("order:", (*shop.PayRequest).GetOrderId)
//
// A request of another type, a stream (no request) or an empty key refuses
// the call with InvalidArgument.
func FromRequest[T any](prefix string, key func(T) string) NameFunc {
	return func(_ context.Context, fullMethod string, req any) (string, error) {
		m, ok := req.(T)
		if !ok {
			return "", status.Errorf(codes.InvalidArgument, "dlockgrpc: %s: the lock name needs a %T request, got %T", fullMethod, *new(T), req)
		}
		v := key(m)
		if v == "" {
			// An empty key would lock the prefix alone: one lock for every
			// call that left the field out, which is a client bug.
			return "", status.Errorf(codes.InvalidArgument, "dlockgrpc: %s: the request's lock key is empty", fullMethod)
		}
		return prefix + v, nil
	}
}

// FromMetadata names the lock prefix + the first value of the incoming
// metadata key (lower case, as gRPC keeps metadata keys). Absent or empty
// metadata refuses the call with InvalidArgument, naming the key. It works
// for unary and stream calls alike.
func FromMetadata(prefix, key string) NameFunc {
	return func(ctx context.Context, fullMethod string, _ any) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(key); len(v) > 0 && v[0] != "" {
			return prefix + v[0], nil
		}
		return "", status.Error(codes.InvalidArgument, fmt.Sprintf("dlockgrpc: %s: missing metadata %q for the lock name", fullMethod, key))
	}
}
