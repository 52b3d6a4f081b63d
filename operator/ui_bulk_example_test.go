package operator_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// FailureSet counts the open failures a filter selects, however many, in a
// window it fixes; RequeueFailureSet then requeues exactly those, in one
// statement with one audit row, while failures that come after the window
// stay failed: what the web UI's "Requeue all" previews and confirms.
func ExampleOperator_FailureSet() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	fabricate(pool, schema,
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 3, Reason: sdk.ReasonRetriesExhausted},
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 3, Reason: sdk.ReasonRetriesExhausted},
		storetest.Outcome{Workflow: "orders", Activity: "ship", Errors: 1, Reason: sdk.ReasonNonRetryable},
		storetest.Outcome{Workflow: "billing", Activity: "invoice", Errors: 1, Reason: sdk.ReasonNonRetryable})
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		panic(err)
	}

	set, err := op.FailureSet(ctx, record.FailureGroupFilter{Workflow: "orders"})
	if err != nil {
		panic(err)
	}
	fmt.Println(set.Count, "failures")
	for _, g := range set.Breakdown {
		fmt.Println(g.Workflow, g.Activity, g.Reason, g.Failures)
	}
	// The incident goes on: a failure after the preview is not in its set.
	fabricate(pool, schema, storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 3, Reason: sdk.ReasonRetriesExhausted})

	n, err := op.RequeueFailureSet(ctx, operator.RequeueSet{Filter: set.Filter, Digest: set.Digest, Note: "INC-9",
		Audit: map[string]string{"workflow": "orders"}})
	if err != nil {
		panic(err)
	}
	audit, _ := op.AuditLog(ctx, 1)
	left, _ := op.Failures(ctx, operator.FailureFilter{Workflow: "orders"})
	fmt.Println("requeued", n, "runs in one audit row of", audit[0].Runs, "runs;", len(left), "failure left, the one after the window")
	_, err = op.RequeueFailureSet(ctx, operator.RequeueSet{Filter: set.Filter, Digest: set.Digest})
	fmt.Println(errors.Is(err, operator.ErrFailuresChanged))
	// Output:
	// 3 failures
	// orders charge retries_exhausted 2
	// orders ship non_retryable 1
	// requeued 3 runs in one audit row of 3 runs; 1 failure left, the one after the window
	// true
}

// A purge previewed against a fixed cutoff (PurgeOptions.Before) deletes,
// once confirmed, the runs its preview counted and sampled: not also those
// that failed meanwhile. The count and the sample lock nothing.
func ExampleOperator_PurgeSample() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	fabricate(pool, schema, storetest.Outcome{Workflow: "import", Activity: "parse", Errors: 1, Reason: sdk.ReasonNonRetryable})
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		panic(err)
	}

	before, err := op.PurgeCutoff(ctx, 0) // now, by the database's clock
	if err != nil {
		panic(err)
	}
	o := operator.PurgeOptions{Before: before, Workflow: "import", DryRun: true}
	counted, _ := op.PurgeFailures(ctx, o)
	sample, byWorkflow, _ := op.PurgeSample(ctx, o, 20)
	fmt.Println("would delete", counted.Runs, "run,", counted.Failures, "failure row;", len(sample), "in the sample, of", byWorkflow[0].Workflow)

	fabricate(pool, schema, storetest.Outcome{Workflow: "import", Activity: "parse", Errors: 1, Reason: sdk.ReasonNonRetryable})
	o.DryRun, o.Note = false, "RET-1"
	done, _ := op.PurgeFailures(ctx, o)
	left, _ := op.Failures(ctx, operator.FailureFilter{Workflow: "import"})
	audit, _ := op.AuditLog(ctx, 1)
	fmt.Println("deleted", done.Runs, "run;", len(left), "failure left, the one after the cutoff;",
		"the audit row records the cutoff:", audit[0].Filter["before"] != nil)
	// Output:
	// would delete 1 run, 1 failure row; 1 in the sample, of import
	// deleted 1 run; 1 failure left, the one after the cutoff; the audit row records the cutoff: true
}
