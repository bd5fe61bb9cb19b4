package dlockotel_test

import (
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlock-go/dlock/dlockotel"
	"github.com/dlock-go/dlock/observe"
)

// A successful renewal, thousands a second with many locks, makes no span:
// only a counter increment.
func BenchmarkOnRenew(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(bg)
	obs := dlockotel.NewObserver(dlockotel.WithMeterProvider(mp))
	e := observe.RenewEvent{Name: "order:42", Result: observe.ResultOK}
	b.ReportAllocs()
	for b.Loop() {
		obs.OnRenew(e)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
	defer tp.Shutdown(bg)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(bg)
	obs := dlockotel.NewObserver(dlockotel.WithTracerProvider(tp), dlockotel.WithMeterProvider(mp))
	acq := observe.AcquireEvent{Name: "order:42", Result: observe.ResultAcquired, Wait: time.Millisecond, Fence: 1}
	rel := observe.ReleaseEvent{Name: "order:42", Result: observe.ResultOK, Held: time.Second}
	b.ReportAllocs()
	for b.Loop() {
		obs.OnAcquire(bg, acq)
		obs.OnRelease(bg, rel)
	}
}
