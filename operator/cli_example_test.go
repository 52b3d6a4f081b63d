package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// A run started by the workflow's name, without its Go code, as
// `tenure runs start` does: with a key, a second Start finds the first run.
func ExampleOperator_Start() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	op, _ := operator.New(pool, operator.WithSchema(schema))

	input := json.RawMessage(`{"order": 42}`)
	first, err := op.Start(ctx, "place-order", input, operator.StartOptions{Key: "order-42"})
	if err != nil {
		panic(err)
	}
	again, _ := op.Start(ctx, "place-order", json.RawMessage(`{ "order":42 }`), operator.StartOptions{Key: "order-42"})
	fmt.Println(first.Created, again.Created, again.ID == first.ID)
	_, err = op.Start(ctx, "place-order", json.RawMessage(`{"order": 43}`), operator.StartOptions{Key: "order-42"})
	fmt.Println(errors.Is(err, sdk.ErrKeyConflict))

	served, _ := op.Served(ctx, "place-order", "default")
	fmt.Println("a live worker serves it:", served)
	run, _ := op.Run(ctx, first.ID)
	fmt.Println(run.Status, run.Queue, string(run.Input))
	// Output:
	// true false true
	// true
	// a live worker serves it: false
	// queued default {"order": 42}
}

// A long listing read page by page: each page starts after the last run of
// the one before, and CountRuns says how many there are in all.
func ExampleOperator_SearchRuns() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	op, _ := operator.New(pool, operator.WithSchema(schema))
	for i := range 5 {
		if _, err := op.Start(ctx, "report", json.RawMessage(fmt.Sprint(i)), operator.StartOptions{}); err != nil {
			panic(err)
		}
	}

	q := operator.RunSearch{Workflow: "report", Limit: 2}
	total, _ := op.CountRuns(ctx, q)
	fmt.Println("runs:", total)
	for {
		page, err := op.SearchRuns(ctx, q)
		if err != nil {
			panic(err)
		}
		if len(page) == 0 {
			break
		}
		fmt.Println("page of", len(page))
		last := page[len(page)-1]
		q.AfterCreated, q.AfterID = last.CreatedAt, last.ID
	}
	// Output:
	// runs: 5
	// page of 2
	// page of 2
	// page of 1
}

// One finished run deleted, with its failure rows, and counted in the
// audit log, which keeps its ID, workflow and status but not its key (here
// an e-mail address); a run still queued is refused.
func ExampleOperator_DeleteRun() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	ids := fabricate(pool, schema,
		storetest.Outcome{Workflow: "orders", Activity: "charge", Key: "ada@example.com", Errors: 1, Reason: sdk.ReasonNonRetryable})
	op, _ := operator.New(pool, operator.WithSchema(schema))

	deleted, err := op.DeleteRun(ctx, ids[0], "GDPR-7: erasure request")
	if err != nil {
		panic(err)
	}
	fmt.Printf("deleted %d run and %d failure row\n", deleted.Runs, deleted.Failures)
	_, err = op.Run(ctx, ids[0])
	fmt.Println(errors.Is(err, operator.ErrNotFound))
	audit, _ := op.AuditLog(ctx, 1)
	_, keyKept := audit[0].Filter["key"]
	fmt.Println(audit[0].Action, audit[0].Runs, audit[0].Failures, audit[0].Filter["status"], audit[0].RunIDs[0] == ids[0], keyKept, audit[0].Note)

	queued, _ := op.Start(ctx, "orders", nil, operator.StartOptions{})
	_, err = op.DeleteRun(ctx, queued.ID, "")
	fmt.Println(errors.Is(err, operator.ErrNotFinished))
	// Output:
	// deleted 1 run and 1 failure row
	// true
	// delete 1 1 failed true false GDPR-7: erasure request
	// true
}

// Waiting for a run's end without the workflow's Go code, as `tenure runs
// result --follow` does: only the run's progress is read until it has
// ended, then the whole run once. This run has ended already, so the wait
// is one read.
func ExampleOperator_AwaitRun() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	ids := fabricate(pool, schema, storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 1})
	op, _ := operator.New(pool, operator.WithSchema(schema))

	ctx, cancel := context.WithTimeout(ctx, time.Minute) // wait a minute at most
	defer cancel()
	run, err := op.AwaitRun(ctx, ids[0], operator.AwaitOptions{Steps: true,
		Progress: func(p record.Progress) error {
			fmt.Println("progress:", p.Status, p.StepsEnded, "step ended")
			return nil
		}})
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Status, string(run.Output))
	// Output:
	// progress: completed 1 step ended
	// completed 1
}

// The status of a run, read without its payloads.
func ExampleOperator_RunProgress() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	op, _ := operator.New(pool, operator.WithSchema(schema))
	started, _ := op.Start(ctx, "orders", json.RawMessage(`{"order": 42}`), operator.StartOptions{})

	p, err := op.RunProgress(ctx, started.ID, false)
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Status, p.FinishedAt == nil)
	// Output:
	// queued true
}
