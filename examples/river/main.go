// Command river hands work from a Tenure workflow to River exactly once, and
// back: a transactional activity inserts a River job in the transaction that
// checkpoints its step, so the job exists if and only if the step completed;
// and a River worker starts a Tenure run with sdk.StartTx in the transaction
// that completes its job, so the run exists if and only if the job is done.
//
// It lives in a module of its own so that Tenure itself does not require
// River. From this folder:
//
//	go run .
//
// It uses DATABASE_URL when set, in the schema tenure_river (recreated on
// every run; River's tables live there too), and otherwise a private
// throwaway PostgreSQL cluster. See docs/design/river.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/devdb"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

const defaultSchema = "tenure_river"

// ShipArgs is the River job a fulfilled order hands off.
type ShipArgs struct {
	OrderID string `json:"order_id"`
}

// Kind names the job kind for River.
func (ShipArgs) Kind() string { return "ship_order" }

// Order is the input of both Tenure workflows.
type Order struct{ ID string }

// handoff holds the two sides: Tenure's client and workflows, River's client.
type handoff struct {
	pool     *pgxpool.Pool
	tenure   *sdk.Client
	river    *river.Client[pgx.Tx]
	fulfil   *sdk.Workflow[Order, int64]
	notify   *sdk.Workflow[Order, string]
	attempts atomic.Int32 // attempts of the enqueue step
	shipped  chan string
}

// newFulfil declares the workflow whose last step hands the order to River.
func (h *handoff) newFulfil() *sdk.Workflow[Order, int64] {
	enqueue := activities.NewTx("enqueue-shipment",
		func(ctx context.Context, tx pgx.Tx, o Order) (int64, error) {
			res, err := h.river.InsertTx(ctx, tx, ShipArgs{OrderID: o.ID}, nil)
			if err != nil {
				return 0, err
			}
			if h.attempts.Add(1) == 1 {
				// Fail after the insert: the step's transaction rolls back
				// and takes the River job with it. The retry inserts it
				// again, so exactly one job comes out of the two attempts.
				return 0, errors.New("simulated failure after the job was inserted")
			}
			return res.Job.ID, nil
		},
		policy.MaxAttempts(3), policy.Constant(50*time.Millisecond), policy.Jitter(policy.NoJitter),
	)
	return sdk.NewWorkflow("fulfil-order", func(ctx context.Context, o Order) (int64, error) {
		return sdk.Execute(ctx, enqueue, o)
	})
}

// newNotify declares the workflow the River worker starts when it is done.
func newNotify() *sdk.Workflow[Order, string] {
	email := activities.New("email-tracking-number", func(ctx context.Context, o Order) (string, error) {
		return "tracking number sent for " + o.ID, nil
	})
	return sdk.NewWorkflow("notify-shipped", func(ctx context.Context, o Order) (string, error) {
		return sdk.Execute(ctx, email, o)
	})
}

// ShipWorker works ship_order jobs. It completes its job and starts the
// Tenure run that follows it in one transaction.
type ShipWorker struct {
	river.WorkerDefaults[ShipArgs]
	h *handoff
}

// Work ships the order, then starts notify-shipped and completes the job
// together: if the transaction fails, neither happened and River retries.
func (w *ShipWorker) Work(ctx context.Context, job *river.Job[ShipArgs]) error {
	return pgx.BeginFunc(ctx, w.h.pool, func(tx pgx.Tx) error {
		o := Order{ID: job.Args.OrderID}
		// The key makes a retried job find the run it already started.
		if _, err := sdk.StartTx(ctx, w.h.tenure, tx, w.h.notify, o, sdk.WithKey(fmt.Sprintf("ship-job-%d", job.ID))); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return err
		}
		w.h.shipped <- o.ID
		return nil
	})
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := mainErr(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "river:", err)
		os.Exit(1)
	}
}

func mainErr(ctx context.Context, out io.Writer) error {
	db, err := devdb.Open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	fmt.Fprintf(out, "schema %s in %s\n", defaultSchema, db)
	_, err = run(ctx, out, db.URL, defaultSchema)
	return err
}

// outcome is what the example did, for its test.
type outcome struct {
	jobID        int64
	jobs         int   // ship_order jobs in River's table
	attempts     int32 // attempts of the enqueue step
	notification string
}

// run fulfils one order through Tenure, River and Tenure again, in schema
// (recreated), and prints what happened.
func run(ctx context.Context, out io.Writer, url, schema string) (*outcome, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx, pool, store.WithSchema(schema)); err != nil {
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: quiet})
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, err
	}

	tenure, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithPollInterval(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer tenure.Close()
	h := &handoff{pool: pool, shipped: make(chan string, 1), tenure: tenure}
	h.fulfil, h.notify = h.newFulfil(), newNotify()
	workers := river.NewWorkers()
	river.AddWorker(workers, &ShipWorker{h: h})
	h.river, err = river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:            schema,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		Workers:           workers,
		Logger:            quiet,
		FetchPollInterval: 100 * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}

	w, err := runtime.NewWorker(pool, runtime.Config{Schema: schema, PollInterval: 50 * time.Millisecond, Logger: quiet})
	if err != nil {
		return nil, err
	}
	if err := w.Register(h.fulfil, h.notify); err != nil {
		return nil, err
	}
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	defer func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Shutdown(shutdown)
	}()

	o := &outcome{}
	run, err := sdk.Start(ctx, h.tenure, h.fulfil, Order{ID: "A-7"})
	if err != nil {
		return nil, err
	}
	if o.jobID, err = run.Result(ctx); err != nil {
		return nil, err
	}
	o.attempts = h.attempts.Load()
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "river_job"}.Sanitize()+` WHERE kind = 'ship_order'`).Scan(&o.jobs); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "fulfil-order: enqueue-shipment took %d attempts; River has %d ship_order job(s) (ID %d)\n", o.attempts, o.jobs, o.jobID)

	if err := h.river.Start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.river.Stop(stopCtx)
	}()
	select {
	case id := <-h.shipped:
		fmt.Fprintf(out, "River worked the job for order %s and started notify-shipped in the same transaction\n", id)
	case <-time.After(30 * time.Second):
		return nil, errors.New("the River worker did not work the job in 30s")
	}
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		return nil, err
	}
	runs, err := op.Failures(ctx, operator.FailureFilter{}) // none expected
	if err != nil || len(runs) > 0 {
		return nil, fmt.Errorf("unexpected failures %v: %v", runs, err)
	}
	notifyRun, err := sdk.Start(ctx, h.tenure, h.notify, Order{ID: "A-7"}, sdk.WithKey(fmt.Sprintf("ship-job-%d", o.jobID)))
	if err != nil {
		return nil, err
	}
	if notifyRun.Created {
		return nil, errors.New("the River worker's run was not found by its key")
	}
	if o.notification, err = notifyRun.Result(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "notify-shipped: %q\n", o.notification)
	fmt.Fprintf(out, "\npsql \"$DATABASE_URL\" -c \"SELECT id, kind, state, args FROM %[1]s.river_job\"\n", schema)
	fmt.Fprintf(out, "psql \"$DATABASE_URL\" -c \"SELECT run_id, step, attempt, activity, status, error_message FROM %[1]s.attempt_timeline\"\n", schema)
	return o, nil
}
