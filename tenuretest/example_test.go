package tenuretest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/tenuretest"
)

// exampleT stands in for the *testing.T of a test, which an Example does not
// have: Fatalf panics, and finish runs the cleanups as the end of a test
// does.
type exampleT struct{ cleanups []func() }

func (*exampleT) Helper()                           {}
func (t *exampleT) Cleanup(f func())                { t.cleanups = append(t.cleanups, f) }
func (*exampleT) Logf(format string, args ...any)   {}
func (*exampleT) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (*exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) finish() {
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
}

// New gives a test a Tenure of its own: a migrated schema, a pool, a client
// and a running worker for the workflows it names, with the payment
// provider replaced. Tables the test creates without a schema are its own.
func ExampleNew() {
	t := &exampleT{} // in a test: its *testing.T
	defer t.finish()

	env := tenuretest.New(t,
		tenuretest.Workflows(PlaceOrder),
		tenuretest.Override(Charge, func(ctx context.Context, o Order) (Receipt, error) {
			return Receipt{Order: o.ID, Payment: "pay-" + o.ID}, nil
		}))
	if _, err := env.Pool.Exec(context.Background(), ordersTable); err != nil {
		t.Fatalf("%v", err)
	}

	run := tenuretest.Start(env, PlaceOrder, Order{ID: "42", Cents: 1999})
	fmt.Println(tenuretest.Result(env, run))
	for _, line := range env.Timeline(run.ID) {
		fmt.Println(line)
	}
	// Output:
	// parcel-42 <nil>
	// 1.1 charge succeeded
	// 2.1 record-order succeeded
	// 3.1 ship succeeded
}

// Override replaces an activity's function for one test: the workflow still
// calls Ship, and Ship's policy (MaxAttempts(3)) retries the fake's errors.
func ExampleOverride() {
	t := &exampleT{}
	defer t.finish()

	calls := 0
	env := tenuretest.New(t,
		tenuretest.Workflows(PlaceOrder),
		tenuretest.Override(Charge, fakeCharge),
		tenuretest.Override(Ship, func(ctx context.Context, order string) (string, error) {
			if calls++; calls < 3 {
				return "", errors.New("carrier: 503")
			}
			return "fake-parcel", nil
		}))
	_, _ = env.Pool.Exec(context.Background(), ordersTable)

	run := tenuretest.Start(env, PlaceOrder, Order{ID: "7"})
	fmt.Println(tenuretest.Result(env, run))
	fmt.Println(env.Timeline(run.ID)[2:])
	// Output:
	// fake-parcel <nil>
	// [3.1 ship failed 3.2 ship failed 3.3 ship succeeded]
}

// OverrideTx replaces a transactional activity's function: the fake gets the
// step's transaction, so its writes commit with the step's checkpoint.
func ExampleOverrideTx() {
	t := &exampleT{}
	defer t.finish()

	env := tenuretest.New(t,
		tenuretest.Workflows(PlaceOrder),
		tenuretest.Override(Charge, fakeCharge),
		tenuretest.OverrideTx(RecordOrder, func(ctx context.Context, tx pgx.Tx, r Receipt) (string, error) {
			_, err := tx.Exec(ctx, `INSERT INTO orders (id, payment) VALUES ($1, 'written by the fake')`, r.Order)
			return r.Order, err
		}))
	_, _ = env.Pool.Exec(context.Background(), ordersTable)

	run := tenuretest.Start(env, PlaceOrder, Order{ID: "8"})
	_, err := tenuretest.Result(env, run)
	var payment string
	_ = env.Pool.QueryRow(context.Background(), `SELECT payment FROM orders WHERE id = '8'`).Scan(&payment)
	fmt.Println(err, payment)
	// Output:
	// <nil> written by the fake
}

// Crash ends the run's lease in the middle of an attempt, as a crash of its
// worker would: the attempt is recorded lost and the step rescued.
func ExampleEnv_Crash() {
	t := &exampleT{}
	defer t.finish()

	shipping := make(chan struct{})
	var calls atomic.Int32 // the crashed attempt and the rescue run in two goroutines
	env := tenuretest.New(t,
		tenuretest.Workflows(PlaceOrder),
		tenuretest.Override(Charge, fakeCharge),
		tenuretest.Override(Ship, func(ctx context.Context, order string) (string, error) {
			if calls.Add(1) == 1 {
				close(shipping)
				<-ctx.Done() // the crashed attempt hangs until its worker learns of the crash
				return "", ctx.Err()
			}
			return "parcel-" + order, nil
		}))
	_, _ = env.Pool.Exec(context.Background(), ordersTable)

	run := tenuretest.Start(env, PlaceOrder, Order{ID: "9"})
	<-shipping
	env.Crash(run.ID)
	fmt.Println(tenuretest.Result(env, run))
	fmt.Println(env.Timeline(run.ID)[2:])
	// Output:
	// parcel-9 <nil>
	// [3.1 ship lost 3.2 ship succeeded rescue]
}

// A crash in an at-most-once activity (Charge) makes the step
// indeterminate: the card may have been charged, so Tenure does not call
// the provider again, and RequireFailed returns the failure row.
func ExampleEnv_RequireFailed() {
	t := &exampleT{}
	defer t.finish()

	charging := make(chan struct{})
	env := tenuretest.New(t,
		tenuretest.Workflows(PlaceOrder),
		tenuretest.Override(Charge, func(ctx context.Context, o Order) (Receipt, error) {
			close(charging)
			<-ctx.Done()
			return Receipt{}, ctx.Err()
		}))

	run := tenuretest.Start(env, PlaceOrder, Order{ID: "10"})
	<-charging
	env.Crash(run.ID)
	f := env.RequireFailed(run.ID, sdk.ReasonIndeterminate)
	fmt.Println(f.Reason, f.Step, f.Activity, f.Rescues)
	_, err := tenuretest.Result(env, run)
	fmt.Println(errors.Is(err, sdk.ErrIndeterminate))
	// Output:
	// indeterminate 1 charge 0
	// true
}

// History returns the attempts as rows, with what the worker recorded: the
// error, the delay chosen before the next attempt and its source.
func ExampleEnv_History() {
	t := &exampleT{}
	defer t.finish()

	env := tenuretest.New(t, tenuretest.Workflows(PlaceOrder)) // the real Charge always fails
	run := tenuretest.Start(env, PlaceOrder, Order{ID: "11"})
	env.RequireFailed(run.ID, sdk.ReasonRetriesExhausted)
	for _, a := range env.History(run.ID) {
		fmt.Println(a.Step, a.Attempt, a.Activity, a.Status, a.ErrorMessage, a.Delay, a.DelaySource)
	}
	// Output:
	// 1 1 charge failed payment provider unreachable from tests 10ms policy
	// 1 2 charge failed payment provider unreachable from tests 10ms policy
	// 1 3 charge failed payment provider unreachable from tests <nil>
}

// Result waits for the run's end (failing the test after Timeout) and
// returns what sdk.Run.Result returns: here the *sdk.RunError of a run whose
// charge was declined for good.
func ExampleResult() {
	t := &exampleT{}
	defer t.finish()

	env := tenuretest.New(t,
		tenuretest.Workflows(PlaceOrder),
		tenuretest.Override(Charge, func(ctx context.Context, o Order) (Receipt, error) {
			return Receipt{}, policy.Permanent(errors.New("card declined"))
		}))

	_, err := tenuretest.Result(env, tenuretest.Start(env, PlaceOrder, Order{ID: "12"}))
	var re *sdk.RunError
	if errors.As(err, &re) {
		fmt.Println(re.Reason, re.Activity, re.Message)
	}
	// Output:
	// non_retryable charge card declined
}

// Configure changes the worker's configuration: here its label, recorded on
// every attempt, and its concurrency.
func ExampleConfigure() {
	t := &exampleT{}
	defer t.finish()

	env := tenuretest.New(t,
		tenuretest.Workflows(PlaceOrder),
		tenuretest.Override(Charge, fakeCharge),
		tenuretest.Configure(func(c *runtime.Config) {
			c.Label = "worker-a"
			c.Concurrency = 1
		}))
	_, _ = env.Pool.Exec(context.Background(), ordersTable)

	run := tenuretest.Start(env, PlaceOrder, Order{ID: "13"})
	_, _ = tenuretest.Result(env, run)
	fmt.Println(env.History(run.ID)[0].Worker)
	// Output:
	// worker-a
}

// A history, as tenure runs export writes it, replayed against a version of
// the workflow that swapped its two steps: the replay names the first step
// where the code now does something else, without invoking any activity.
func ExampleReplayHistory() {
	reserve := activities.New("reserve", func(ctx context.Context, sku string) (string, error) { return "r-" + sku, nil })
	charge := activities.New("charge", func(ctx context.Context, sku string) (string, error) { return "c-" + sku, nil })
	swapped := sdk.NewWorkflow("order", func(ctx context.Context, sku string) (string, error) {
		if _, err := sdk.Execute(ctx, charge, sku); err != nil { // was second
			return "", err
		}
		return sdk.Execute(ctx, reserve, sku)
	})
	line := `{"format":"tenure.history/1","run_id":"0192c3e4-7b1a-7c52-9a3e-5d1f2b3c4d5e","workflow":"order","status":"running",
		"input":"sku-1","steps":[{"step":1,"kind":"activity","name":"reserve","status":"completed","output":"r-sku-1"}]}`
	var h record.History
	if err := json.Unmarshal([]byte(line), &h); err != nil {
		panic(err)
	}
	fmt.Println(tenuretest.ReplayHistory(swapped, h))
	// Output:
	// run 0192c3e4-7b1a-7c52-9a3e-5d1f2b3c4d5e diverges at step 1: recorded activity "reserve", now activity "charge"
}
