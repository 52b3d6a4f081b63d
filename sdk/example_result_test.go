package sdk_test

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
)

var Notify = activities.New("notify",
	func(ctx context.Context, in OrderIn) (string, error) {
		return "", errors.New("smtp: connection refused")
	},
	policy.MaxAttempts(5),
	policy.Constant(5*time.Millisecond),
)

// Announce notifies; a per-call option overrides the activity's default:
// two attempts here.
var Announce = sdk.NewWorkflow("announce", func(ctx context.Context, in OrderIn) (string, error) {
	return sdk.Execute(ctx, Notify, in, policy.MaxAttempts(2))
})

// Invoice fails, with an error of its own, for an order with nothing to pay.
var Invoice = sdk.NewWorkflow("invoice", func(ctx context.Context, in OrderIn) (string, error) {
	if in.Amount <= 0 {
		return "", fmt.Errorf("order %s: nothing to invoice", in.ID)
	}
	return fmt.Sprintf("invoice for %s: %d", in.ID, in.Amount), nil
})

// Result waits for the run to end. A completed run gives its output; a
// failed one a *sdk.RunError with its failure row's reason, step and last
// error; a cancelled one sdk.ErrCancelled. When ctx ends first, Result
// returns ctx's error and the run goes on.
func ExampleRun_Result() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	w, err := runtime.NewWorker(pool, testWorker(schema))
	if err != nil {
		panic(err)
	}
	if err := w.Register(Invoice, Announce); err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	defer client.Close()

	run, _ := sdk.Start(ctx, client, Invoice, OrderIn{ID: "H-1", Amount: 250})
	fmt.Println(run.Result(ctx))

	// The workflow's own error: reason workflow_error, at no step.
	run, _ = sdk.Start(ctx, client, Invoice, OrderIn{ID: "H-2"})
	_, err = run.Result(ctx)
	var re *sdk.RunError
	if errors.As(err, &re) {
		fmt.Printf("%s, step %d: %s\n", re.Reason, re.Step, re.Message)
	}

	// A step that gave up, returned by the workflow: the step's reason.
	failed, _ := sdk.Start(ctx, client, Announce, OrderIn{ID: "H-3"})
	_, err = failed.Result(ctx)
	if errors.As(err, &re) {
		fmt.Printf("%s, step %d (%s): %s\n", re.Reason, re.Step, re.Activity, re.Message)
	}

	later, _ := sdk.Start(ctx, client, Invoice, OrderIn{ID: "H-4", Amount: 10}, sdk.WithDelay(time.Hour))
	wait, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = later.Result(wait)
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output:
	// invoice for H-1: 250 <nil>
	// workflow_error, step 0: order H-2: nothing to invoice
	// retries_exhausted, step 1 (notify): smtp: connection refused
	// true
}
