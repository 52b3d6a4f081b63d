package operator_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// fixDeployed stands for the fix that makes Restock work.
var fixDeployed atomic.Bool

type order struct{ ID string }

// Restock fails until the fix is deployed.
var Restock = activities.New("restock", func(ctx context.Context, in order) (string, error) {
	if !fixDeployed.Load() {
		return "", errors.New("warehouse API: unknown SKU format")
	}
	return "restocked " + in.ID, nil
}, policy.MaxAttempts(2), policy.Constant(5*time.Millisecond), policy.Jitter(policy.NoJitter))

// Replenish restocks an order.
var Replenish = sdk.NewWorkflow("replenish", func(ctx context.Context, in order) (string, error) {
	return sdk.Execute(ctx, Restock, in)
})

// Requeue puts a failed run back in the queue once its cause is fixed: the
// same run ID and history, and a fresh budget for the step that failed. The
// failure row stays, marked requeued, and the audit log keeps the note.
func ExampleOperator_Requeue() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	w, err := runtime.NewWorker(pool, runtime.Config{Schema: schema, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	if err := w.Register(Replenish); err != nil {
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
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		panic(err)
	}

	run, _ := sdk.Start(ctx, client, Replenish, order{ID: "K-1"})
	_, err = run.Result(ctx)
	var re *sdk.RunError
	fmt.Println("failed:", errors.As(err, &re), re.Reason)

	fixDeployed.Store(true) // deploy the fix first, then requeue
	if err := op.Requeue(ctx, run.ID, "INC-7: SKU format fixed"); err != nil {
		panic(err)
	}
	fmt.Println(run.Result(ctx))

	history, _ := op.History(ctx, run.ID)
	for _, a := range history {
		fmt.Println(strings.TrimSpace(fmt.Sprint(a.Step, " ", a.Attempt, " ", a.Status, " ", a.ErrorMessage)))
	}
	rows, _ := op.Failures(ctx, operator.FailureFilter{RunID: run.ID, IncludeRequeued: true})
	for _, f := range rows {
		fmt.Printf("failure row: %s, requeued %d time(s)\n", f.Reason, f.RequeueCount)
	}
	err = op.Requeue(ctx, run.ID, "")
	fmt.Println("requeue a completed run:", errors.Is(err, operator.ErrNotFailed))
	// Output:
	// failed: true retries_exhausted
	// restocked K-1 <nil>
	// 1 1 failed warehouse API: unknown SKU format
	// 1 2 failed warehouse API: unknown SKU format
	// 1 3 succeeded
	// failure row: retries_exhausted, requeued 1 time(s)
	// requeue a completed run: true
}
