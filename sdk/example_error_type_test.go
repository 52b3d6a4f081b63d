package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// Declined is the payment provider refusing a card, with the provider's code.
type Declined struct{ Code string }

func (e *Declined) Error() string { return "card declined: " + e.Code }

var Pay = activities.New("pay", func(ctx context.Context, in OrderIn) (string, error) {
	return "", fmt.Errorf("pay %s: %w", in.ID, &Declined{Code: "insufficient_funds"})
}, policy.MaxAttempts(1))

// Apologize fails its first call and is retried after a delay longer than
// the worker sleeps in process: the run suspends, and the next execution
// replays the failed Pay step from its record.
var apologies int

var Apologize = activities.New("apologize", func(ctx context.Context, in OrderIn) (string, error) {
	if apologies++; apologies == 1 {
		return "", errors.New("smtp: try again")
	}
	return "apologized for " + in.ID, nil
}, policy.Constant(20*time.Millisecond), policy.Jitter(policy.NoJitter))

// branches records the branch each execution of Checkout took.
var branches struct {
	sync.Mutex
	taken []string
}

// Checkout registers *Declined, so that errors.As finds it when the failed Pay
// step is replayed as it did when Pay gave up.
var Checkout = sdk.NewWorkflow("checkout", func(ctx context.Context, in OrderIn) (string, error) {
	_, err := sdk.Execute(ctx, Pay, in)
	var declined *Declined
	if !errors.As(err, &declined) {
		return "", err
	}
	branches.Lock()
	branches.taken = append(branches.taken, "declined: "+declined.Code)
	branches.Unlock()
	return sdk.Execute(ctx, Apologize, in)
}, sdk.WithErrorType[*Declined]())

// WithErrorType makes an error of the user's own type the same value when a
// step that gave up is replayed: a workflow that branches on it takes the
// same branch in every execution.
func ExampleWithErrorType() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	cfg := testWorker(schema)
	cfg.MaxInProcessSleep = time.Millisecond // Apologize's retry suspends the run
	w, err := runtime.NewWorker(pool, cfg)
	if err != nil {
		panic(err)
	}
	_ = w.Register(Checkout)
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)

	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	run, _ := sdk.Start(ctx, client, Checkout, OrderIn{ID: "F-1"})
	out, err := run.Result(ctx)
	fmt.Println(out, err)
	branches.Lock()
	defer branches.Unlock()
	for i, b := range branches.taken {
		fmt.Printf("execution %d: %s\n", i+1, b)
	}
	// Output:
	// apologized for F-1 <nil>
	// execution 1: declined: insufficient_funds
	// execution 2: declined: insufficient_funds
}
