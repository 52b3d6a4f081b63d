package sdk_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

type RefundReq struct {
	Order  string
	Amount int
}

// issued is closed once the first refund's call is in progress.
var issued = make(chan struct{})

// done lets the first refund's call return.
var done = make(chan struct{})

var IssueRefund = activities.New("issue-refund", func(ctx context.Context, in RefundReq) (string, error) {
	if in.Amount == 10 {
		close(issued)
		<-done
	}
	return fmt.Sprintf("refunded %d on %s", in.Amount, in.Order), nil
})

// OneRefund allows one refund per order in progress: a second one started
// meanwhile is cancelled before it runs.
var OneRefund = sdk.NewWorkflow("one-refund", func(ctx context.Context, in RefundReq) (string, error) {
	return sdk.Execute(ctx, IssueRefund, in)
}, sdk.WithConcurrency(sdk.Concurrency[RefundReq]{
	Key:    func(in RefundReq) string { return in.Order },
	Limit:  1,
	Policy: sdk.CancelNewest,
}))

// A workflow's concurrency key limits its runs in progress per key: here
// one refund per order, the newest cancelled (sdk.ConcurrencyQueue would
// make it wait instead; sdk.CancelInProgress would cancel the older).
func ExampleWithConcurrency() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	w, err := runtime.NewWorker(pool, testWorker(schema))
	if err != nil {
		panic(err)
	}
	_ = w.Register(OneRefund)
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	defer client.Close()

	first, _ := sdk.Start(ctx, client, OneRefund, RefundReq{Order: "A-7", Amount: 10})
	<-issued
	second, _ := sdk.Start(ctx, client, OneRefund, RefundReq{Order: "A-7", Amount: 25})
	_, err = second.Result(ctx)
	fmt.Println("second refund cancelled:", errors.Is(err, sdk.ErrCancelled))
	close(done)
	out, err := first.Result(ctx)
	fmt.Println(out, err)
	// Output:
	// second refund cancelled: true
	// refunded 10 on A-7 <nil>
}
