package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/internal/noleaks"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

func TestMain(m *testing.M) { os.Exit(noleaks.Main(m)) }

type OrderIn struct {
	ID     string
	Amount int
}

// flakyCalls makes Reserve fail its first call.
var flakyCalls int

var Reserve = activities.New("reserve",
	func(ctx context.Context, in OrderIn) (string, error) {
		if flakyCalls++; flakyCalls == 1 {
			return "", errors.New("inventory service: 503")
		}
		return "reserved " + in.ID, nil
	},
	policy.MaxAttempts(3),
	policy.Constant(10*time.Millisecond),
	policy.Jitter(policy.NoJitter),
)

var Fulfil = sdk.NewWorkflow("fulfil", func(ctx context.Context, in OrderIn) (string, error) {
	return sdk.Execute(ctx, Reserve, in)
})

// testWorker is a worker configuration that notices new runs fast.
func testWorker(schema string) runtime.Config {
	return runtime.Config{Schema: schema, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// A run is started with Start and its result awaited with Result; the
// history shows the retry.
func ExampleStart() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	w := runtime.NewWorker(pool, testWorker(schema))
	_ = w.Register(Fulfil)
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)

	client := sdk.NewClient(pool, sdk.WithSchema(schema))
	defer client.Close()
	run, err := sdk.Start(ctx, client, Fulfil, OrderIn{ID: "A-1", Amount: 100}, sdk.WithKey("order-A-1"))
	if err != nil {
		panic(err)
	}
	out, err := run.Result(ctx)
	fmt.Println(out, err)

	history, _ := client.History(ctx, run.ID)
	for _, a := range history {
		fmt.Println(strings.TrimSpace(fmt.Sprint(a.Step, " ", a.Attempt, " ", a.Status, " ", a.ErrorMessage)))
	}

	again, _ := sdk.Start(ctx, client, Fulfil, OrderIn{ID: "A-1", Amount: 100}, sdk.WithKey("order-A-1"))
	fmt.Println("same run:", again.ID == run.ID, "created:", again.Created)
	// Output:
	// reserved A-1 <nil>
	// 1 1 failed inventory service: 503
	// 1 2 succeeded
	// same run: true created: false
}

// StartTx records the run in the caller's transaction: it exists only if the
// transaction commits.
func ExampleStartTx() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	client := sdk.NewClient(pool, sdk.WithSchema(schema))
	defer client.Close()

	tx, _ := pool.Begin(ctx)
	run, _ := sdk.StartTx(ctx, client, tx, Fulfil, OrderIn{ID: "B-2"})
	_ = tx.Rollback(ctx) // the order was not saved after all

	_, err := sdk.Lookup(ctx, client, Fulfil, run.ID)
	fmt.Println("after rollback:", err != nil)

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		run, err = sdk.StartTx(ctx, client, tx, Fulfil, OrderIn{ID: "B-3"})
		return err
	})
	_, err = sdk.Lookup(ctx, client, Fulfil, run.ID)
	fmt.Println("after commit:", err == nil)
	// Output:
	// after rollback: true
	// after commit: true
}

// WithStatementTimeout bounds each statement a client sends. Here a Start
// waits for a key that another transaction holds until its deadline passes,
// try after try; since one of its inserts may yet be recorded, the error says
// the outcome is unknown. Starting again with the key is how to find out.
func ExampleWithStatementTimeout() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	client := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithStatementTimeout(250*time.Millisecond))
	defer client.Close()

	tx, _ := pool.Begin(ctx)
	_, _ = sdk.StartTx(ctx, client, tx, Fulfil, OrderIn{ID: "E-1"}, sdk.WithKey("order-E-1"))
	_, err := sdk.Start(ctx, client, Fulfil, OrderIn{ID: "E-1"}, sdk.WithKey("order-E-1"))
	fmt.Println("deadline:", errors.Is(err, context.DeadlineExceeded), "unknown:", errors.Is(err, sdk.ErrOutcomeUnknown))
	_ = tx.Commit(ctx)

	run, err := sdk.Start(ctx, client, Fulfil, OrderIn{ID: "E-1"}, sdk.WithKey("order-E-1"))
	fmt.Println("found:", err == nil, "created:", run.Created)
	// Output:
	// deadline: true unknown: true
	// found: true created: false
}

var Notify = activities.New("notify",
	func(ctx context.Context, in OrderIn) (string, error) {
		return "", errors.New("smtp: connection refused")
	},
	policy.MaxAttempts(5),
	policy.Constant(5*time.Millisecond),
)

var Announce = sdk.NewWorkflow("announce", func(ctx context.Context, in OrderIn) (string, error) {
	// A per-call option overrides the activity's default: two attempts here.
	return sdk.Execute(ctx, Notify, in, policy.MaxAttempts(2))
})

// A run that exhausts its budget ends in the failure table; Failures lists
// the rows and Requeue puts a run back with the same ID and a fresh budget.
func ExampleClient_Failures() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	w := runtime.NewWorker(pool, testWorker(schema))
	_ = w.Register(Announce)
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)

	client := sdk.NewClient(pool, sdk.WithSchema(schema))
	defer client.Close()
	run, _ := sdk.Start(ctx, client, Announce, OrderIn{ID: "C-4"})
	_, err := run.Result(ctx)
	var re *sdk.RunError
	if errors.As(err, &re) {
		fmt.Println(re.Reason, re.Activity, re.Message)
	}

	failures, _ := client.Failures(ctx, sdk.FailureFilter{Activity: "notify", Reason: sdk.ReasonRetriesExhausted})
	for _, f := range failures {
		fmt.Println(f.Workflow, f.Step, f.Attempts, f.Errors, f.Rescues)
	}

	_ = client.Requeue(ctx, run.ID)
	_, err = run.Result(ctx) // fails again: smtp is still down
	all, _ := client.Failures(ctx, sdk.FailureFilter{RunID: run.ID, IncludeRequeued: true})
	fmt.Println(len(all), "failure rows,", errors.As(err, &re))
	// Output:
	// retries_exhausted notify smtp: connection refused
	// announce 1 2 2 0
	// 2 failure rows, true
}
