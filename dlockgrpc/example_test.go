package dlockgrpc_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockgrpc"
)

// One payment per order at a time, across every instance of the service: a
// call for an order that another call is paying is refused Aborted, with
// the holder's remaining lease as the retry delay.
func ExampleUnaryServerInterceptor() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	// Pay is locked by the order in its request; other methods run unlocked.
	// With generated code the key is a getter, (*shop.PayRequest).GetOrderId.
	name := dlockgrpc.ByMethod(map[string]dlockgrpc.NameFunc{
		"/shop.Orders/Pay": dlockgrpc.FromRequest("order:", (*wrapperspb.StringValue).GetValue),
	})
	intercept := dlockgrpc.MustUnaryServerInterceptor(locker, name, dlockgrpc.WithAcquireOptions(dlock.WithTTL(30*time.Second)))
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(intercept))
	defer srv.Stop()
	// Register the services and Serve as usual. Here the interceptor is
	// called the way the server calls it, to show what a client gets.
	pay := func(ctx context.Context, req any) (any, error) {
		// ctx ends if the lock is lost: pass it to every write.
		lock, _ := dlock.FromContext(ctx)
		return wrapperspb.String("paid under " + lock.Name()), nil
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/shop.Orders/Pay"}

	// Another instance is paying order 42 right now.
	other, err := locker.TryAcquire(ctx, "order:42", dlock.WithTTL(30*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = intercept(ctx, wrapperspb.String("42"), info, pay)
	st := status.Convert(err)
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			fmt.Println(st.Code(), "retry within the holder's lease:", ri.GetRetryDelay().AsDuration() <= 30*time.Second)
		}
	}

	_ = other.Release(ctx)
	resp, err := intercept(ctx, wrapperspb.String("42"), info, pay)
	fmt.Println(resp.(*wrapperspb.StringValue).GetValue(), err)
	// Output:
	// Aborted retry within the holder's lease: true
	// paid under order:42 <nil>
}
