// Command poisonpill shows a poison pill quarantined by the rescue budget:
// an input that crashes any worker that runs it (here the decoder kills its
// process with SIGKILL, as a segfault in a C library or the OOM killer
// would). Each crash leaves an attempt whose outcome is unknown ("lost");
// the step's MaxRescues bounds how many such attempts it gets, so the run
// lands in the failure table with reason rescues_exhausted instead of
// killing the fleet one worker at a time. Healthy work goes on meanwhile.
//
//	go run ./examples/workflows/poisonpill
//
// The program runs itself as the worker processes it needs: it starts one,
// and whenever the poison kills it, starts the next. It uses DATABASE_URL
// when set, in the schema tenure_poisonpill (recreated on every run), and
// otherwise a private throwaway PostgreSQL cluster.
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
	"syscall"
	"time"

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

const defaultSchema = "tenure_poisonpill"

// The program re-executes itself as a worker; these variables say where.
const (
	envWorkerURL    = "TENURE_POISONPILL_WORKER_URL"
	envWorkerSchema = "TENURE_POISONPILL_WORKER_SCHEMA"
	envWorkerLabel  = "TENURE_POISONPILL_WORKER_LABEL"
)

// Image is the workflow's input.
type Image struct{ Name string }

// Decode stands for a native image decoder that takes its process down on
// one malformed file. MaxRescues(2): a step may lose two attempts to crashes
// and be rescued; the third crash quarantines it.
var Decode = activities.New("decode-image",
	func(ctx context.Context, img Image) (string, error) {
		if img.Name == "poison.png" {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL) // the decoder "segfaults"
			select {}                                      // never reached
		}
		return "thumbnail of " + img.Name, nil
	},
	policy.MaxRescues(2),
)

// Thumbnail is the workflow: decode an image into a thumbnail.
var Thumbnail = sdk.NewWorkflow("make-thumbnail", func(ctx context.Context, img Image) (string, error) {
	return sdk.Execute(ctx, Decode, img)
})

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if url := os.Getenv(envWorkerURL); url != "" {
		err = runWorker(ctx, url, os.Getenv(envWorkerSchema), os.Getenv(envWorkerLabel))
	} else {
		err = mainErr(ctx, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "poisonpill:", err)
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
	self, err := os.Executable()
	if err != nil {
		return err
	}
	_, err = run(ctx, out, db.URL, defaultSchema, self)
	return err
}

// runWorker is one worker process: it runs until SIGTERM (graceful) or
// until the poison kills it.
func runWorker(ctx context.Context, url, schema, label string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	w, err := runtime.NewWorker(pool, runtime.Config{
		Schema:            schema,
		Label:             label,
		LeaseTTL:          time.Second, // a dead worker's runs are rescued after a second
		HeartbeatInterval: 250 * time.Millisecond,
		PollInterval:      50 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	if err := w.Register(Thumbnail); err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		drain, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Shutdown(drain)
	}()
	return w.Run(context.WithoutCancel(ctx))
}

// outcome is what the example did, for its test.
type outcome struct {
	healthy, poison string // run IDs
	workers         int    // worker processes started
	killed          int    // of which the poison killed
	failure         *sdk.RunError
	history         []record.Attempt
}

// run starts worker processes (the program at self) until the poison run is
// quarantined, in schema (recreated), and prints what happened.
func run(ctx context.Context, out io.Writer, url, schema, self string) (*outcome, error) {
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
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithPollInterval(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer client.Close()
	op, err := operator.New(pool, operator.WithSchema(schema)) // reads the attempts table
	if err != nil {
		return nil, err
	}
	o := &outcome{}

	var current *exec.Cmd
	var exited chan error
	start := func() error {
		o.workers++
		label := fmt.Sprintf("worker-%d", o.workers)
		cmd := exec.CommandContext(ctx, self)
		cmd.Env = append(os.Environ(), envWorkerURL+"="+url, envWorkerSchema+"="+schema, envWorkerLabel+"="+label)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		fmt.Fprintf(out, "started %s (pid %d)\n", label, cmd.Process.Pid)
		current, exited = cmd, make(chan error, 1)
		go func(ch chan error) { ch <- cmd.Wait() }(exited)
		return nil
	}
	defer func() {
		if current != nil && current.ProcessState == nil {
			_ = current.Process.Signal(syscall.SIGTERM)
			<-exited
		}
	}()
	if err := start(); err != nil {
		return nil, err
	}
	// The runs are started once a worker that serves them is live.
	if err := waitLive(ctx, op, "worker-1", exited); err != nil {
		return nil, err
	}

	healthy, err := sdk.Start(ctx, client, Thumbnail, Image{Name: "cat.png"})
	if err != nil {
		return nil, err
	}
	o.healthy = healthy.ID.String()
	thumb, err := healthy.Result(ctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "cat.png: %q\n", thumb)

	poison, err := sdk.Start(ctx, client, Thumbnail, Image{Name: "poison.png"})
	if err != nil {
		return nil, err
	}
	o.poison = poison.ID.String()
	fmt.Fprintln(out, "poison.png: started; every worker that runs it dies")
	result := make(chan error, 1)
	go func() { _, err := poison.Result(ctx); result <- err }()
	for {
		select {
		case err := <-exited:
			o.killed++
			fmt.Fprintf(out, "  worker-%d died (%v) in the middle of an attempt: its lease will expire\n", o.workers, err)
			if o.workers >= 10 {
				return nil, errors.New("10 workers died and the run is still not quarantined")
			}
			if err := start(); err != nil {
				return nil, err
			}
			continue
		case err := <-result:
			if !errors.As(err, &o.failure) {
				return nil, fmt.Errorf("poison run: want a failure, got %v", err)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		break
	}
	fmt.Fprintf(out, "poison.png quarantined by worker-%d: %s at step %d (%s): %s\n",
		o.workers, o.failure.Reason, o.failure.Step, o.failure.Activity, o.failure.Message)

	if o.history, err = op.History(ctx, poison.ID); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "  %-7s %-10s %-7s %-9s %s\n", "attempt", "status", "rescue", "worker", "error")
	for _, a := range o.history {
		fmt.Fprintf(out, "  %-7d %-10s %-7v %-9s %s\n", a.Attempt, a.Status, a.Rescue, a.Worker, a.ErrorMessage)
	}

	fmt.Fprintf(out, "\n== Look at it yourself (schema %s) ==\n", schema)
	fmt.Fprintf(out, `psql "$DATABASE_URL" -c "SELECT run_id, reason, activity, attempts, rescues, error_message FROM %[1]s.open_failures"
psql "$DATABASE_URL" -c "SELECT attempt, status, is_rescue, worker, duration FROM %[1]s.attempt_timeline WHERE run_id = '%[2]s'"
go -C cmd/tenure run . --schema %[1]s failures list --reason rescues_exhausted
# once the decoder is fixed (requeueing gives the step a fresh budget):
go -C cmd/tenure run . --schema %[1]s failures requeue %[2]s --note "decoder fixed"
`, schema, poison.ID)
	return o, nil
}

// waitLive waits until the registry lists a live worker labelled label; it
// fails if the worker's process exits first.
func waitLive(ctx context.Context, op *operator.Operator, label string, exited chan error) error {
	deadline := time.After(30 * time.Second)
	for {
		ws, err := op.Workers(ctx, false)
		if err != nil {
			return err
		}
		for _, w := range ws {
			if w.Label == label {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("%s exited before it was live: %v", label, err)
		case <-deadline:
			return fmt.Errorf("%s is not live after 30s", label)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
