// Command demo shows Tenure's failure handling end to end, in one minute:
// a retry with its delays, a crash recovered by a rescue, and a failure row
// you can query in SQL.
//
//	go run ./examples/workflows/demo
//
// It uses DATABASE_URL when set (and leaves the schema tenure_demo behind for
// you to query), otherwise a private throwaway PostgreSQL cluster started from
// the binaries on PATH (package devdb).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/devdb"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// defaultSchema keeps the demo's tables apart from a real Tenure schema.
const defaultSchema = "tenure_demo"

// The demo runs itself as the worker process it kills; these variables tell
// that process where to work.
const (
	envWorkerURL    = "TENURE_DEMO_WORKER_URL"
	envWorkerSchema = "TENURE_DEMO_WORKER_SCHEMA"
)

// Order is the input of every demo workflow.
type Order struct {
	ID     string
	Amount int
}

// Receipt is what a charge returns.
type Receipt struct {
	OrderID string
	Charged int
}

// paymentCalls counts calls of the fake payment API.
var paymentCalls atomic.Int32

// Charge calls a payment API that answers 503 twice before it takes the charge.
var Charge = activities.New("charge",
	func(ctx context.Context, o Order) (Receipt, error) {
		if paymentCalls.Add(1) <= 2 {
			return Receipt{}, errors.New("payment API: 503 service unavailable")
		}
		return Receipt{OrderID: o.ID, Charged: o.Amount}, nil
	},
	policy.MaxAttempts(5),
	policy.Exponential(200*time.Millisecond, 2, 5*time.Second),
	policy.Jitter(policy.EqualJitter),
)

// Export takes a while: long enough for the demo to kill the worker running it.
var Export = activities.New("export",
	func(ctx context.Context, o Order) (string, error) {
		select {
		case <-time.After(1500 * time.Millisecond):
			return "exported " + o.ID, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	},
	policy.MaxRescues(2),
)

// Ship always fails: the carrier rejects the address.
var Ship = activities.New("ship",
	func(ctx context.Context, o Order) (string, error) {
		return "", fmt.Errorf("carrier: address of order %s not deliverable", o.ID)
	},
	policy.MaxAttempts(3),
	policy.Constant(100*time.Millisecond),
	policy.Jitter(policy.NoJitter),
)

// PlaceOrder charges for an order.
var PlaceOrder = sdk.NewWorkflow("place-order", func(ctx context.Context, o Order) (Receipt, error) {
	return sdk.Execute(ctx, Charge, o)
})

// ExportOrder exports an order to a slow downstream system.
var ExportOrder = sdk.NewWorkflow("export-order", func(ctx context.Context, o Order) (string, error) {
	return sdk.Execute(ctx, Export, o)
})

// ShipOrder books a carrier that never accepts the address.
var ShipOrder = sdk.NewWorkflow("ship-order", func(ctx context.Context, o Order) (string, error) {
	return sdk.Execute(ctx, Ship, o)
})

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if url := os.Getenv(envWorkerURL); url != "" {
		err = runWorker(ctx, url, os.Getenv(envWorkerSchema))
	} else {
		err = run(ctx, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func newWorker(pool *pgxpool.Pool, schema, label string) (*runtime.Worker, error) {
	w, err := runtime.NewWorker(pool, runtime.Config{
		Schema:            schema,
		Label:             label,
		LeaseTTL:          time.Second, // short, so the crash is noticed within a second
		HeartbeatInterval: 250 * time.Millisecond,
		PollInterval:      50 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, err
	}
	if err := w.Register(PlaceOrder, ExportOrder, ShipOrder); err != nil {
		return nil, err
	}
	return w, nil
}

// runWorker is the worker process the demo kills.
func runWorker(ctx context.Context, url, schema string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	w, err := newWorker(pool, schema, "doomed-worker")
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// run finds a database and runs the demo in the schema tenure_demo.
func run(ctx context.Context, out io.Writer) error {
	db, err := devdb.Open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	fmt.Fprintf(out, "schema %s in %s\n", defaultSchema, db)
	if err := demo(ctx, out, db.URL, defaultSchema); err != nil {
		return err
	}
	fmt.Fprintln(out, "\n== Look at it yourself ==")
	if db.Private {
		fmt.Fprintln(out, "(this run used a private cluster, removed on exit; set DATABASE_URL to keep the data)")
	}
	fmt.Fprintf(out, `psql "$DATABASE_URL" -c "SELECT run_id, step, attempt, activity, status, is_rescue, delay_ms, delay_source, error_message FROM %[1]s.attempts ORDER BY started_at"
psql "$DATABASE_URL" -c "SELECT run_id, workflow, reason, activity, attempts, errors, rescues, error_message, failed_at FROM %[1]s.failures WHERE requeued_at IS NULL"
`, defaultSchema)
	return nil
}

// demo runs the three scenarios in schema, which it recreates.
func demo(ctx context.Context, out io.Writer, url, schema string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return err
	}
	if err := store.Migrate(ctx, pool, store.WithSchema(schema)); err != nil {
		return err
	}
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithPollInterval(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer client.Close()
	op, err := operator.New(pool, operator.WithSchema(schema)) // reads the attempts and failures
	if err != nil {
		return err
	}

	// 1. A crash: a worker process picks up an export and is SIGKILLed mid-attempt.
	fmt.Fprintln(out, "\n== 1. Crash recovery (rescue) ==")
	export, err := crashWorkerDuringAttempt(ctx, client, op, url, schema)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "a worker process started the export and was killed with SIGKILL mid-attempt")

	// From here on, a worker in this process does the work.
	w, err := newWorker(pool, schema, "demo-worker")
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Shutdown(shutdown)
	}()

	exported, err := export.Result(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "the lease expired, this process's worker rescued the run: %q\n", exported)
	if err := printHistory(ctx, out, op, export.ID); err != nil {
		return err
	}

	// 2. Retries: the payment API fails twice, then succeeds.
	fmt.Fprintln(out, "\n== 2. Retries with backoff ==")
	charge, err := sdk.Start(ctx, client, PlaceOrder, Order{ID: "A-18", Amount: 1999})
	if err != nil {
		return err
	}
	receipt, err := charge.Result(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "charged %d for order %s after %d calls\n", receipt.Charged, receipt.OrderID, paymentCalls.Load())
	if err := printHistory(ctx, out, op, charge.ID); err != nil {
		return err
	}

	// 3. A failure row: the carrier never accepts the address.
	fmt.Fprintln(out, "\n== 3. Retries exhausted: a failure row ==")
	ship, err := sdk.Start(ctx, client, ShipOrder, Order{ID: "A-19", Amount: 500})
	if err != nil {
		return err
	}
	_, err = ship.Result(ctx)
	var re *sdk.RunError
	if !errors.As(err, &re) {
		return fmt.Errorf("ship: want a failure, got %v", err)
	}
	fmt.Fprintf(out, "run failed: %s at step %d (%s): %s\n", re.Reason, re.Step, re.Activity, re.Message)
	if err := printHistory(ctx, out, op, ship.ID); err != nil {
		return err
	}
	return printFailures(ctx, out, op, schema)
}

// crashWorkerDuringAttempt starts this program as a worker process and,
// once the worker is live (so that the run is started for a worker that
// serves it), starts an export, waits until its attempt is running, and
// kills the worker with SIGKILL. It returns the export's run.
func crashWorkerDuringAttempt(ctx context.Context, client *sdk.Client, op *operator.Operator, url, schema string) (*sdk.Run[string], error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), envWorkerURL+"="+url, envWorkerSchema+"="+schema)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	fail := func(err error) (*sdk.Run[string], error) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	if err := waitUntil(ctx, deadline, "the worker process never became live", func() (bool, error) {
		return workerLive(ctx, op, "doomed-worker")
	}); err != nil {
		return fail(err)
	}
	export, err := sdk.Start(ctx, client, ExportOrder, Order{ID: "A-17", Amount: 4200})
	if err != nil {
		return fail(err)
	}
	if err := waitUntil(ctx, deadline, "the worker process never started the attempt", func() (bool, error) {
		h, err := op.History(ctx, export.ID)
		return len(h) > 0 && h[0].Status == record.AttemptRunning, err
	}); err != nil {
		return fail(err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return nil, err
	}
	_ = cmd.Wait()
	return export, nil
}

// workerLive reports whether the registry lists a live worker labelled label.
func workerLive(ctx context.Context, op *operator.Operator, label string) (bool, error) {
	ws, err := op.Workers(ctx, false)
	if err != nil {
		return false, err
	}
	for _, w := range ws {
		if w.Label == label {
			return true, nil
		}
	}
	return false, nil
}

// waitUntil polls cond until it holds, fails, or deadline passes.
func waitUntil(ctx context.Context, deadline time.Time, timeout string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New(timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func printHistory(ctx context.Context, out io.Writer, op *operator.Operator, id uuid.UUID) error {
	h, err := op.History(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  %-4s %-7s %-8s %-10s %-6s %-22s %s\n", "step", "attempt", "activity", "status", "rescue", "delay before next", "error")
	for _, a := range h {
		delay := "-"
		if a.Delay != nil {
			delay = fmt.Sprintf("%s (%s)", a.Delay.Round(time.Millisecond), a.DelaySource)
		}
		fmt.Fprintf(out, "  %-4d %-7d %-8s %-10s %-6v %-22s %s\n", a.Step, a.Attempt, a.Activity, a.Status, a.Rescue, delay, a.ErrorMessage)
	}
	return nil
}

func printFailures(ctx context.Context, out io.Writer, op *operator.Operator, schema string) error {
	fmt.Fprintf(out, "\n  the failure table (SELECT * FROM %s.failures WHERE requeued_at IS NULL):\n", schema)
	fs, err := op.Failures(ctx, operator.FailureFilter{})
	if err != nil {
		return err
	}
	for _, f := range fs {
		fmt.Fprintf(out, "  workflow=%s reason=%s activity=%s attempts=%d errors=%d rescues=%d error=%q\n",
			f.Workflow, f.Reason, f.Activity, f.Attempts, f.Errors, f.Rescues, f.ErrorMessage)
	}
	return nil
}
