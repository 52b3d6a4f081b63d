package otel_test

import (
	"context"
	"fmt"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/operator"
	tenureotel "github.com/tenurehq/tenure/otel"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

var Lookup = activities.New("lookup", func(ctx context.Context, key string) (string, error) { return "value of " + key, nil })

var Cache = sdk.NewWorkflow("cache", func(ctx context.Context, key string) (string, error) {
	return sdk.Execute(ctx, Lookup, key)
})

// One Instrumentation traces both ends: the client's Start and the worker's
// segments and attempts.
func ExampleNew() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	spans := tracetest.NewSpanRecorder() // in production: an exporter to your backend
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	inst, err := tenureotel.New(tenureotel.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}

	w, err := runtime.NewWorker(pool, runtime.Config{Schema: schema, Observer: inst, PollInterval: 20 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	_ = w.Register(Cache)
	if err := w.Start(ctx); err != nil {
		panic(err)
	}

	client, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithStartObserver(inst))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	run, _ := sdk.Start(ctx, client, Cache, "k1")
	_, _ = run.Result(ctx)
	_ = w.Shutdown(ctx)

	for _, s := range spans.Ended() {
		fmt.Println(s.Name())
	}
	// Unordered output:
	// start cache
	// lookup
	// run cache
}

// ObserveOrphans registers a gauge of the queued runs no live worker serves;
// register it once per process that has an operator.Operator (a worker's, or
// a monitoring job's).
func ExampleObserveOrphans() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	op, _ := operator.New(pool, operator.WithSchema(schema))
	reg, err := tenureotel.ObserveOrphans(op) // on the global meter provider
	if err != nil {
		panic(err)
	}
	defer reg.Unregister()
	fmt.Println("registered", tenureotel.MetricRunsOrphaned)
	// Output: registered tenure.runs.orphaned
}
