package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// approval reports what AwaitApproval does: that it started, and the cause
// its context was cancelled with.
var approval = struct {
	started chan struct{}
	cause   chan error
}{make(chan struct{}, 1), make(chan error, 1)}

// AwaitApproval waits until its context ends, as an activity blocked on a
// slow remote system would.
var AwaitApproval = activities.New("await-approval", func(ctx context.Context, in OrderIn) (string, error) {
	approval.started <- struct{}{}
	<-ctx.Done()
	approval.cause <- context.Cause(ctx)
	return "", ctx.Err()
})

// ReleaseHold gives back what the refund had reserved: the workflow's
// cleanup after a cancel.
var ReleaseHold = activities.New("release-hold", func(ctx context.Context, in OrderIn) (string, error) {
	return "released " + in.ID, nil
})

// Refund waits for an approval that does not come. When the run is
// cancelled, it cleans up with a step under sdk.Detached, which runs though
// the run is cancelled, and returns the cancellation.
var Refund = sdk.NewWorkflow("refund", func(ctx context.Context, in OrderIn) (string, error) {
	out, err := sdk.Execute(ctx, AwaitApproval, in)
	if errors.Is(err, sdk.ErrCancelled) {
		if _, cerr := sdk.Execute(sdk.Detached(ctx), ReleaseHold, in); cerr != nil {
			return "", cerr
		}
	}
	return out, err
})

// Cancel of a running run cancels the running activity's context at once,
// with sdk.ErrCancelled as its cause, and records the attempt cancelled. The
// workflow sees the cancellation as its step's error, may clean up under
// sdk.Detached, and the run ends cancelled when it returns.
func ExampleClient_Cancel() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	cfg := testWorker(schema)
	w, err := runtime.NewWorker(pool, cfg)
	if err != nil {
		panic(err)
	}
	if err := w.Register(Refund); err != nil {
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

	run, _ := sdk.Start(ctx, client, Refund, OrderIn{ID: "J-1"})
	<-approval.started
	fmt.Println("cancel:", client.Cancel(ctx, run.ID))
	_, err = run.Result(ctx)
	fmt.Println("result is ErrCancelled:", errors.Is(err, sdk.ErrCancelled))
	fmt.Println("the activity saw:", <-approval.cause)

	op, _ := operator.New(pool, operator.WithSchema(schema)) // the history is an operator's read
	history, _ := op.History(ctx, run.ID)
	for _, a := range history {
		fmt.Println(strings.TrimSpace(fmt.Sprint(a.Step, " ", a.Attempt, " ", a.Status, " ", a.ErrorMessage)))
	}
	err = client.Cancel(ctx, run.ID)
	fmt.Println("again:", errors.Is(err, sdk.ErrFinished))
	// Output:
	// cancel: <nil>
	// result is ErrCancelled: true
	// the activity saw: run cancelled
	// 1 1 cancelled run cancelled during the attempt; the activity returned: context canceled
	// 2 1 succeeded
	// again: true
}
