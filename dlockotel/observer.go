package dlockotel

import (
	"context"
	"sync"
	"time"

	"github.com/dlock-go/dlock/observe"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/dlock-go/dlock/dlockotel"

// Span names.
const (
	SpanAcquire = "acquire lock"
	SpanRelease = "release lock"
	SpanLost    = "lock lost"
	SpanRenew   = "renew lock"
	// SpanHoldWarning is a hold that ran past its warning threshold
	// (dlock.WithHoldWarning).
	SpanHoldWarning = "lock held long"
)

// Attribute keys. None of them is ever the lock's token.
const (
	AttrName      = attribute.Key("dlock.name")
	AttrResult    = attribute.Key("dlock.result")
	AttrReason    = attribute.Key("dlock.reason")
	AttrFence     = attribute.Key("dlock.fence")
	AttrHeldMS    = attribute.Key("dlock.held_ms")
	AttrAfterLoss = attribute.Key("dlock.after_loss")
	AttrThreshold = attribute.Key("dlock.threshold_ms") // a hold warning's threshold
	AttrTTLMS     = attribute.Key("dlock.ttl_ms")
)

// An Option configures NewObserver.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	tp trace.TracerProvider
	mp metric.MeterProvider
}

// WithTracerProvider sends spans to tp (default: otel.GetTracerProvider(),
// looked up when NewObserver runs; the global provider forwards to one set
// later with otel.SetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithMeterProvider sends metrics to mp (default: otel.GetMeterProvider()).
// Pass noop.NewMeterProvider() from go.opentelemetry.io/otel/metric/noop to
// have spans only, for example next to dlockprom.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// NewObserver returns a observe.Observer that makes spans and metrics; pass it
// to dlock.New with dlock.WithObserver. It is safe for concurrent use and may
// observe several dlock Clients. See the package documentation for what it
// records.
func NewObserver(opts ...Option) observe.Observer {
	var cfg config
	for _, o := range opts {
		o.apply(&cfg)
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	return &observer{
		tracer:   cfg.tp.Tracer(ScopeName),
		inst:     newInstruments(cfg.mp.Meter(ScopeName)),
		acquired: map[string]trace.SpanContext{},
	}
}

type observer struct {
	observe.BaseObserver
	tracer trace.Tracer
	inst   instruments

	// acquired holds the sampled "acquire lock" span of each held lock, by
	// name: losses and renewals come without a context, and this is how
	// their spans link back to the request that took the lock. Entries go
	// when the lock ends, and every lock ends (released, or lost at its
	// lease deadline), so the map holds at most the locks held now.
	mu       sync.Mutex
	acquired map[string]trace.SpanContext
}

func (o *observer) OnAcquire(ctx context.Context, e observe.AcquireEvent) {
	now := time.Now()
	o.inst.acquire(ctx, e)
	// The event comes when the call is over: the span starts back at the
	// call, so its length is the wait, and sits under the caller's span.
	_, span := o.tracer.Start(ctx, SpanAcquire,
		trace.WithTimestamp(now.Add(-e.Wait)),
		trace.WithAttributes(AttrName.String(e.Name), AttrResult.String(string(e.Result))))
	switch e.Result {
	case observe.ResultAcquired:
		span.SetAttributes(AttrFence.Int64(e.Fence))
		if sc := span.SpanContext(); sc.IsSampled() {
			o.mu.Lock()
			o.acquired[e.Name] = sc
			o.mu.Unlock()
		}
	case observe.ResultError:
		fail(span, e.Err)
	}
	span.End(trace.WithTimestamp(now))
}

func (o *observer) OnRenew(e observe.RenewEvent) {
	o.inst.renew(e)
	if e.Result != observe.ResultError {
		return // ok: too many to trace; lost: reported by OnLost
	}
	o.mu.Lock()
	link := o.acquired[e.Name]
	o.mu.Unlock()
	_, span := o.tracer.Start(context.Background(), SpanRenew, rootLinkedTo(link,
		AttrName.String(e.Name), AttrResult.String(string(e.Result)))...)
	fail(span, e.Err)
	span.End()
}

func (o *observer) OnLost(e observe.LostEvent) {
	o.inst.lost(e)
	o.mu.Lock()
	link := o.acquired[e.Name]
	delete(o.acquired, e.Name)
	o.mu.Unlock()
	_, span := o.tracer.Start(context.Background(), SpanLost, rootLinkedTo(link,
		AttrName.String(e.Name), AttrReason.String(string(e.Reason)), AttrHeldMS.Int64(e.Held.Milliseconds()))...)
	fail(span, e.Cause)
	span.End()
}

// OnHoldWarning counts the warning, and records it as an event on a span of
// its own linked to the acquisition, as losses are.
func (o *observer) OnHoldWarning(e observe.HoldWarningEvent) {
	o.inst.holdWarning()
	o.mu.Lock()
	link := o.acquired[e.Name]
	o.mu.Unlock()
	_, span := o.tracer.Start(context.Background(), SpanHoldWarning, rootLinkedTo(link,
		AttrName.String(e.Name), AttrHeldMS.Int64(e.Held.Milliseconds()),
		AttrThreshold.Int64(e.Threshold.Milliseconds()), AttrTTLMS.Int64(e.TTL.Milliseconds()))...)
	span.End()
}

func (o *observer) OnRelease(ctx context.Context, e observe.ReleaseEvent) {
	ends := o.inst.release(ctx, e)
	if ends {
		o.mu.Lock()
		delete(o.acquired, e.Name)
		o.mu.Unlock()
	}
	_, span := o.tracer.Start(ctx, SpanRelease, trace.WithAttributes(
		AttrName.String(e.Name), AttrResult.String(string(e.Result)), AttrHeldMS.Int64(e.Held.Milliseconds())))
	if e.AfterLoss {
		span.SetAttributes(AttrAfterLoss.Bool(true))
	}
	if e.Result == observe.ResultError || (e.Result == observe.ResultNotHeld && !e.AfterLoss) {
		fail(span, e.Err)
	}
	span.End()
}

// rootLinkedTo starts a span of its own trace, linked to the acquisition's
// span when there is one.
func rootLinkedTo(link trace.SpanContext, attrs ...attribute.KeyValue) []trace.SpanStartOption {
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithAttributes(attrs...)}
	if link.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: link}))
	}
	return opts
}

// fail marks a span as failed with err. dlock's errors name the operation
// and the lock, never its token.
func fail(span trace.Span, err error) {
	if err == nil {
		span.SetStatus(codes.Error, "")
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
