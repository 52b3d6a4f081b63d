package operator_test

import (
	"context"
	"fmt"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/sdk"
)

// OpenFailureMembers lists every open failure a filter selects, however
// many; RequeueFailureIDs then requeues exactly those, in one statement with
// one audit row: what the web UI's "Requeue all" previews and confirms.
func ExampleOperator_OpenFailureMembers() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	fabricate(pool, schema,
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 3, Reason: sdk.ReasonRetriesExhausted},
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 3, Reason: sdk.ReasonRetriesExhausted},
		storetest.Outcome{Workflow: "billing", Activity: "invoice", Errors: 1, Reason: sdk.ReasonNonRetryable})
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		panic(err)
	}

	members, err := op.OpenFailureMembers(ctx, operator.FailureGroupFilter{Workflow: "orders"})
	if err != nil {
		panic(err)
	}
	ids := make([]int64, len(members))
	for i, m := range members {
		ids[i] = m.ID
		fmt.Println(m.Workflow, m.Activity, m.Reason)
	}
	runs, err := op.RequeueFailureIDs(ctx, ids, "INC-9", map[string]string{"workflow": "orders"})
	if err != nil {
		panic(err)
	}
	audit, _ := op.AuditLog(ctx, 0)
	fmt.Println("requeued", len(runs), "runs;", len(audit), "audit row of", audit[0].Runs, "runs")
	// Output:
	// orders charge retries_exhausted
	// orders charge retries_exhausted
	// requeued 2 runs; 1 audit row of 2 runs
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
