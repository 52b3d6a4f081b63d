package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/chaos/fleet"
	"github.com/tenurehq/tenure/internal/chaos/invariant"
	"github.com/tenurehq/tenure/internal/chaos/workload"
	"github.com/tenurehq/tenure/internal/noleaks"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// workerBinary is the worker program, built once for the test process.
var workerBinary string

// buildErr fails every test that needs the worker program when it did not build.
var buildErr error

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tenure-chaos-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	workerBinary, buildErr = fleet.Build(ctx, dir)
	cancel()
	// Every process and the goroutines reading it are reaped by their test.
	code := noleaks.Main(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// Timings of the scenario workers: a lease long enough that a loaded
// machine does not lose it by accident, short enough to reclaim quickly.
const (
	scenarioLease     = 2 * time.Second
	scenarioHeartbeat = 250 * time.Millisecond
	// waitFor bounds every wait of a scenario; nothing is asserted on time.
	waitFor = 30 * time.Second
)

// env is one scenario's isolated Tenure: a migrated schema with the
// workload's tables, a pool, a client and a completion listener.
type env struct {
	t       *testing.T
	ctx     context.Context
	schema  string
	pool    *pgxpool.Pool
	store   *store.Store
	client  *sdk.Client
	op      *operator.Operator
	plan    *sdk.Workflow[workload.Plan, workload.Result]
	notices *invariant.Listener
	fleet   fleet.Config
}

// newEnv sets up a scenario in a schema of its own on the shared test database.
func newEnv(t *testing.T) *env {
	t.Helper()
	schema := pgtest.Schema(t)
	return newEnvOn(t, pgtest.URL(t), schema)
}

// newEnvOn sets up a scenario in schema (which must exist) of the database at url.
func newEnvOn(t *testing.T, url, schema string) *env {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("worker program: %v", buildErr)
	}
	ctx := t.Context()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(ctx, pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	if err := workload.Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(pool, store.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	l, err := invariant.Listen(pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Stop() })
	select {
	case <-l.Ready():
	case <-time.After(waitFor):
		t.Fatal("completion listener did not start")
	}
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithPollInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	return &env{
		t: t, ctx: ctx, schema: schema, pool: pool, store: st,
		client:  client,
		op:      op,
		plan:    workload.New(nil).Plan,
		notices: l,
		fleet: fleet.Config{
			Binary: workerBinary, DatabaseURL: url, Schema: schema, Concurrency: 6,
			LeaseTTL: scenarioLease, Heartbeat: scenarioHeartbeat, Poll: 50 * time.Millisecond, Drain: time.Second,
		},
	}
}

// worker starts a worker process with label; it is killed at cleanup if it
// still runs, and its log is shown when the test failed.
func (e *env) worker(label string, edit ...func(*fleet.Config)) *fleet.Worker {
	e.t.Helper()
	cfg := e.fleet
	for _, f := range edit {
		f(&cfg)
	}
	w, err := fleet.Start(cfg, label)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		w.Close()
		if e.t.Failed() {
			e.t.Logf("log of worker %s (pid %d):\n%s", w.Label, w.PID(), strings.Join(w.Log(), "\n"))
		}
	})
	select {
	case <-w.Started():
	case <-w.Done():
		e.t.Fatalf("worker %s exited at start:\n%s", label, strings.Join(w.Log(), "\n"))
	case <-time.After(waitFor):
		e.t.Fatalf("worker %s did not start", label)
	}
	return w
}

// start starts a run of the plan made of steps.
func (e *env) start(steps ...workload.Step) uuid.UUID {
	e.t.Helper()
	r, err := sdk.Start(e.ctx, e.client, e.plan, workload.Plan{Steps: steps})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.ID
}

// result waits for the run's result.
func (e *env) result(id uuid.UUID) (workload.Result, error) {
	e.t.Helper()
	r, err := sdk.Lookup(e.ctx, e.client, e.plan, id)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, waitFor)
	defer cancel()
	out, err := r.Result(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		e.t.Fatalf("run %s: no result in %s (history %v)", id, waitFor, e.statuses(id))
	}
	return out, err
}

// completed waits for the run and fails the test unless it completed.
func (e *env) completed(id uuid.UUID) workload.Result {
	e.t.Helper()
	out, err := e.result(id)
	if err != nil {
		e.t.Fatalf("run %s: %v (history %v)", id, err, e.statuses(id))
	}
	return out
}

// eventually polls cond until it holds, failing the test after waitFor.
// Errors from cond (the database may be restarting) count as not yet.
func (e *env) eventually(what string, cond func() (bool, error)) {
	e.t.Helper()
	deadline := time.Now().Add(waitFor)
	var last error
	for {
		ok, err := cond()
		if ok && err == nil {
			return
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s (last error: %v)", what, last)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// query reads one value.
func query[T any](e *env, sql string, args ...any) (T, error) {
	var v T
	err := e.pool.QueryRow(e.ctx, strings.ReplaceAll(sql, "{schema}", pgx.Identifier{e.schema}.Sanitize()), args...).Scan(&v)
	return v, err
}

// mustQuery reads one value or fails the test.
func mustQuery[T any](e *env, sql string, args ...any) T {
	e.t.Helper()
	v, err := query[T](e, sql, args...)
	if err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// invocations counts the ledger rows of a step: its real invocations.
func (e *env) invocations(id uuid.UUID, step int) int {
	e.t.Helper()
	return mustQuery[int](e, `SELECT count(*) FROM {schema}.ledger WHERE run_id = $1 AND step = $2`, id, step)
}

// inFlight waits until step 1 of each run has been invoked.
func (e *env) inFlight(ids ...uuid.UUID) {
	e.t.Helper()
	for _, id := range ids {
		e.eventually("step 1 of "+id.String()+" invoked", func() (bool, error) {
			n, err := query[int](e, `SELECT count(*) FROM {schema}.ledger WHERE run_id = $1 AND step = 1`, id)
			return n > 0, err
		})
	}
}

// history returns a run's attempts.
func (e *env) history(id uuid.UUID) []record.Attempt {
	e.t.Helper()
	h, err := e.op.History(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

// statuses lists a run's attempts as "step.attempt:status".
func (e *env) statuses(id uuid.UUID) []string {
	var out []string
	h, err := e.op.History(e.ctx, id)
	if err != nil {
		return []string{err.Error()}
	}
	for _, a := range h {
		out = append(out, fmt.Sprintf("%d.%d:%s", a.Step, a.Attempt, a.Status))
	}
	return out
}

// check runs the invariant checker on the scenario's schema and fails the
// test on any violation.
func (e *env) check() *invariant.Report {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	_ = e.notices.CatchUp(ctx, e.pool, e.schema) // a notice still missing is reported below
	cancel()
	notices, complete := e.notices.Stop()
	rep, err := invariant.Check(e.ctx, e.pool, e.schema, invariant.Options{Notices: notices, NoticesComplete: complete})
	if err != nil {
		e.t.Fatal(err)
	}
	if !rep.OK() {
		var b strings.Builder
		rep.Write(&b)
		e.t.Fatalf("invariants violated:\n%s", b.String())
	}
	return rep
}

// stopGracefully sends SIGTERM and waits for a clean exit.
func stopGracefully(t *testing.T, w *fleet.Worker) {
	t.Helper()
	if err := w.Terminate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if _, err := w.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if code := w.ExitCode(); code != 0 {
		t.Fatalf("worker %s exited with code %d:\n%s", w.Label, code, strings.Join(w.Log(), "\n"))
	}
}

// waitExit waits for a worker process to end.
func waitExit(t *testing.T, w *fleet.Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if _, err := w.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}
