package operator_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/sdk"
)

// Approval is a workflow that a person unblocks with a signal.
var Approval = sdk.NewWorkflow("approval", func(ctx context.Context, order string) (string, error) {
	return sdk.Receive[string](ctx, "approve", 0)
})

// An operator sends a signal to a run (it is kept until the workflow
// receives it), and cancels another run.
func ExampleOperator_Signal() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	client, _ := sdk.NewClient(pool, sdk.WithSchema(schema))
	defer client.Close()
	run, _ := sdk.Start(ctx, client, Approval, "order-42")

	op, _ := operator.New(pool, operator.WithSchema(schema))
	id, err := op.Signal(ctx, run.ID, "approve", []byte(`"ann"`))
	fmt.Println("signal", id, err)

	// The run has not started (no worker yet): Cancel ends it at once.
	requested, err := op.Cancel(ctx, run.ID, "customer asked")
	fmt.Println("requested:", requested, err)
	_, err = op.Signal(ctx, run.ID, "approve", nil)
	fmt.Println("to a cancelled run:", errors.Is(err, operator.ErrFinished))
	// Output:
	// signal 1 <nil>
	// requested: false <nil>
	// to a cancelled run: true
}

// Schemas lists the schemas that hold Tenure's tables, for a person who
// does not know which one an application uses.
func ExampleOperator_Schemas() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	op, _ := operator.New(pool, operator.WithSchema(schema))
	schemas, err := op.Schemas(context.Background())
	found := false
	for _, s := range schemas {
		found = found || s == schema
	}
	fmt.Println(found, err)
	// Output: true <nil>
}

// RequeueFailureIDs puts back exactly the failures a person looked at (a
// preview's rows), with one audit row.
func ExampleOperator_RequeueFailureIDs() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	fabricate(pool, schema,
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 1, Reason: sdk.ReasonNonRetryable},
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 1, Reason: sdk.ReasonNonRetryable})
	op, _ := operator.New(pool, operator.WithSchema(schema))
	failures, _ := op.Failures(ctx, operator.FailureFilter{Activity: "charge"})
	ids := make([]int64, len(failures))
	for i, f := range failures {
		ids[i] = f.ID
	}
	runs, err := op.RequeueFailureIDs(ctx, ids, "INC-12: charge fixed", map[string]string{"activity": "charge"})
	fmt.Println(len(runs), err)
	audit, _ := op.AuditLog(ctx, 1)
	fmt.Println(audit[0].Action, audit[0].Runs, audit[0].Note)
	// Output:
	// 2 <nil>
	// requeue 2 INC-12: charge fixed
}
