package sdk_test

import (
	"context"
	"fmt"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

var Ship = sdk.NewWorkflow("ship", func(ctx context.Context, in OrderIn) (string, error) {
	return "shipped " + in.ID, nil
})

// StartMany records many runs in one transaction; a key already used returns
// the existing run.
func ExampleStartMany() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	w, err := runtime.NewWorker(pool, testWorker(schema))
	if err != nil {
		panic(err)
	}
	_ = w.Register(Ship)
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)

	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	runs, err := sdk.StartMany(ctx, client, Ship, []sdk.StartParams[OrderIn]{
		{Input: OrderIn{ID: "D-1"}, Options: []sdk.StartOption{sdk.WithKey("order-D-1")}},
		{Input: OrderIn{ID: "D-2"}, Options: []sdk.StartOption{sdk.WithPriority(5)}},
		{Input: OrderIn{ID: "D-1"}, Options: []sdk.StartOption{sdk.WithKey("order-D-1")}},
	})
	if err != nil {
		panic(err)
	}
	for _, run := range runs {
		out, err := run.Result(ctx)
		fmt.Println(out, err, run.Created)
	}
	fmt.Println("same run:", runs[0].ID == runs[2].ID)
	// Output:
	// shipped D-1 <nil> true
	// shipped D-2 <nil> true
	// shipped D-1 <nil> false
	// same run: true
}
