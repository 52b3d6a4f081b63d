package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/tenuretest"
)

func TestMain(m *testing.M) {
	if os.Getenv(exampledb.ProgramEnv) != "" { // exampledb.RunProgram runs the program
		main()
		os.Exit(0)
	}
	os.Exit(tenuretest.Main(m))
}

// The program as go run runs it without DATABASE_URL: on a private cluster
// of its own, saying so on its first line, with nothing on stderr (no
// warning that no worker serves a run it starts).
func TestRiverHandoff_RunsQuietlyAsGoRunRunsIt(t *testing.T) {
	t.Parallel()
	out := exampledb.RunProgram(t, 3*time.Minute)
	for _, want := range []string{
		"notify-shipped: \"tracking number sent for A-7\"",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the program's output lacks %q:\n%s", want, out)
		}
	}
}

// The program as go run runs it, in a schema of the kit's.
func TestRiverHandoff_ExactlyOnceBothWays(t *testing.T) {
	t.Parallel()
	env := tenuretest.New(t) // a schema of the test's own (run recreates it), dropped after the test
	var out bytes.Buffer
	o, err := run(t.Context(), &out, tenuretest.URL(t), env.Schema)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if o.attempts != 2 || o.jobs != 1 || o.jobID == 0 {
		t.Errorf("%d attempts left %d River jobs (ID %d): want 2 attempts and exactly one job", o.attempts, o.jobs, o.jobID)
	}
	if o.notification != "tracking number sent for A-7" {
		t.Errorf("notification %q", o.notification)
	}
	t.Log(out.String())
}

// newHandoff wires the example's two sides in an env: its workflows on the
// env's worker, River's tables and client in the env's schema, on its pool.
func newHandoff(t *testing.T) (*tenuretest.Env, *handoff) {
	t.Helper()
	h := &handoff{shipped: make(chan string, 1)}
	h.fulfil, h.notify = h.newFulfil(), newNotify()
	env := tenuretest.New(t, tenuretest.Workflows(h.fulfil, h.notify))
	h.pool, h.tenure = env.Pool, env.Client

	quiet := slog.New(slog.DiscardHandler)
	migrator, err := rivermigrate.New(riverpgxv5.New(env.Pool), &rivermigrate.Config{Schema: env.Schema, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrator.Migrate(t.Context(), rivermigrate.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &ShipWorker{h: h})
	h.river, err = river.NewClient(riverpgxv5.New(env.Pool), &river.Config{
		Schema:            env.Schema,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		Workers:           workers,
		Logger:            quiet,
		FetchPollInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return env, h
}

func TestRiverHandoff_OneJobFromTwoAttemptsAndOneRunFromTheJob(t *testing.T) {
	t.Parallel()
	env, h := newHandoff(t)

	// Tenure to River: the first attempt fails after its insert, and its
	// transaction takes the River job with it.
	run := tenuretest.Start(env, h.fulfil, Order{ID: "A-7"})
	jobID, err := tenuretest.Result(env, run)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := env.Timeline(run.ID), []string{"1.1 enqueue-shipment failed", "1.2 enqueue-shipment succeeded"}; !slices.Equal(got, want) {
		t.Errorf("attempts %v, want %v", got, want)
	}
	var jobs []int64
	rows, _ := env.Pool.Query(t.Context(), `SELECT id FROM river_job WHERE kind = 'ship_order'`) // the env's schema is first on the search_path
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, id)
	}
	if err := rows.Err(); err != nil || !slices.Equal(jobs, []int64{jobID}) {
		t.Fatalf("River's ship_order jobs %v, %v; want exactly job %d", jobs, err, jobID)
	}

	// River to Tenure: the job completes in the transaction that starts
	// notify-shipped, under a key derived from the job.
	if err := h.river.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before the env's cleanup closes the pool
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.river.Stop(ctx)
	})
	select {
	case <-h.shipped:
	case <-time.After(30 * time.Second):
		t.Fatal("the River worker did not work the job in 30s")
	}
	notify := tenuretest.Start(env, h.notify, Order{ID: "A-7"}, sdk.WithKey(fmt.Sprintf("ship-job-%d", jobID)))
	if notify.Created {
		t.Error("the River worker's run was not found by its key")
	}
	if got, err := tenuretest.Result(env, notify); err != nil || got != "tracking number sent for A-7" {
		t.Errorf("notify-shipped: %q, %v", got, err)
	}
	var state string // committed with the run
	if err := env.Pool.QueryRow(t.Context(), `SELECT state FROM river_job WHERE id = $1`, jobID).Scan(&state); err != nil || state != "completed" {
		t.Errorf("job %d is %q, %v; want completed", jobID, state, err)
	}
	if fs, err := env.Operator.Failures(t.Context(), operator.FailureFilter{}); err != nil || len(fs) > 0 {
		t.Errorf("failures %v, %v; want none", fs, err)
	}
}
