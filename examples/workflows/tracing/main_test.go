package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tenurehq/tenure/internal/noleaks"
	"github.com/tenurehq/tenure/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(noleaks.Main(m)) }

func TestTracing_PrintsTheAttemptSpansOfARetriedActivity(t *testing.T) {
	var out bytes.Buffer
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	if err := quote(t.Context(), &out, pgtest.URL(t), pgtest.Schema(t), tp); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	attempts := 0
	for _, s := range spans.Ended() {
		if s.Name() == "fetch-price" {
			attempts++
		}
	}
	if attempts != 3 || !strings.Contains(out.String(), "price 4200 after 3 attempts") {
		t.Fatalf("%d attempt spans; output:\n%s", attempts, out.String())
	}

	// And the stdout exporter the command uses by default prints them.
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
