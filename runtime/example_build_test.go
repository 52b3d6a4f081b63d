package runtime_test

import (
	"context"
	"fmt"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// A worker's build is recorded on its registry row, on the runs it claims
// first and on the steps it writes: which code ran what, after a deploy.
// Without Config.BuildID it is the binary's VCS revision, or its hash.
func ExampleConfig_buildID() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	w, err := runtime.NewWorker(pool, runtime.Config{Schema: schema, BuildID: "v1.4.2"})
	if err != nil {
		panic(err)
	}
	_ = w.Register(Welcome)
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	run, _ := sdk.Start(ctx, client, Welcome, Greeting{Name: "Ada"})
	if _, err := run.Result(ctx); err != nil {
		panic(err)
	}

	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	workers, _ := op.Workers(ctx, false)
	r, _ := op.Run(ctx, run.ID)
	steps, _ := op.Steps(ctx, run.ID)
	fmt.Println("worker:", workers[0].BuildID)
	fmt.Println("run:", r.BuildID)
	fmt.Println("step 1:", steps[0].BuildID)
	// Without a BuildID, a worker takes the default, which must be a valid
	// build ID: NewWorker checks it.
	_, err = runtime.NewWorker(pool, runtime.Config{Schema: schema})
	fmt.Println("default is valid:", err == nil, runtime.DefaultBuildID() != "")
	// Output:
	// worker: v1.4.2
	// run: v1.4.2
	// step 1: v1.4.2
	// default is valid: true true
}
