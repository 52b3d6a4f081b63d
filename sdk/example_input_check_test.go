package sdk_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// Bill is what a billing run is given.
type Bill struct{ Euros int }

// A deploy changes how a step's input is computed while a run that
// recorded the step waits: by default its replay fails the run with
// reason nondeterminism, naming the step; WithInputCheck(InputCheckWarn)
// replays the step from its record instead, logging the difference.
func ExampleWithInputCheck() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	charged := make(chan struct{}, 2)
	charge := activities.New("charge", func(ctx context.Context, cents int) (int, error) {
		charged <- struct{}{}
		return cents, nil
	})
	// billing is the workflow as a build declares it: step 1 charges the
	// cents that build computes; step 2 waits for a signal.
	billing := func(cents func(Bill) int, opts ...sdk.WorkflowOption) *sdk.Workflow[Bill, int] {
		return sdk.NewWorkflow("billing", func(ctx context.Context, in Bill) (int, error) {
			n, err := sdk.Execute(ctx, charge, cents(in))
			if err != nil {
				return 0, err
			}
			if _, err := sdk.Receive[string](ctx, "approved", 0); err != nil {
				return 0, err
			}
			return n, nil
		}, opts...)
	}
	v1 := billing(func(in Bill) int { return in.Euros * 100 })
	withFee := func(in Bill) int { return in.Euros*100 + 30 } // the new build adds a fee

	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	// deploy runs one run under v1 until it charged, then hands it to a
	// worker of v2, signals it, and returns the run's result.
	deploy := func(v2 *sdk.Workflow[Bill, int]) (int, error) {
		run, err := sdk.Start(ctx, client, v1, Bill{Euros: 12})
		if err != nil {
			panic(err)
		}
		for _, wf := range []*sdk.Workflow[Bill, int]{v1, v2} {
			w, err := runtime.NewWorker(pool, testWorker(schema))
			if err != nil {
				panic(err)
			}
			_ = w.Register(wf)
			if err := w.Start(ctx); err != nil {
				panic(err)
			}
			if wf == v1 {
				<-charged
				_ = w.Shutdown(ctx) // the run is handed back, step 1 recorded
				continue
			}
			defer w.Shutdown(ctx)
		}
		if err := client.Send(ctx, run.ID, "approved", "yes"); err != nil {
			panic(err)
		}
		return run.Result(ctx)
	}

	_, err = deploy(billing(withFee))
	var re *sdk.RunError
	if errors.As(err, &re) {
		fmt.Printf("default: %s at step %d\n", re.Reason, re.Step)
	}
	cents, err := deploy(billing(withFee, sdk.WithInputCheck(sdk.InputCheckWarn)))
	fmt.Println("warn:", cents, err)
	// Output:
	// default: nondeterminism at step 1
	// warn: 1200 <nil>
}
