// Command tracing shows the OpenTelemetry spans of a retried activity: one
// span per attempt, linked to the previous one, with the error as an event
// and the delay chosen before the next attempt.
//
//	cd examples/workflows/tracing && go run .
//
// It is a module of its own, so that the OpenTelemetry SDK and exporters it
// uses are not requirements of the core module (package otel needs only the
// OpenTelemetry API).
//
// Spans go to stdout, or to an OTLP/HTTP collector when
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set.
// It uses DATABASE_URL when set, otherwise a private throwaway PostgreSQL.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/devdb"
	"github.com/tenurehq/tenure/operator"
	tenureotel "github.com/tenurehq/tenure/otel"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// Quote is the input of the workflow.
type Quote struct{ Symbol string }

// priceCalls counts calls of the fake price API, which fails twice.
var priceCalls atomic.Int32

// FetchPrice calls a price API that answers 503 twice.
var FetchPrice = activities.New("fetch-price",
	func(ctx context.Context, q Quote) (int, error) {
		if priceCalls.Add(1) <= 2 {
			return 0, errors.New("price API: 503 service unavailable")
		}
		return 4200, nil
	},
	policy.MaxAttempts(5),
	policy.Exponential(50*time.Millisecond, 2, time.Second),
	policy.Jitter(policy.EqualJitter),
)

// PriceQuote fetches a price.
var PriceQuote = sdk.NewWorkflow("price-quote", func(ctx context.Context, q Quote) (int, error) {
	return sdk.Execute(ctx, FetchPrice, q)
})

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tracing:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	db, err := devdb.Open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	fmt.Fprintf(out, "schema %s in %s\n", "tenure_tracing", db)
	exporter, err := newExporter(ctx, out)
	if err != nil {
		return err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	return quote(ctx, out, db.URL, "tenure_tracing", tp)
}

// newExporter exports to OTLP/HTTP when an endpoint is configured, else to out.
func newExporter(ctx context.Context, out io.Writer) (sdktrace.SpanExporter, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		return otlptracehttp.New(ctx) // reads the standard OTEL_EXPORTER_OTLP_* variables
	}
	return stdouttrace.New(stdouttrace.WithWriter(out), stdouttrace.WithPrettyPrint())
}

// quote runs one traced workflow in schema, which it recreates.
func quote(ctx context.Context, out io.Writer, url, schema string, tp *sdktrace.TracerProvider) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return err
	}
	if err := store.Migrate(ctx, pool, store.WithSchema(schema)); err != nil {
		return err
	}

	// One option on the worker and one on the client turn tracing on.
	inst, err := tenureotel.New(tenureotel.WithTracerProvider(tp))
	if err != nil {
		return err
	}
	w, err := runtime.NewWorker(pool, runtime.Config{
		Schema: schema, Observer: inst, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	if err := w.Register(PriceQuote); err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer func() {
		drain, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Shutdown(drain)
	}()
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithStartObserver(inst))
	if err != nil {
		return err
	}
	defer client.Close()
	op, err := operator.New(pool, operator.WithSchema(schema)) // reads the attempts table
	if err != nil {
		return err
	}

	ctx, span := tp.Tracer("example").Start(ctx, "handle /quote")
	run, err := sdk.Start(ctx, client, PriceQuote, Quote{Symbol: "TNR"})
	span.End()
	if err != nil {
		return err
	}
	price, err := run.Result(ctx)
	if err != nil {
		return err
	}
	h, err := op.History(ctx, run.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nprice %d after %d attempts; the attempts table links each row to its span:\n", price, len(h))
	for _, a := range h {
		fmt.Fprintf(out, "  attempt %d %-9s trace_id=%s span_id=%s\n", a.Attempt, a.Status, a.TraceID, a.SpanID)
	}
	fmt.Fprintf(out, "SQL: SELECT attempt, status, trace_id, span_id FROM %s.attempts WHERE run_id = '%s' ORDER BY attempt;\n", schema, run.ID)
	return nil
}
