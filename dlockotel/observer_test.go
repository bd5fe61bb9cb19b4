package dlockotel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/dlock-go/dlock/observe"
)

// env is a dlock client on a real Redis, observed by a dlockotel observer
// that records spans and metrics in memory.
type env struct {
	c      *dlock.Client
	rdb    *redis.Client
	spans  *tracetest.SpanRecorder
	tracer trace.Tracer // for the test's own request spans
	reader *sdkmetric.ManualReader
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{rdb: newRedis(t), spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	t.Cleanup(func() { _ = tp.Shutdown(bg) })
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	t.Cleanup(func() { _ = mp.Shutdown(bg) })
	e.tracer = tp.Tracer("test")
	obs := dlockotel.NewObserver(dlockotel.WithTracerProvider(tp), dlockotel.WithMeterProvider(mp))
	e.c = dlock.MustNew(e.rdb, dlock.WithObserver(obs))
	t.Cleanup(func() { _ = e.c.Close(bg) })
	return e
}

// named returns the ended spans called name, in the order they ended.
func (e *env) named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range e.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// expectAttrs checks the span's attributes: exactly want, by key.
func expectAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want ...attribute.KeyValue) {
	t.Helper()
	got := attrs(s)
	if len(got) != len(want) {
		t.Errorf("%s has attributes %v, want %v", s.Name(), s.Attributes(), want)
	}
	for _, kv := range want {
		if v, ok := got[kv.Key]; !ok || v != kv.Value {
			t.Errorf("%s: %s = %v, want %v", s.Name(), kv.Key, v.String(), kv.Value.String())
		}
	}
}

func expectChildOf(t *testing.T, s sdktrace.ReadOnlySpan, parent trace.Span) {
	t.Helper()
	p := parent.SpanContext()
	if s.Parent().SpanID() != p.SpanID() || s.SpanContext().TraceID() != p.TraceID() {
		t.Errorf("%s is not a child of the caller's span: parent %v, want %v", s.Name(), s.Parent().SpanID(), p.SpanID())
	}
}

// expectRootLinkedTo checks a span of the renewal loop: a trace of its own,
// linked to the acquisition.
func expectRootLinkedTo(t *testing.T, s sdktrace.ReadOnlySpan, acquire sdktrace.ReadOnlySpan) {
	t.Helper()
	if s.Parent().IsValid() {
		t.Errorf("%s has parent %v, want a root span", s.Name(), s.Parent().SpanID())
	}
	if s.SpanContext().TraceID() == acquire.SpanContext().TraceID() {
		t.Errorf("%s is in the acquiring request's trace", s.Name())
	}
	if links := s.Links(); len(links) != 1 || !links[0].SpanContext.Equal(acquire.SpanContext()) {
		t.Errorf("%s links %v, want the acquire span %v", s.Name(), links, acquire.SpanContext())
	}
}

func expectStatus(t *testing.T, s sdktrace.ReadOnlySpan, code codes.Code, desc string) {
	t.Helper()
	st := s.Status()
	if st.Code != code || !strings.Contains(st.Description, desc) {
		t.Errorf("%s{%v}: status %v %q, want %v containing %q", s.Name(), s.Attributes(), st.Code, st.Description, code, desc)
	}
	// An error status comes with the error as an exception event.
	if n := len(s.Events()); (code == codes.Error) != (n == 1) {
		t.Errorf("%s{%v}: %d events with status %v", s.Name(), s.Attributes(), n, code)
	}
}

// expectNoToken looks for the tokens, and their first half, everywhere a
// span can carry text.
func (e *env) expectNoToken(t *testing.T, tokens ...string) {
	t.Helper()
	for _, s := range e.spans.Ended() {
		var texts []string
		texts = append(texts, s.Name(), s.Status().Description)
		kvs := append([]attribute.KeyValue(nil), s.Attributes()...)
		for _, ev := range s.Events() {
			texts = append(texts, ev.Name)
			kvs = append(kvs, ev.Attributes...)
		}
		for _, l := range s.Links() {
			kvs = append(kvs, l.Attributes...)
		}
		for _, kv := range kvs {
			texts = append(texts, string(kv.Key), kv.Value.String())
		}
		for _, text := range texts {
			for _, tok := range tokens {
				if strings.Contains(text, tok[:len(tok)/2]) {
					t.Errorf("span %s carries a lock token in %q", s.Name(), text)
				}
			}
		}
	}
}

// metrics collects the observer's metrics by name.
func (e *env) metrics(t *testing.T) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(bg, &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != dlockotel.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// value is a counter's sum or a histogram's count at exactly the given
// attributes; 0 when there is no such data point (the SDK reports an
// instrument only once it has one).
func value(t *testing.T, ms map[string]metricdata.Aggregation, name string, kvs ...attribute.KeyValue) float64 {
	t.Helper()
	want := attribute.NewSet(kvs...)
	switch d := ms[name].(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if p.Attributes.Equals(&want) {
				return float64(p.Value)
			}
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			if p.Attributes.Equals(&want) {
				return float64(p.Count)
			}
		}
	case nil:
	default:
		t.Fatalf("metric %s is a %T", name, d)
	}
	return 0
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func result(r observe.Result) attribute.KeyValue { return dlockotel.AttrResult.String(string(r)) }

func TestSpansOfALockLife(t *testing.T) {
	e := newEnv(t)
	ctx, req := e.tracer.Start(bg, "request")

	l, err := e.c.Acquire(ctx, "job:1", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.TryAcquire(ctx, "job:1"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryAcquire of a held lock: %v", err)
	}
	if _, err := e.c.Acquire(ctx, "job:1", dlock.WithWait(50*time.Millisecond)); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Acquire of a held lock with a wait limit: %v", err)
	}
	if _, err := e.c.TryAcquire(ctx, ""); err == nil {
		t.Fatal("TryAcquire of an empty name succeeded")
	}

	// Renewal runs at a third of the TTL; a successful one makes no span.
	waitFor(t, "a renewal", func() bool { return value(t, e.metrics(t), "dlock.renewals", result(observe.ResultOK)) >= 1 })
	if got := e.named(dlockotel.SpanRenew); len(got) != 0 {
		t.Fatalf("successful renewals made %d spans", len(got))
	}

	// Another holder's token: the next renewal finds the lock taken over.
	if err := e.rdb.HSet(bg, "dlock:{job:1}", "token", "intruder").Err(); err != nil {
		t.Fatal(err)
	}
	<-l.Context().Done()
	waitFor(t, "the loss reported", func() bool { return len(e.named(dlockotel.SpanLost)) == 1 })
	if err := l.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release of a lost lock: %v", err)
	}

	l2, err := e.c.TryAcquire(ctx, "job:2")
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	req.End()

	acquires := e.named(dlockotel.SpanAcquire)
	if len(acquires) != 5 {
		t.Fatalf("%d acquire spans, want 5", len(acquires))
	}
	for _, s := range acquires {
		expectChildOf(t, s, req)
		if !s.EndTime().After(s.StartTime()) {
			t.Errorf("acquire span %v lasts %v", s.Attributes(), s.EndTime().Sub(s.StartTime()))
		}
	}
	name := dlockotel.AttrName.String
	expectAttrs(t, acquires[0], name("job:1"), result(observe.ResultAcquired), dlockotel.AttrFence.Int64(l.Fence()))
	expectStatus(t, acquires[0], codes.Unset, "")
	expectAttrs(t, acquires[1], name("job:1"), result(observe.ResultBusy))
	expectStatus(t, acquires[1], codes.Unset, "")
	expectAttrs(t, acquires[2], name("job:1"), result(observe.ResultTimeout))
	expectStatus(t, acquires[2], codes.Unset, "")
	// The span starts at the call, not at the event after it.
	if d := acquires[2].EndTime().Sub(acquires[2].StartTime()); d < 50*time.Millisecond {
		t.Errorf("the span of a 50ms wait lasts %v", d)
	}
	expectAttrs(t, acquires[3], name(""), result(observe.ResultError))
	expectStatus(t, acquires[3], codes.Error, "dlock:")
	expectAttrs(t, acquires[4], name("job:2"), result(observe.ResultAcquired), dlockotel.AttrFence.Int64(l2.Fence()))

	lost := e.named(dlockotel.SpanLost)[0]
	expectRootLinkedTo(t, lost, acquires[0])
	expectStatus(t, lost, codes.Error, "lock lost")
	if held := attrs(lost)[dlockotel.AttrHeldMS].AsInt64(); held < 100 {
		t.Errorf("lost after a renewal at 100ms, but held_ms = %d", held)
	}
	expectAttrs(t, lost, name("job:1"), dlockotel.AttrReason.String(string(observe.ReasonTakenOver)),
		dlockotel.AttrHeldMS.Int64(attrs(lost)[dlockotel.AttrHeldMS].AsInt64()))
	if got := e.named(dlockotel.SpanRenew); len(got) != 0 {
		t.Errorf("the renewal that found the lock gone made a %q span too", dlockotel.SpanRenew)
	}

	releases := e.named(dlockotel.SpanRelease)
	if len(releases) != 2 {
		t.Fatalf("%d release spans, want 2", len(releases))
	}
	for _, s := range releases {
		expectChildOf(t, s, req)
	}
	// Released after the loss was reported: expected, not a fault.
	expectAttrs(t, releases[0], name("job:1"), result(observe.ResultNotHeld), dlockotel.AttrAfterLoss.Bool(true),
		dlockotel.AttrHeldMS.Int64(attrs(releases[0])[dlockotel.AttrHeldMS].AsInt64()))
	expectStatus(t, releases[0], codes.Unset, "")
	expectAttrs(t, releases[1], name("job:2"), result(observe.ResultOK),
		dlockotel.AttrHeldMS.Int64(attrs(releases[1])[dlockotel.AttrHeldMS].AsInt64()))
	expectStatus(t, releases[1], codes.Unset, "")
	if a, b := attrs(releases[0])[dlockotel.AttrHeldMS].AsInt64(), attrs(lost)[dlockotel.AttrHeldMS].AsInt64(); a < b {
		t.Errorf("released after %dms but lost after %dms", a, b)
	}

	e.expectNoToken(t, l.Token(), l2.Token())

	ms := e.metrics(t)
	for _, c := range []struct {
		metric string
		kvs    []attribute.KeyValue
		want   float64
	}{
		{"dlock.acquire.duration", []attribute.KeyValue{result(observe.ResultAcquired)}, 2},
		{"dlock.acquire.duration", []attribute.KeyValue{result(observe.ResultBusy)}, 1},
		{"dlock.acquire.duration", []attribute.KeyValue{result(observe.ResultTimeout)}, 1},
		{"dlock.acquire.duration", []attribute.KeyValue{result(observe.ResultError)}, 1},
		{"dlock.renewals", []attribute.KeyValue{result(observe.ResultLost)}, 1},
		{"dlock.renewals", []attribute.KeyValue{result(observe.ResultError)}, 0},
		{"dlock.losses", []attribute.KeyValue{dlockotel.AttrReason.String(string(observe.ReasonTakenOver))}, 1},
		{"dlock.releases", []attribute.KeyValue{result(observe.ResultNotHeld)}, 1},
		{"dlock.releases", []attribute.KeyValue{result(observe.ResultOK)}, 1},
		{"dlock.hold.duration", nil, 2},
		{"dlock.held", nil, 0},
	} {
		if got := value(t, ms, c.metric, c.kvs...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.metric, c.kvs, got, c.want)
		}
	}
}

// A renewal that fails (here: the lock's hash replaced by a string, so the
// refresh script fails with WRONGTYPE) is retried until the lease deadline,
// and then the lock is lost: a "renew lock" span per failure, a "lock lost"
// span with reason expired, all linked to the acquisition.
func TestRenewalFailureSpans(t *testing.T) {
	e := newEnv(t)
	ctx, req := e.tracer.Start(bg, "request")
	l, err := e.c.Acquire(ctx, "job:3", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	req.End()
	if err := e.rdb.Set(bg, "dlock:{job:3}", "squatter", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	<-l.Context().Done()
	waitFor(t, "the loss reported", func() bool { return len(e.named(dlockotel.SpanLost)) == 1 })

	acquire := e.named(dlockotel.SpanAcquire)[0]
	expectChildOf(t, acquire, req)
	renews := e.named(dlockotel.SpanRenew)
	if len(renews) == 0 {
		t.Fatal("no span for the failed renewals")
	}
	for _, s := range renews {
		expectRootLinkedTo(t, s, acquire)
		expectAttrs(t, s, dlockotel.AttrName.String("job:3"), result(observe.ResultError))
		expectStatus(t, s, codes.Error, "WRONGTYPE")
	}
	lost := e.named(dlockotel.SpanLost)[0]
	expectRootLinkedTo(t, lost, acquire)
	if got := attrs(lost)[dlockotel.AttrReason].AsString(); observe.Reason(got) != observe.ReasonExpired {
		t.Errorf("lost with reason %q, want %q", got, observe.ReasonExpired)
	}
	expectStatus(t, lost, codes.Error, "lock lost")

	// The release fails on the string too: an error, but the lock stays
	// ended (OnLost ended it), so the held count stays at zero.
	ctx, req2 := e.tracer.Start(bg, "cleanup")
	if err := l.Release(ctx); err == nil || errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release on a WRONGTYPE key: %v, want a Redis error", err)
	}
	req2.End()
	release := e.named(dlockotel.SpanRelease)[0]
	expectChildOf(t, release, req2)
	expectAttrs(t, release, dlockotel.AttrName.String("job:3"), result(observe.ResultError), dlockotel.AttrAfterLoss.Bool(true),
		dlockotel.AttrHeldMS.Int64(attrs(release)[dlockotel.AttrHeldMS].AsInt64()))
	expectStatus(t, release, codes.Error, "WRONGTYPE")

	e.expectNoToken(t, l.Token())
	ms := e.metrics(t)
	if got := value(t, ms, "dlock.renewals", result(observe.ResultError)); got != float64(len(renews)) {
		t.Errorf("dlock.renewals{error} = %v, but %d renew spans", got, len(renews))
	}
	if got := value(t, ms, "dlock.losses", dlockotel.AttrReason.String(string(observe.ReasonExpired))); got != 1 {
		t.Errorf("dlock.losses{expired} = %v, want 1", got)
	}
	if got := value(t, ms, "dlock.held"); got != 0 {
		t.Errorf("dlock.held = %v after a loss and a failed release, want 0", got)
	}
	if got := value(t, ms, "dlock.hold.duration"); got != 1 {
		t.Errorf("dlock.hold.duration count = %v, want 1: the lock ended once", got)
	}
}

// Without a sampled acquisition to link to (a sampler that drops the
// request's trace), the loss is still a span, with no dangling link.
func TestLossOfUnsampledAcquisition(t *testing.T) {
	rdb := newRedis(t)
	rec := tracetest.NewSpanRecorder()
	// Roots (the loss) are sampled, children of an unsampled request are not.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	t.Cleanup(func() { _ = tp.Shutdown(bg) })
	c := dlock.MustNew(rdb, dlock.WithObserver(dlockotel.NewObserver(dlockotel.WithTracerProvider(tp))))
	t.Cleanup(func() { _ = c.Close(bg) })

	unsampled := trace.ContextWithSpanContext(bg, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: 0,
	}))
	l, err := c.Acquire(unsampled, "job:4", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(bg, "dlock:{job:4}")
	<-l.Context().Done()
	var lost []sdktrace.ReadOnlySpan
	waitFor(t, "the loss reported", func() bool {
		lost = nil
		for _, s := range rec.Ended() {
			if s.Name() == dlockotel.SpanLost {
				lost = append(lost, s)
			}
		}
		return len(lost) == 1
	})
	if n := len(rec.Ended()); n != 1 {
		t.Errorf("%d spans ended, want only the loss", n)
	}
	if links := lost[0].Links(); len(links) != 0 {
		t.Errorf("loss links %v, want none", links)
	}
}

// With the global providers left as they are (no-ops), the observer costs
// little and breaks nothing.
func TestGlobalNoopProviders(t *testing.T) {
	rdb := newRedis(t)
	c := dlock.MustNew(rdb, dlock.WithObserver(dlockotel.NewObserver()))
	t.Cleanup(func() { _ = c.Close(bg) })
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	if err := c.Do(ctx, "job:5", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// A hold past its warning threshold is counted and gets a span linked to
// the acquisition; every ended hold records its hold-to-TTL ratio.
func TestHoldWarningAndRatio(t *testing.T) {
	e := newEnv(t)
	l, err := e.c.Acquire(bg, "otel:long", dlock.WithTTL(300*time.Millisecond), dlock.WithHoldWarning(350*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the hold warning span", func() bool { return len(e.named(dlockotel.SpanHoldWarning)) == 1 })
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	s := e.named(dlockotel.SpanHoldWarning)[0]
	a := attrs(s)
	if a[dlockotel.AttrName].AsString() != "otel:long" || a[dlockotel.AttrThreshold].AsInt64() != 350 ||
		a[dlockotel.AttrTTLMS].AsInt64() != 300 || a[dlockotel.AttrHeldMS].AsInt64() < 350 {
		t.Fatalf("hold warning span attributes %v", a)
	}
	expectRootLinkedTo(t, s, e.named(dlockotel.SpanAcquire)[0])
	ms := e.metrics(t)
	if got := value(t, ms, "dlock.hold.warnings"); got != 1 {
		t.Fatalf("dlock.hold.warnings = %v, want 1", got)
	}
	if got := value(t, ms, "dlock.hold.ttl_ratio"); got != 1 {
		t.Fatalf("dlock.hold.ttl_ratio count = %v, want 1", got)
	}
	h := ms["dlock.hold.ttl_ratio"].(metricdata.Histogram[float64]).DataPoints[0]
	if h.Sum < 350.0/300 {
		t.Fatalf("ratio %v, want at least %v (held past 350ms on a 300ms TTL)", h.Sum, 350.0/300)
	}
}
