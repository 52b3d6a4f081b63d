package sdk_test

import (
	"context"
	"fmt"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// A pinned workflow's run is claimed only by workers of the build that
// first claimed it: after a deploy of build v2, a run that v1 started waits
// for a v1 worker, named by its build among the orphaned runs, until it is
// moved to v2 on purpose.
func ExampleWithPinning() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	reached := make(chan struct{}, 2)
	arrive := activities.New("arrive", func(ctx context.Context, name string) (string, error) {
		reached <- struct{}{}
		return name, nil
	})
	version := func(greeting string) *sdk.Workflow[string, string] {
		return sdk.NewWorkflow("greet", func(ctx context.Context, name string) (string, error) {
			name, err := sdk.Execute(ctx, arrive, name)
			if err != nil {
				return "", err
			}
			if _, err := sdk.Receive[string](ctx, "go", 0); err != nil {
				return "", err
			}
			return greeting + ", " + name, nil
		}, sdk.WithPinning())
	}
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	worker := func(build string, wf *sdk.Workflow[string, string]) *runtime.Worker {
		cfg := testWorker(schema)
		cfg.BuildID = build
		w, err := runtime.NewWorker(pool, cfg)
		if err != nil {
			panic(err)
		}
		_ = w.Register(wf)
		if err := w.Start(ctx); err != nil {
			panic(err)
		}
		return w
	}

	v1, v2 := version("Hello"), version("Hi")
	w1 := worker("v1", v1)
	old, _ := sdk.Start(ctx, client, v1, "old")
	<-reached
	_ = w1.Shutdown(ctx) // the deploy: v1's workers are gone

	w2 := worker("v2", v2)
	defer w2.Shutdown(ctx)
	fresh, _ := sdk.Start(ctx, client, v2, "new")
	<-reached
	for _, run := range []*sdk.Run[string]{old, fresh} {
		_ = client.Send(ctx, run.ID, "go", "")
	}
	fmt.Println(fresh.Result(ctx))
	orphans, _ := op.Orphans(ctx)
	for _, o := range orphans {
		fmt.Printf("%s: %d run pinned to build %s, which no live worker runs\n", o.Workflow, o.Runs, o.Build)
	}
	moved, _ := op.MoveRuns(ctx, operator.MoveFilter{From: "v1", To: "v2"}, operator.MoveOptions{Note: "v1 retired"})
	fmt.Printf("moved %d run to v2\n", moved[0].Runs)
	fmt.Println(old.Result(ctx))
	// Output:
	// Hi, new <nil>
	// greet: 1 run pinned to build v1, which no live worker runs
	// moved 1 run to v2
	// Hi, old <nil>
}
