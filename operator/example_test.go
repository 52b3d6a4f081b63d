package operator_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/sdk"
)

// An Operator on the application's pool answers "what failed, and why?".
func ExampleNew() {
	pool, schema, closeDB := exampledb.Open() // a pool and a migrated schema
	defer closeDB()
	ctx := context.Background()
	fabricate(pool, schema, // two failed runs, as workers would leave them
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 3, Reason: sdk.ReasonRetriesExhausted},
		storetest.Outcome{Workflow: "orders", Activity: "email", Errors: 1, Reason: sdk.ReasonNonRetryable})

	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		panic(err) // a nil pool or an invalid schema name
	}
	failures, err := op.Failures(ctx, operator.FailureFilter{Workflow: "orders", Since: time.Now().Add(-time.Hour)})
	if err != nil {
		panic(err)
	}
	for _, f := range failures {
		fmt.Println(f.Activity, f.Reason, f.Attempts, f.ErrorMessage)
	}
	// Output:
	// email non_retryable 1 boom
	// charge retries_exhausted 3 boom
}

// The timeline of a run: every attempt of every step, in order.
func ExampleOperator_History() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	ids := fabricate(pool, schema,
		storetest.Outcome{Workflow: "orders", Activity: "charge", Key: "order-42", Errors: 2})
	op, _ := operator.New(pool, operator.WithSchema(schema))

	run, err := op.RunByKey(ctx, "order-42")
	if err != nil {
		panic(err)
	}
	fmt.Println(run.ID == ids[0], run.Workflow, run.Status)
	attempts, _ := op.History(ctx, run.ID)
	for _, a := range attempts {
		fmt.Println(a.Step, a.Attempt, a.Activity, a.Status, a.ErrorMessage)
	}
	// Output:
	// true orders completed
	// 1 1 charge failed boom
	// 1 2 charge failed boom
	// 1 3 charge succeeded
}

// A bulk requeue: first a dry run to see what would go back, then the
// requeue itself, which leaves an audit_log row with the filter and the note.
func ExampleOperator_RequeueFailures() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	fabricate(pool, schema,
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 3, Reason: sdk.ReasonRetriesExhausted},
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 3, Reason: sdk.ReasonRetriesExhausted},
		storetest.Outcome{Workflow: "orders", Activity: "email", Errors: 1, Reason: sdk.ReasonNonRetryable})
	op, _ := operator.New(pool, operator.WithSchema(schema))

	filter := operator.RequeueFilter{Activity: "charge", Reason: sdk.ReasonRetriesExhausted}
	plan, err := op.RequeueFailures(ctx, filter, operator.RequeueOptions{DryRun: true})
	if err != nil {
		panic(err)
	}
	fmt.Println("dry run:", len(plan), "runs would be requeued")

	done, err := op.RequeueFailures(ctx, filter, operator.RequeueOptions{Note: "INC-42: card processor fixed"})
	if err != nil {
		panic(err)
	}
	fmt.Println("requeued:", len(done))
	audit, _ := op.AuditLog(ctx, 1)
	fmt.Println(audit[0].Action, audit[0].Runs, audit[0].Filter, audit[0].Note)
	// Output:
	// dry run: 2 runs would be requeued
	// requeued: 2
	// requeue 2 map[activity:charge reason:retries_exhausted] INC-42: card processor fixed
}

// Retention is explicit, and every deletion is counted: completed runs go
// with PurgeCompleted, failure history only with PurgeFailures.
func ExampleOperator_PurgeCompleted() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	fabricate(pool, schema,
		storetest.Outcome{Workflow: "orders", Activity: "charge"}, // completed
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 1, Reason: sdk.ReasonNonRetryable})
	op, _ := operator.New(pool, operator.WithSchema(schema))

	p, err := op.PurgeCompleted(ctx, operator.PurgeOptions{OlderThan: 0, Note: "nightly retention"})
	if err != nil {
		panic(err)
	}
	fmt.Printf("completed runs deleted: %d\n", p.Runs)
	p, _ = op.PurgeFailures(ctx, operator.PurgeOptions{OlderThan: 0, DryRun: true})
	fmt.Printf("failure purge would delete %d runs and %d failure rows\n", p.Runs, p.Failures)
	audit, _ := op.AuditLog(ctx, 0)
	fmt.Println(len(audit), "audit row:", audit[0].Action, audit[0].Runs, audit[0].Note)
	// Output:
	// completed runs deleted: 1
	// failure purge would delete 1 runs and 1 failure rows
	// 1 audit row: purge_completed 1 nightly retention
}

// Replication says what a failover of the database server can cost: with
// standbys that commits do not wait for ("asynchronous") it can lose
// acknowledged runs (docs/guarantees.md). The example's server has none.
func ExampleOperator_Replication() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	r, err := op.Replication(context.Background())
	fmt.Println(r.Mode, r.Standbys, err)
	fmt.Println(r.Description)
	// Output:
	// none 0 <nil>
	// the server streams to no standby
}
