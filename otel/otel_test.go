package otel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/noleaks"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/operator"
	tenureotel "github.com/tenurehq/tenure/otel"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

func TestMain(m *testing.M) { os.Exit(noleaks.Main(m)) }

// env is one test's Tenure with in-memory span and metric recorders.
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	schema string
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	inst   *tenureotel.Instrumentation
	client *sdk.Client
	op     *operator.Operator
}

func newEnv(t *testing.T, opts ...tenureotel.Option) *env {
	e := &env{t: t, pool: pgtest.Pool(t), schema: pgtest.Schema(t), spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	if err := store.Migrate(t.Context(), e.pool, store.WithSchema(e.schema)); err != nil {
		t.Fatal(err)
	}
	e.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	t.Cleanup(func() { _ = e.tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	inst, err := tenureotel.New(append([]tenureotel.Option{tenureotel.WithTracerProvider(e.tp), tenureotel.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	e.inst = inst
	if e.op, err = operator.New(e.pool, operator.WithSchema(e.schema)); err != nil {
		t.Fatal(err)
	}
	if e.client, err = sdk.NewClient(e.pool, sdk.WithSchema(e.schema), sdk.WithStartObserver(inst), sdk.WithPollInterval(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.client.Close)
	return e
}

func (e *env) worker(cfg runtime.Config, wfs ...sdk.Definition) *runtime.Worker {
	cfg.Schema, cfg.Observer = e.schema, e.inst
	cfg.PollInterval = 20 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := runtime.NewWorker(e.pool, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := w.Register(wfs...); err != nil {
		e.t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
	})
	return w
}

func (e *env) named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range e.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// ended waits until n spans of that name have ended (a segment's span, and
// that of an attempt whose checkpoint rode with the run's completion, end
// just after the write that makes Result return) and returns them.
func (e *env) ended(name string, n int) []sdktrace.ReadOnlySpan {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(e.named(name)) < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return e.named(name)
}

// metrics collects the counters (summed; attempts and failures also by
// outcome and reason, as "name/value") and the histograms' counts.
func (e *env) metrics() (sums map[string]int64, hist map[string]uint64) {
	e.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(e.t.Context(), &rm); err != nil {
		e.t.Fatal(err)
	}
	sums, hist = map[string]int64{}, map[string]uint64{}
	by := map[string]string{tenureotel.MetricAttempts: "tenure.attempt.outcome", tenureotel.MetricFailures: "tenure.failure.reason"}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					sums[m.Name] += p.Value
					if key, ok := by[m.Name]; ok {
						v, _ := p.Attributes.Value(attribute.Key(key))
						sums[m.Name+"/"+v.AsString()] += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					hist[m.Name] += p.Count
				}
			}
		}
	}
	return sums, hist
}

func attr(s sdktrace.ReadOnlySpan, key string) any {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.AsInterface()
		}
	}
	return nil
}

type in struct{ N int }

func TestTraces_RetriedAttemptsAreLinkedSpansWithErrorsAndSQLIDs(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	act := activities.New("fetch", func(ctx context.Context, x in) (int, error) {
		if calls.Add(1) <= 2 {
			return 0, errors.New("upstream 503")
		}
		// The activity's own spans nest under its attempt span.
		_, child := trace.SpanFromContext(ctx).TracerProvider().Tracer("app").Start(ctx, "GET /price")
		child.End()
		return x.N, nil
	}, policy.MaxAttempts(5), policy.Constant(20*time.Millisecond), policy.Jitter(policy.NoJitter))
	wf := sdk.NewWorkflow("price", func(ctx context.Context, x in) (int, error) { return sdk.Execute(ctx, act, x) })
	e.worker(runtime.Config{}, wf)

	ctx, caller := e.tp.Tracer("app").Start(t.Context(), "checkout")
	run, err := sdk.Start(ctx, e.client, wf, in{N: 3})
	caller.End()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Result(t.Context()); err != nil {
		t.Fatal(err)
	}
	traceID := caller.SpanContext().TraceID()

	// The last attempt's span ends with its checkpoint, which commits with
	// the run's completion: just after the write that makes Result return.
	attempts := e.ended("fetch", 3)
	if len(attempts) != 3 {
		t.Fatalf("%d attempt spans, want 3", len(attempts))
	}
	slices.SortFunc(attempts, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	segments := e.ended("run price", 1)
	if len(segments) != 1 || segments[0].SpanContext().TraceID() != traceID {
		t.Fatalf("segment spans %v: want one, in the caller's trace", segments)
	}
	if ep, _ := attr(attempts[0], "tenure.lease.epoch").(int64); ep <= 0 {
		t.Fatalf("attempt 1's epoch %v", attr(attempts[0], "tenure.lease.epoch"))
	}
	for i, s := range attempts {
		n := i + 1
		if s.SpanContext().TraceID() != traceID || s.Parent().SpanID() != segments[0].SpanContext().SpanID() {
			t.Errorf("attempt %d is not a child of the segment in the caller's trace", n)
		}
		if attr(s, "tenure.attempt") != int64(n) || attr(s, "tenure.step") != int64(1) || attr(s, "tenure.attempt.max") != int64(5) ||
			attr(s, "tenure.run.id") != run.ID.String() || attr(s, "tenure.workflow") != "price" || attr(s, "tenure.lease.epoch") != attr(attempts[0], "tenure.lease.epoch") ||
			attr(s, "tenure.worker") == nil || attr(s, "tenure.attempt.rescue") != false || attr(s, "tenure.attempt.rescues_before") != int64(0) {
			t.Errorf("attempt %d attributes: %v", n, s.Attributes())
		}
		if n < 3 {
			if attr(s, "tenure.attempt.outcome") != "failed" || s.Status().Code != codes.Error || attr(s, "error.type") != "*errors.errorString" ||
				attr(s, "tenure.retry.delay_ms") != int64(20) || attr(s, "tenure.retry.delay_source") != "policy" {
				t.Errorf("failed attempt %d: %v status %v", n, s.Attributes(), s.Status())
			}
			if len(s.Events()) != 1 || s.Events()[0].Name != "exception" {
				t.Errorf("failed attempt %d events %v, want the error as an exception event", n, s.Events())
			}
		} else if attr(s, "tenure.attempt.outcome") != "succeeded" || s.Status().Code == codes.Error {
			t.Errorf("last attempt: %v", s.Attributes())
		}
		if n > 1 {
			links := s.Links()
			if len(links) != 1 || links[0].SpanContext.SpanID() != attempts[i-1].SpanContext().SpanID() {
				t.Errorf("attempt %d links %v, want the previous attempt", n, links)
			}
		}
	}
	child := e.named("GET /price")
	if len(child) != 1 || child[0].Parent().SpanID() != attempts[2].SpanContext().SpanID() {
		t.Fatal("the activity's own span is not a child of its attempt span")
	}

	// The attempts table holds each attempt's trace and span IDs.
	h, _ := e.op.History(t.Context(), run.ID)
	for i, a := range h {
		sc := attempts[i].SpanContext()
		if a.TraceID != sc.TraceID().String() || a.SpanID != sc.SpanID().String() {
			t.Errorf("attempt %d: SQL has %s/%s, span is %s/%s", a.Attempt, a.TraceID, a.SpanID, sc.TraceID(), sc.SpanID())
		}
	}
	// And SQL finds the rows of a trace.
	var n int
	q := fmt.Sprintf(`SELECT count(*) FROM %s.attempts WHERE trace_id = $1`, e.schema)
	if err := e.pool.QueryRow(t.Context(), q, traceID.String()).Scan(&n); err != nil || n != 3 {
		t.Fatalf("attempts of trace %s: %d, %v", traceID, n, err)
	}

	// Metrics.
	sums, hist := e.metrics()
	want := map[string]int64{
		tenureotel.MetricAttempts: 3, tenureotel.MetricAttempts + "/failed": 2, tenureotel.MetricAttempts + "/succeeded": 1,
		tenureotel.MetricRetries: 2, tenureotel.MetricRunsStarted: 1, tenureotel.MetricRunsCompleted: 1, tenureotel.MetricRunsInFlight: 0,
	}
	for k, v := range want {
		if sums[k] != v {
			t.Errorf("metric %s = %d, want %d (all: %v)", k, sums[k], v, sums)
		}
	}
	for _, k := range []string{tenureotel.MetricAttemptDuration, tenureotel.MetricQueueLag, tenureotel.MetricRunDuration} {
		if hist[k] == 0 {
			t.Errorf("histogram %s recorded nothing", k)
		}
	}
}

func TestTraces_LostAttemptGetsASpanFromItsOriginalStart(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	var calls atomic.Int32
	act := activities.New("export", func(ctx context.Context, x in) (int, error) {
		if calls.Add(1) == 1 {
			<-release // frozen past its lease
		}
		return x.N, nil
	})
	wf := sdk.NewWorkflow("exporter", func(ctx context.Context, x in) (int, error) { return sdk.Execute(ctx, act, x) })
	e.worker(runtime.Config{LeaseTTL: time.Minute, HeartbeatInterval: 30 * time.Second}, wf)
	run, _ := sdk.Start(t.Context(), e.client, wf, in{N: 1})
	for calls.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := e.pool.Exec(t.Context(), fmt.Sprintf(`UPDATE %s.runs SET lease_expires_at = now() - interval '1s' WHERE id = $1`, e.schema), run.ID); err != nil {
		t.Fatal(err)
	}
	e.worker(runtime.Config{}, wf)
	if _, err := run.Result(t.Context()); err != nil {
		t.Fatal(err)
	}
	h, _ := e.op.History(t.Context(), run.ID)
	e.ended("export", 2) // the lost attempt's span, then the rescue's, which ends with the run's completion
	var lost sdktrace.ReadOnlySpan
	for _, s := range e.named("export") {
		if attr(s, "tenure.attempt.outcome") == "lost" {
			lost = s
		}
	}
	if lost == nil {
		t.Fatal("no lost attempt span")
	}
	if !lost.StartTime().Equal(h[0].StartedAt) || attr(lost, "tenure.attempt.recorded_span_id") != h[0].SpanID || lost.Status().Code != codes.Error {
		t.Fatalf("lost span starts %v (attempt started %v), attributes %v", lost.StartTime(), h[0].StartedAt, lost.Attributes())
	}
	if len(lost.Links()) != 1 || lost.Links()[0].SpanContext.SpanID().String() != h[0].SpanID {
		t.Fatal("lost span is not linked to the span its worker recorded")
	}
	var rescue sdktrace.ReadOnlySpan
	for _, s := range e.named("export") {
		if attr(s, "tenure.attempt.rescue") == true {
			rescue = s
		}
	}
	if rescue == nil || attr(rescue, "tenure.attempt.outcome") != "succeeded" || attr(rescue, "tenure.attempt.rescues_before") != int64(1) {
		t.Fatal("no succeeded rescue span with one rescue before it")
	}
	once.Do(func() { close(release) })

	// The stale worker finds its lease gone when its completion is refused.
	deadline := time.Now().Add(10 * time.Second)
	for sums, _ := e.metrics(); sums[tenureotel.MetricLeasesLost] == 0 && time.Now().Before(deadline); sums, _ = e.metrics() {
		time.Sleep(10 * time.Millisecond)
	}
	sums, _ := e.metrics()
	want := map[string]int64{
		tenureotel.MetricRescues: 1, tenureotel.MetricAttempts + "/lost": 1, tenureotel.MetricAttempts + "/succeeded": 1,
		tenureotel.MetricLeasesLost: 1, tenureotel.MetricRunsCompleted: 1,
	}
	for k, v := range want {
		if sums[k] != v {
			t.Errorf("metric %s = %d, want %d (all: %v)", k, sums[k], v, sums)
		}
	}
}

func TestMetrics_FailuresAreCountedByReason(t *testing.T) {
	e := newEnv(t)
	act := activities.New("reject", func(ctx context.Context, x in) (int, error) {
		return 0, policy.Permanent(errors.New("invalid"))
	})
	wf := sdk.NewWorkflow("rejecter", func(ctx context.Context, x in) (int, error) { return sdk.Execute(ctx, act, x) })
	e.worker(runtime.Config{}, wf)
	run, _ := sdk.Start(t.Context(), e.client, wf, in{})
	if _, err := run.Result(t.Context()); err == nil {
		t.Fatal("want a failure")
	}
	e.ended("run rejecter", 1) // the segment, and its counts, end just after Result returns
	sums, hist := e.metrics()
	if sums[tenureotel.MetricFailures+"/non_retryable"] != 1 || sums[tenureotel.MetricAttempts+"/failed"] != 1 ||
		sums[tenureotel.MetricRetries] != 0 || sums[tenureotel.MetricRunsInFlight] != 0 || hist[tenureotel.MetricRunDuration] != 1 {
		t.Fatalf("metrics %v, histograms %v", sums, hist)
	}
}

func TestTraces_RunStaysOneTraceAcrossASuspension(t *testing.T) {
	for _, linked := range []bool{false, true} {
		t.Run(fmt.Sprintf("linked=%v", linked), func(t *testing.T) {
			var opts []tenureotel.Option
			if linked {
				opts = append(opts, tenureotel.WithLinkedSegments())
			}
			e := newEnv(t, opts...)
			var calls atomic.Int32
			act := activities.New("sync", func(ctx context.Context, x in) (int, error) {
				if calls.Add(1) == 1 {
					return 0, errors.New("later")
				}
				return x.N, nil
			}, policy.Constant(300*time.Millisecond), policy.Jitter(policy.NoJitter))
			wf := sdk.NewWorkflow("syncer", func(ctx context.Context, x in) (int, error) { return sdk.Execute(ctx, act, x) })
			w := e.worker(runtime.Config{MaxInProcessSleep: 10 * time.Millisecond}, wf)

			ctx, caller := e.tp.Tracer("app").Start(t.Context(), "request")
			run, _ := sdk.Start(ctx, e.client, wf, in{N: 2})
			caller.End()
			if _, err := run.Result(t.Context()); err != nil {
				t.Fatal(err)
			}
			if w.Stats().Suspended != 1 {
				t.Fatal("the run did not suspend")
			}
			segments := e.ended("run syncer", 2)
			if len(segments) != 2 {
				t.Fatalf("%d segment spans, want 2 around the suspension", len(segments))
			}
			start := e.named("start syncer")[0]
			for _, s := range segments {
				if !linked && (s.SpanContext().TraceID() != caller.SpanContext().TraceID() || s.Parent().SpanID() != start.SpanContext().SpanID()) {
					t.Errorf("segment %v is not a child of the start span in the caller's trace", s.Attributes())
				}
				if linked && (len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != start.SpanContext().SpanID()) {
					t.Errorf("linked segment's links %v", s.Links())
				}
			}
			outcomes := []any{attr(segments[0], "tenure.segment.outcome"), attr(segments[1], "tenure.segment.outcome")}
			if !slices.Contains(outcomes, any("suspended")) || !slices.Contains(outcomes, any("completed")) {
				t.Errorf("segment outcomes %v", outcomes)
			}
		})
	}
}

// A worker whose database server has standbys it does not wait for at
// commit sets the gauge tenure.database.replication.asynchronous to 1, with
// the mode.
func TestMetrics_AsynchronousReplicationIsAGauge(t *testing.T) {
	t.Parallel()
	rep := pgtest.Replicate(t, false)
	pool, err := pgxpool.New(t.Context(), rep.PrimaryURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	inst, err := tenureotel.New(tenureotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.NewWorker(pool, runtime.Config{Observer: inst, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(sdk.NewWorkflow("gauged", func(ctx context.Context, n int) (int, error) { return n, nil })); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
	})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == tenureotel.MetricReplicationAsynchronous {
				mode, _ := g.DataPoints[0].Attributes.Value(tenureotel.KeyReplicationMode)
				if len(g.DataPoints) != 1 || g.DataPoints[0].Value != 1 || mode.AsString() != "asynchronous" {
					t.Fatalf("gauge %+v, want 1 with mode asynchronous", g.DataPoints)
				}
				return
			}
		}
	}
	t.Fatalf("no gauge %s in %+v", tenureotel.MetricReplicationAsynchronous, rm)
}
