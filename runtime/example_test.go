package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

type Greeting struct{ Name string }

var Greet = activities.New("greet",
	func(ctx context.Context, g Greeting) (string, error) { return "hello, " + g.Name, nil })

var Welcome = sdk.NewWorkflow("welcome", func(ctx context.Context, g Greeting) (string, error) {
	return sdk.Execute(ctx, Greet, g)
})

// A worker claims runs of the workflows registered on it, until Shutdown
// drains it: attempts in flight finish (or are interrupted when the drain
// time is over) and their runs are handed to another worker.
func ExampleWorker() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	w, err := runtime.NewWorker(pool, runtime.Config{
		Schema:      schema,
		Concurrency: 16,
		LeaseTTL:    30 * time.Second,
		Defaults:    []policy.Option{policy.MaxAttempts(5)}, // worker-wide, below activity defaults
	})
	if err != nil {
		panic(err)
	}
	if err := w.Register(Welcome); err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	run, _ := sdk.Start(ctx, client, Welcome, Greeting{Name: "Ada"})
	out, err := run.Result(ctx)
	fmt.Println(out, err)

	drain, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	fmt.Println(w.Shutdown(drain), <-done, w.Stats().Completed)
	// Output:
	// hello, Ada <nil>
	// <nil> <nil> 1
}

// Start runs the worker in the background, after returning the errors Run
// would meet at start-up, such as a schema that was never migrated.
func ExampleWorker_Start() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	unmigrated, err := runtime.NewWorker(pool, runtime.Config{Schema: "not_migrated"})
	if err != nil {
		panic(err)
	}
	_ = unmigrated.Register(Welcome)
	fmt.Println(errors.Is(unmigrated.Start(ctx), store.ErrSchemaMissing))

	w, err := runtime.NewWorker(pool, runtime.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	_ = w.Register(Welcome)
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	run, _ := sdk.Start(ctx, client, Welcome, Greeting{Name: "Grace"})
	fmt.Println(run.Result(ctx))
	fmt.Println(w.Shutdown(ctx)) // drains, and waits for the worker to stop
	// Output:
	// true
	// hello, Grace <nil>
	// <nil>
}

// Health answers a readiness probe: nil while the worker runs and reaches
// the database, else the failing path and its real database error. A worker
// that cannot write keeps its runs and retries; it needs its database fixed,
// not a restart. StatementTimeout bounds every statement it sends.
func ExampleWorker_Health() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	w, err := runtime.NewWorker(pool, runtime.Config{Schema: schema, StatementTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	_ = w.Register(Welcome)
	fmt.Println(errors.Is(w.Health(), runtime.ErrNotRunning))
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	ready := func() error { return w.Health() } // e.g. behind GET /readyz
	fmt.Println(ready())
	fmt.Println(w.Shutdown(ctx), errors.Is(w.Health(), runtime.ErrNotRunning))
	// Output:
	// true
	// <nil>
	// <nil> true
}

// Replication says how the database server replicates the worker's
// commits, read at start and every minute: on a server with standbys that
// commits do not wait for (ReplicationAsynchronous) a failover can lose
// acknowledged runs, and the worker says so once in its log; with
// RequireSynchronousReplication, Health reports it too. The example's
// server has no standby.
func ExampleWorker_Replication() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	w, err := runtime.NewWorker(pool, runtime.Config{Schema: schema, RequireSynchronousReplication: true})
	if err != nil {
		panic(err)
	}
	_ = w.Register(Welcome)
	if err := w.Start(context.Background()); err != nil {
		panic(err)
	}
	defer func() { _ = w.Shutdown(context.Background()) }()
	r := w.Replication()
	fmt.Println(r.Mode, r.Standbys, w.Health())
	// Output:
	// none 0 <nil>
}
