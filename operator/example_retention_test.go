package operator_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
)

// Retention as configuration: completed and cancelled runs go 30 days after
// they finished, runs with failure history after 180, their histories
// archived first. Workers carry it out every ten minutes, a day's
// partitions of steps and attempts at a time; RetainHistory does it now.
func ExampleOperator_SetRetention() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	op, _ := operator.New(pool, operator.WithSchema(schema))

	const day = 24 * time.Hour
	err := op.SetRetention(ctx, record.HistoryRetention{Completed: 30 * day, Cancelled: 30 * day, Failed: 180 * day,
		Archive: true, Note: "policy RP-3"})
	if err != nil {
		panic(err)
	}
	r, _ := op.Retention(ctx)
	fmt.Println(r.Completed, r.Cancelled, r.Failed, r.Archive, r.Note)
	if err := op.RetainHistory(ctx, "on-call", "after the policy change"); err != nil {
		panic(err)
	}
	drops, _ := op.HistoryDrops(ctx, 10)
	fmt.Println(len(drops), "days dropped") // a new schema has no day that old
	fmt.Println(op.SetRetention(ctx, record.HistoryRetention{Completed: time.Minute}))
	// Output:
	// 720h0m0s 720h0m0s 4320h0m0s true policy RP-3
	// 0 days dropped
	// tenure: a retention age must be at least an hour, or 0 to keep that kind of run: 1m0s
}
