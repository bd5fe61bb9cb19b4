package dlockotel_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
)

// The observer puts "acquire lock" and "release lock" spans under the span
// of the request that takes the lock. A real program passes its SDK tracer
// provider, or sets it globally with otel.SetTracerProvider and calls
// NewObserver without options; the in-memory exporter stands in for OTLP.
func ExampleNewObserver() {
	ctx := context.Background()
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	defer tp.Shutdown(ctx)

	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb, dlock.WithObserver(dlockotel.NewObserver(dlockotel.WithTracerProvider(tp))))
	defer locker.Close(ctx)

	ctx, span := tp.Tracer("shop").Start(ctx, "handle order")
	if lock, err := locker.TryAcquire(ctx, "order:42"); err == nil {
		_ = lock.Release(ctx)
	}
	span.End()

	for _, s := range exporter.GetSpans() {
		fmt.Print(s.Name)
		if s.Parent.SpanID() == span.SpanContext().SpanID() {
			fmt.Print(" (in handle order)")
		}
		for _, a := range s.Attributes {
			if a.Key == dlockotel.AttrResult {
				fmt.Print(": ", a.Value.AsString())
			}
		}
		fmt.Println()
	}
	// Output:
	// acquire lock (in handle order): acquired
	// release lock (in handle order): ok
	// handle order
}
