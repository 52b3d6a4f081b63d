package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/tenurehq/tenure/internal/exampledb"
	tenureotel "github.com/tenurehq/tenure/otel"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/tenuretest"
)

func TestMain(m *testing.M) {
	if os.Getenv(exampledb.ProgramEnv) != "" { // exampledb.RunProgram runs the program
		main()
		os.Exit(0)
	}
	code := tenuretest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// The program as go run runs it without DATABASE_URL: on a private cluster
// of its own, saying so on its first line, with nothing on stderr (no
// warning that no worker serves a run it starts).
func TestTracing_RunsQuietlyAsGoRunRunsIt(t *testing.T) {
	t.Parallel()
	out := exampledb.RunProgram(t, 3*time.Minute)
	for _, want := range []string{
		"\"Name\": \"start price-quote\"",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the program's output lacks %q:\n%s", want, out)
		}
	}
}

// The program's quote, in a schema of the kit's, traced into a recorder;
// then the stdout exporter the command uses by default prints the spans.
func TestTracing_PrintsTheAttemptSpansOfARetriedActivity(t *testing.T) {
	t.Parallel()
	env := tenuretest.New(t) // a schema of the test's own (quote recreates it), dropped after the test
	var out bytes.Buffer
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	if err := quote(t.Context(), &out, tenuretest.URL(t), env.Schema, tp); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if n := len(attemptSpans(spans)); n != 3 || !strings.Contains(out.String(), "price 4200 after 3 attempts") {
		t.Fatalf("%d attempt spans; output:\n%s", n, out.String())
	}

	out.Reset()
	exp, err := newExporter(t.Context(), &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range spans.Ended() {
		_ = exp.ExportSpans(t.Context(), []sdktrace.ReadOnlySpan{s})
	}
	if !strings.Contains(out.String(), `"tenure.attempt.outcome"`) {
		t.Fatal("stdout exporter printed no attempt attributes")
	}
}

// The worker of an env with an otel Observer traces each attempt: a span in
// the trace of the request that started the run, linked to the previous
// attempt's span, and named on the attempt's row.
func TestTracing_EachAttemptIsASpanLinkedToThePreviousOne(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) }) // after the env's worker stopped
	inst, err := tenureotel.New(tenureotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	env := tenuretest.New(t, tenuretest.Workflows(PriceQuote),
		// The example's FetchPrice counts its calls for the whole process.
		tenuretest.Override(FetchPrice, func(ctx context.Context, q Quote) (int, error) {
			if calls.Add(1) <= 2 {
				return 0, errors.New("price API: 503 service unavailable")
			}
			return 4200, nil
		}),
		tenuretest.Configure(func(c *runtime.Config) { c.Observer = inst }),
		tenuretest.ClientOptions(sdk.WithStartObserver(inst)))

	// sdk.Start, not tenuretest.Start: the run starts in the request's trace.
	ctx, request := tp.Tracer("test").Start(t.Context(), "handle /quote")
	run, err := sdk.Start(ctx, env.Client, PriceQuote, Quote{Symbol: "TNR"})
	request.End()
	if err != nil {
		t.Fatal(err)
	}
	if price, err := tenuretest.Result(env, run); err != nil || price != 4200 {
		t.Fatalf("Result = %d, %v", price, err)
	}

	// A success's span ends once its checkpoint is recorded, which may be
	// just after the run's result is.
	var got []sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(10 * time.Second); len(got) < 3 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		got = attemptSpans(spans)
	}
	h := env.History(run.ID)
	if len(got) != 3 || len(h) != 3 {
		t.Fatalf("%d attempt spans, %d attempts; want 3", len(got), len(h))
	}
	for i, s := range got {
		sc := s.SpanContext()
		if sc.TraceID() != request.SpanContext().TraceID() {
			t.Errorf("attempt %d: trace %s, not the request's", i+1, sc.TraceID())
		}
		if h[i].TraceID != sc.TraceID().String() || h[i].SpanID != sc.SpanID().String() {
			t.Errorf("attempt %d: row names span %s/%s, want %s", i+1, h[i].TraceID, h[i].SpanID, sc.SpanID())
		}
		if want := []string{"failed", "failed", "succeeded"}[i]; outcome(s) != want {
			t.Errorf("attempt %d: outcome %q, want %q", i+1, outcome(s), want)
		}
		if i > 0 && !slices.ContainsFunc(s.Links(), func(l sdktrace.Link) bool { return l.SpanContext.SpanID() == got[i-1].SpanContext().SpanID() }) {
			t.Errorf("attempt %d: links %v, none to attempt %d", i+1, s.Links(), i)
		}
	}
}

// attemptSpans are the ended spans of fetch-price's attempts, in order.
func attemptSpans(spans *tracetest.SpanRecorder) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.Name() == FetchPrice.Name() {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	return out
}

// outcome is an attempt span's outcome attribute.
func outcome(s sdktrace.ReadOnlySpan) string {
	for _, kv := range s.Attributes() {
		if kv.Key == tenureotel.KeyOutcome {
			return kv.Value.AsString()
		}
	}
	return ""
}
