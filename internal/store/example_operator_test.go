package store_test

import (
	"context"
	"fmt"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/internal/store"
)

// A bulk requeue: first a dry run to see what would go back, then the
// requeue itself, which leaves an audit_log row with the filter and the note.
func ExampleStore_RequeueFailures() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	st, _ := store.New(pool, store.WithSchema(schema))
	h := exampleHistory(st) // three failed runs, as workers would leave them
	h.run(outcome{workflow: "orders", activity: "charge", errors: 3, reason: "retries_exhausted"})
	h.run(outcome{workflow: "orders", activity: "charge", errors: 3, reason: "retries_exhausted"})
	h.run(outcome{workflow: "orders", activity: "email", errors: 1, reason: "non_retryable"})

	filter := store.RequeueFilter{Activity: "charge", Reason: "retries_exhausted"}
	plan, err := st.RequeueFailures(ctx, filter, store.RequeueOptions{DryRun: true})
	if err != nil {
		panic(err)
	}
	fmt.Println("dry run:", len(plan), "runs would be requeued")

	done, err := st.RequeueFailures(ctx, filter, store.RequeueOptions{Note: "INC-42: card processor fixed"})
	if err != nil {
		panic(err)
	}
	fmt.Println("requeued:", len(done))
	audit, _ := st.AuditLog(ctx, 1)
	fmt.Println(audit[0].Action, audit[0].Runs, audit[0].Filter, audit[0].Note)
	// Output:
	// dry run: 2 runs would be requeued
	// requeued: 2
	// requeue 2 map[activity:charge reason:retries_exhausted] INC-42: card processor fixed
}

// Retention is explicit, and every deletion is counted: completed runs go
// with PurgeCompleted, failure history only with PurgeFailures.
func ExampleStore_PurgeCompleted() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	st, _ := store.New(pool, store.WithSchema(schema))
	h := exampleHistory(st)
	h.run(outcome{workflow: "orders", activity: "charge"}) // completed
	h.run(outcome{workflow: "orders", activity: "charge", errors: 1, reason: "non_retryable"})

	p, err := st.PurgeCompleted(ctx, store.PurgeOptions{OlderThan: 0, Note: "nightly retention"})
	if err != nil {
		panic(err)
	}
	fmt.Printf("completed runs deleted: %d\n", p.Runs)
	p, _ = st.PurgeFailures(ctx, store.PurgeOptions{OlderThan: 0, DryRun: true})
	fmt.Printf("failure purge would delete %d runs and %d failure rows\n", p.Runs, p.Failures)
	audit, _ := st.AuditLog(ctx, 0)
	fmt.Println(len(audit), "audit row:", audit[0].Action, audit[0].Runs, audit[0].Note)
	// Output:
	// completed runs deleted: 1
	// failure purge would delete 1 runs and 1 failure rows
	// 1 audit row: purge_completed 1 nightly retention
}
