package dlockgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockgrpc"
)

// A call, unary or stream, holds its lock no longer than the interceptor's
// bound (DefaultMaxHold, 30s, unless WithMaxHold changes it): past it the
// lock frees for the next call and the handler's context ends; a handler
// that then fails is answered Aborted, as for any lost lock.
func ExampleWithMaxHold() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	name := dlockgrpc.FromRequest("export:", (*wrapperspb.StringValue).GetValue)
	intercept := dlockgrpc.MustUnaryServerInterceptor(locker, name, dlockgrpc.WithMaxHold(200*time.Millisecond))
	export := func(ctx context.Context, req any) (any, error) {
		<-ctx.Done() // work that would run on
		fmt.Println("hold limit:", errors.Is(context.Cause(ctx), dlock.ErrHoldLimit))
		return nil, ctx.Err()
	}
	_, err := intercept(ctx, wrapperspb.String("7"), &grpc.UnaryServerInfo{FullMethod: "/shop.Exports/Run"}, export)
	fmt.Println(status.Code(err))
	// Output:
	// hold limit: true
	// Aborted
}
