package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// Label prints the shipping label of one parcel; parcel 42 is damaged.
var Label = activities.New("label", func(ctx context.Context, parcel int) (string, error) {
	if parcel == 42 {
		return "", policy.Permanent(fmt.Errorf("parcel %d is damaged", parcel))
	}
	return fmt.Sprintf("label-%03d", parcel), nil
})

// LabelParcel is the child workflow: one parcel.
var LabelParcel = sdk.NewWorkflow("label-parcel", func(ctx context.Context, parcel int) (string, error) {
	return sdk.Execute(ctx, Label, parcel)
})

// shipReport is what LabelShipment returns.
type shipReport struct {
	Labelled int
	Failed   []string
}

// LabelShipment labels n parcels in parallel, a child run each: it starts
// them all, then waits for each in turn.
var LabelShipment = sdk.NewWorkflow("label-shipment", func(ctx context.Context, n int) (shipReport, error) {
	var children []*sdk.Child[string]
	for parcel := range n {
		c, err := sdk.StartChild(ctx, LabelParcel, parcel)
		if err != nil {
			return shipReport{}, err
		}
		children = append(children, c)
	}
	var rep shipReport
	for _, c := range children {
		_, err := c.Result(ctx)
		var ce *sdk.ChildError
		switch {
		case errors.As(err, &ce):
			rep.Failed = append(rep.Failed, fmt.Sprintf("%s %s: %s: %s", ce.Workflow, ce.Status, ce.Reason, ce.Message))
		case err != nil:
			return shipReport{}, err
		default:
			rep.Labelled++
		}
	}
	return rep, nil
})

// StartChild starts child runs without waiting for them: a fan-out. Each
// child is a run of its own (runs.parent_run_id names the parent), its start
// a step of kind child of the parent, and the parent waits for each Result
// without a lease, woken by the child's end. A child that fails reaches the
// parent as a *sdk.ChildError carrying the child's failure reason; the
// parent decides what that means for it.
func ExampleStartChild() {
	pool, schema, client, _, done := startExample(func(c *runtime.Config) {
		c.Concurrency = 32
	}, LabelShipment, LabelParcel)
	defer done()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, LabelShipment, 100)
	if err != nil {
		panic(err)
	}
	rep, err := run.Result(ctx)
	fmt.Println("labelled:", rep.Labelled, err)
	for _, f := range rep.Failed {
		fmt.Println("failed:", f)
	}

	var children, childSteps int
	_ = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+pgx.Identifier{schema}.Sanitize()+`.runs WHERE parent_run_id = $1),
	                               (SELECT count(*) FROM `+pgx.Identifier{schema}.Sanitize()+`.step_timeline
	                                WHERE run_id = $1 AND kind = 'child')`, run.ID).Scan(&children, &childSteps)
	fmt.Println("child runs:", children, "child steps:", childSteps)
	// Output:
	// labelled: 99 <nil>
	// failed: label-parcel failed: non_retryable: parcel 42 is damaged
	// child runs: 100 child steps: 100
}

// Tax is the child workflow of PriceOrder.
var Tax = sdk.NewWorkflow("tax", func(ctx context.Context, amount int) (int, error) {
	return amount / 5, nil
})

// PriceOrder adds the tax that a child run computes.
var PriceOrder = sdk.NewWorkflow("price-order", func(ctx context.Context, amount int) (int, error) {
	tax, err := sdk.Call(ctx, Tax, amount)
	if err != nil {
		return 0, err
	}
	return amount + tax, nil
})

// Call starts one child run and waits for its result. The child's key is
// derived from the parent run and the step, so a replay of the parent finds
// the child it started instead of starting another.
func ExampleCall() {
	pool, schema, client, _, done := startExample(nil, PriceOrder, Tax)
	defer done()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, PriceOrder, 250)
	if err != nil {
		panic(err)
	}
	out, err := run.Result(ctx)
	fmt.Println(out, err)

	var key, status string
	_ = pool.QueryRow(ctx, `SELECT run_key, status FROM `+pgx.Identifier{schema}.Sanitize()+`.runs WHERE parent_run_id = $1`,
		run.ID).Scan(&key, &status)
	fmt.Println("child:", strings.ReplaceAll(key, run.ID.String(), "<parent>"), status)
	printTimeline(ctx, pool, schema, run.ID)
	// Output:
	// 300 <nil>
	// child: tenure-child:<parent>/1 completed
	// 1 child tax completed
}
