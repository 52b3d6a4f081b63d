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
	"github.com/tenurehq/tenure/operator"
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

	w, err := runtime.NewWorker(pool, testWorker(schema))
	if err != nil {
		panic(err)
	}
	_ = w.Register(Fulfil)
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)

	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	run, err := sdk.Start(ctx, client, Fulfil, OrderIn{ID: "A-1", Amount: 100}, sdk.WithKey("order-A-1"))
	if err != nil {
		panic(err)
	}
	out, err := run.Result(ctx)
	fmt.Println(out, err)

	op, _ := operator.New(pool, operator.WithSchema(schema)) // the run's history is an operator's read
	history, _ := op.History(ctx, run.ID)
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
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	defer client.Close()

	tx, _ := pool.Begin(ctx)
	run, _ := sdk.StartTx(ctx, client, tx, Fulfil, OrderIn{ID: "B-2"})
	_ = tx.Rollback(ctx) // the order was not saved after all

	_, err = sdk.Lookup(ctx, client, Fulfil, run.ID)
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
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithStatementTimeout(250*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer client.Close()

	tx, _ := pool.Begin(ctx)
	_, _ = sdk.StartTx(ctx, client, tx, Fulfil, OrderIn{ID: "E-1"}, sdk.WithKey("order-E-1"))
	_, err = sdk.Start(ctx, client, Fulfil, OrderIn{ID: "E-1"}, sdk.WithKey("order-E-1"))
	fmt.Println("deadline:", errors.Is(err, context.DeadlineExceeded), "unknown:", errors.Is(err, sdk.ErrOutcomeUnknown))
	_ = tx.Commit(ctx)

	run, err := sdk.Start(ctx, client, Fulfil, OrderIn{ID: "E-1"}, sdk.WithKey("order-E-1"))
	fmt.Println("found:", err == nil, "created:", run.Created)
	// Output:
	// deadline: true unknown: true
	// found: true created: false
}
