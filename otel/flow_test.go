package otel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	tenureotel "github.com/tenurehq/tenure/otel"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// point returns the value of the data point of metric name (a counter's
// sum or a gauge's last value) whose attributes include match, and whether
// there is one.
func point(t *testing.T, reader *sdkmetric.ManualReader, name string, match ...attribute.KeyValue) (int64, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	var points []metricdata.DataPoint[int64]
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				points = append(points, d.DataPoints...)
			case metricdata.Gauge[int64]:
				points = append(points, d.DataPoints...)
			}
		}
	}
	var sum int64
	found := false
	for _, p := range points {
		ok := true
		for _, kv := range match {
			if v, has := p.Attributes.Value(kv.Key); !has || v != kv.Value {
				ok = false
			}
		}
		if ok {
			sum, found = sum+p.Value, true
		}
	}
	return sum, found
}

func hasEvent(s sdktrace.ReadOnlySpan, name string, attrs ...attribute.KeyValue) bool {
	for _, ev := range s.Events() {
		if ev.Name != name {
			continue
		}
		all := true
		for _, want := range attrs {
			found := false
			for _, kv := range ev.Attributes {
				found = found || kv == want
			}
			all = all && found
		}
		if all {
			return true
		}
	}
	return false
}

// A step denied by a concurrency limit makes no attempt: its span ends as
// throttled, without an error, saying why, and it is counted in
// tenure.flow.denied, not in tenure.attempts. The sweep's gauges say what
// waits and what is in use, and where the breaker stands.
func TestFlow_ADeniedAttemptIsAThrottledSpanNotAnAttempt(t *testing.T) {
	e := newEnv(t)
	ds := flow.New("otel-api", flow.Concurrency(1))
	entered, release := make(chan struct{}), make(chan struct{})
	var once, releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	act := activities.New("call-api", func(ctx context.Context, x in) (int, error) {
		once.Do(func() { close(entered); <-release })
		return x.N, nil
	}, policy.MaxAttempts(1)).Calls(ds, nil)
	wf := sdk.NewWorkflow("limited", func(ctx context.Context, x in) (int, error) { return sdk.Execute(ctx, act, x) })
	e.worker(runtime.Config{}, wf)

	first, err := sdk.Start(t.Context(), e.client, wf, in{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	second, err := sdk.Start(t.Context(), e.client, wf, in{N: 2})
	if err != nil {
		t.Fatal(err)
	}
	dsAttr := tenureotel.KeyDownstream.String("otel-api")
	eventually(t, "the second run is denied and the sweep sees it wait", func() bool {
		waiting, _ := point(t, e.reader, tenureotel.MetricFlowWaiting, dsAttr)
		inUse, _ := point(t, e.reader, tenureotel.MetricFlowInUse, dsAttr)
		return waiting == 1 && inUse == 1
	})
	if v, ok := point(t, e.reader, tenureotel.MetricFlowBreaker, dsAttr); !ok || v != 0 {
		t.Errorf("breaker gauge %d (%v), want 0: closed", v, ok)
	}
	releaseOnce.Do(func() { close(release) })
	for _, r := range []*sdk.Run[int]{first, second} {
		if _, err := r.Result(t.Context()); err != nil {
			t.Fatal(err)
		}
	}

	spans := e.ended("call-api", 3)
	var throttled, succeeded int
	for _, s := range spans {
		if attr(s, "tenure.downstream") != "otel-api" {
			t.Errorf("attempt span without its downstream: %v", s.Attributes())
		}
		switch attr(s, "tenure.attempt.outcome") {
		case "succeeded":
			succeeded++
		case string(runtime.AttemptThrottled):
			throttled++
			if s.Status().Code == codes.Error || attr(s, "tenure.flow.cause") != flow.CauseConcurrency ||
				!hasEvent(s, "tenure.flow.denied", dsAttr, tenureotel.KeyFlowCause.String(flow.CauseConcurrency)) {
				t.Errorf("throttled span: status %v, attributes %v, events %v", s.Status(), s.Attributes(), s.Events())
			}
		default:
			t.Errorf("attempt span with outcome %v", attr(s, "tenure.attempt.outcome"))
		}
	}
	if succeeded != 2 || throttled < 1 {
		t.Fatalf("%d succeeded and %d throttled spans; want 2 and at least 1", succeeded, throttled)
	}

	for _, c := range []struct {
		name  string
		match []attribute.KeyValue
		want  int64
	}{
		{tenureotel.MetricAttempts, nil, 2},
		{tenureotel.MetricAttempts, []attribute.KeyValue{tenureotel.KeyOutcome.String(string(runtime.AttemptThrottled))}, 0},
		{tenureotel.MetricFlowAdmitted, []attribute.KeyValue{dsAttr}, 2},
		{tenureotel.MetricFlowDenied, []attribute.KeyValue{dsAttr, tenureotel.KeyFlowCause.String(flow.CauseConcurrency)}, int64(throttled)},
		{tenureotel.MetricRescues, nil, 0},
	} {
		if got, _ := point(t, e.reader, c.name, c.match...); got != c.want {
			t.Errorf("%s %v = %d, want %d", c.name, c.match, got, c.want)
		}
	}
	if _, hist := e.metrics(); hist[tenureotel.MetricAttemptDuration] != 2 {
		t.Errorf("attempt durations recorded: %d, want the 2 attempts made", hist[tenureotel.MetricAttemptDuration])
	}

	// A breaker opened by hand is 2 on the gauge at the next sweep.
	if _, err := e.pool.Exec(t.Context(), fmt.Sprintf(`SELECT %s.open_breaker('otel-api', 'test')`, e.schema)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the breaker gauge says open", func() bool {
		v, _ := point(t, e.reader, tenureotel.MetricFlowBreaker, dsAttr)
		return v == 2
	})
}

// eventually polls cond until it holds, or fails the test after 20s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A rescue of a step that calls a downstream is counted in tenure.rescues
// once it is admitted, not at each try a limit denies; a rescue of a step
// without a downstream is counted when it starts, as before.
func TestFlow_ARescueDeniedByALimitIsCountedOnce(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	inst, err := tenureotel.New(tenureotel.WithTracerProvider(tp), tenureotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := runtime.Attempt{Workflow: "pay", Activity: "charge", Step: 1, Attempt: 2, Rescue: true, Downstream: "payments"}
	for range 3 { // denied three times: the breaker is open
		actx, _ := inst.AttemptStarted(ctx, a)
		inst.Denied(actx, "payments", flow.CauseBreaker)
		inst.AttemptEnded(actx, a, runtime.AttemptEnd{Outcome: runtime.AttemptThrottled})
	}
	if n, _ := point(t, reader, tenureotel.MetricRescues); n != 0 {
		t.Fatalf("rescues = %d while every try was denied, want 0", n)
	}
	actx, _ := inst.AttemptStarted(ctx, a)
	inst.Admitted(actx, "payments")
	inst.AttemptEnded(actx, a, runtime.AttemptEnd{Outcome: record.AttemptSucceeded})
	if n, _ := point(t, reader, tenureotel.MetricRescues); n != 1 {
		t.Fatalf("rescues = %d after the admitted try, want 1", n)
	}
	plain := runtime.Attempt{Workflow: "pay", Activity: "refund", Step: 2, Attempt: 2, Rescue: true}
	_, _ = inst.AttemptStarted(ctx, plain)
	if n, _ := point(t, reader, tenureotel.MetricRescues, tenureotel.KeyActivity.String("refund")); n != 1 {
		t.Fatalf("a rescue without a downstream: %d, want 1 when it starts", n)
	}
	if n, _ := point(t, reader, tenureotel.MetricAttempts); n != 1 {
		t.Fatalf("attempts = %d, want the one admitted", n)
	}
	if n, _ := point(t, reader, tenureotel.MetricFlowDenied, tenureotel.KeyFlowCause.String(flow.CauseBreaker)); n != 3 {
		t.Fatalf("denied by the breaker: %d, want 3", n)
	}
	ended := 0
	for _, s := range spans.Ended() {
		if attr(s, "tenure.attempt.outcome") == string(runtime.AttemptThrottled) {
			ended++
			if s.Status().Code != codes.Unset {
				t.Errorf("throttled span status %v, want unset", s.Status())
			}
		}
	}
	if ended != 3 {
		t.Fatalf("%d throttled spans ended, want 3", ended)
	}
}

// The breaker gauge is 0 closed, 1 half open, 2 open; the others are the
// sweep's counts, as they are.
func TestFlow_DownstreamStateIsThreeGauges(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	inst, err := tenureotel.New(tenureotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	for state, want := range map[string]int64{flow.BreakerClosed: 0, flow.BreakerHalfOpen: 1, flow.BreakerOpen: 2} {
		inst.DownstreamState("payments", state, 7, 3)
		ds := tenureotel.KeyDownstream.String("payments")
		if v, _ := point(t, reader, tenureotel.MetricFlowBreaker, ds); v != want {
			t.Errorf("breaker %s: gauge %d, want %d", state, v, want)
		}
		if w, _ := point(t, reader, tenureotel.MetricFlowWaiting, ds); w != 7 {
			t.Errorf("waiting gauge %d, want 7", w)
		}
		if u, _ := point(t, reader, tenureotel.MetricFlowInUse, ds); u != 3 {
			t.Errorf("in use gauge %d, want 3", u)
		}
	}
}
