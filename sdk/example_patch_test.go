package sdk_test

import (
	"context"
	"fmt"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// A deploy adds a fee to the charge while a run that charged without it
// waits for approval: behind Patched, that run replays the old branch and
// a new run takes the new one.
func ExamplePatched() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	charged := make(chan struct{}, 2)
	charge := activities.New("charge", func(ctx context.Context, cents int) (int, error) {
		charged <- struct{}{}
		return cents, nil
	})
	v1 := sdk.NewWorkflow("invoice", func(ctx context.Context, euros int) (int, error) {
		cents, err := sdk.Execute(ctx, charge, euros*100)
		if err != nil {
			return 0, err
		}
		_, err = sdk.Receive[string](ctx, "approved", 0)
		return cents, err
	})
	v2 := sdk.NewWorkflow("invoice", func(ctx context.Context, euros int) (int, error) {
		amount := euros * 100
		if sdk.Patched(ctx, "fee") {
			amount += 30
		}
		cents, err := sdk.Execute(ctx, charge, amount)
		if err != nil {
			return 0, err
		}
		_, err = sdk.Receive[string](ctx, "approved", 0)
		return cents, err
	})
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	worker := func(wf *sdk.Workflow[int, int]) *runtime.Worker {
		w, err := runtime.NewWorker(pool, testWorker(schema))
		if err != nil {
			panic(err)
		}
		_ = w.Register(wf)
		if err := w.Start(ctx); err != nil {
			panic(err)
		}
		return w
	}

	w1 := worker(v1)
	old, _ := sdk.Start(ctx, client, v1, 12)
	<-charged
	_ = w1.Shutdown(ctx) // the deploy: the run waits for approval, charged without the fee

	w2 := worker(v2)
	defer w2.Shutdown(ctx)
	fresh, _ := sdk.Start(ctx, client, v2, 12)
	<-charged
	for _, run := range []*sdk.Run[int]{old, fresh} {
		_ = client.Send(ctx, run.ID, "approved", "yes")
		cents, err := run.Result(ctx)
		fmt.Println(cents, err)
	}
	// Output:
	// 1200 <nil>
	// 1230 <nil>
}
