package riveradapter_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/riveradapter"
	"github.com/tenurehq/tenure/tenuretest"
	"github.com/tenurehq/tenure/ui"
)

// recorded is a River client on a test schema holding both River's tables
// and Tenure's, the adapter installed with Record and kind flaky's policy
// p; edit, if given, changes River's configuration before the client is
// made.
func recorded(t *testing.T, p policy.Retry, w *flakyWorker, edit func(*river.Config)) (*river.Client[pgx.Tx], *riveradapter.Retry, *tenuretest.Env) {
	t.Helper()
	env := tenuretest.New(t)
	migrateRiver(t, env)
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	river.AddWorker(workers, &plainWorker{})
	cfg := &river.Config{
		Schema:            env.Schema,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Workers:           workers,
		Logger:            slog.New(slog.DiscardHandler),
		FetchPollInterval: 100 * time.Millisecond,
	}
	if edit != nil {
		edit(cfg)
	}
	r, err := riveradapter.NewRetry(riveradapter.Kind("flaky", p), riveradapter.Record(env.Pool, env.Schema))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	return startClient(t, env, cfg), r, env
}

// PlainArgs is a job of a kind without a Tenure policy: River decides its
// retries; its worker always fails.
type PlainArgs struct{}

func (PlainArgs) Kind() string { return "plain" }

type plainWorker struct {
	river.WorkerDefaults[PlainArgs]
}

func (*plainWorker) Work(context.Context, *river.Job[PlainArgs]) error {
	return errors.New("no policy here")
}

// NextRetry retries at once, so that River's own policy does not wait.
func (*plainWorker) NextRetry(*river.Job[PlainArgs]) time.Time { return time.Now() }

// attemptRow is one attempts row of a job's shadow run.
type attemptRow struct {
	Attempt int
	Status  string
	Rescue  bool
	Source  *string
	Message *string
}

// shadow reads the job's shadow run: its status and its attempts, in order.
func shadow(t *testing.T, env *tenuretest.Env, job int64) (string, []attemptRow) {
	t.Helper()
	var status string
	if err := env.Pool.QueryRow(t.Context(), `SELECT status FROM runs WHERE run_key = 'river:' || $1::bigint`, job).Scan(&status); err != nil {
		t.Fatalf("job %d's shadow run: %v", job, err)
	}
	rows, err := env.Pool.Query(t.Context(), `SELECT a.attempt, a.status, a.is_rescue, a.delay_source, a.error_message
		FROM attempts a JOIN runs r ON r.id = a.run_id WHERE r.run_key = 'river:' || $1::bigint ORDER BY a.attempt`, job)
	if err != nil {
		t.Fatal(err)
	}
	as, err := pgx.CollectRows(rows, pgx.RowToStructByPos[attemptRow])
	if err != nil {
		t.Fatal(err)
	}
	return status, as
}

// shadowIfAny is shadow, "" and no attempts when the job has no run yet.
func shadowIfAny(t *testing.T, env *tenuretest.Env, job int64) (string, []attemptRow) {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(t.Context(), `SELECT count(*) FROM runs WHERE run_key = 'river:' || $1::bigint`, job).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		return "", nil
	}
	return shadow(t, env, job)
}

// statuses is the attempts' statuses, in order.
func statuses(as []attemptRow) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.Status
	}
	return strings.Join(s, ",")
}

// failureOf reads the job's open failure row.
func failureOf(t *testing.T, env *tenuretest.Env, job int64) (reason string, attempts, errs, rescues int, msg string) {
	t.Helper()
	if err := env.Pool.QueryRow(t.Context(), `SELECT f.reason, f.attempts, f.errors, f.rescues, coalesce(f.error_message, '')
		FROM failures f JOIN runs r ON r.id = f.run_id WHERE r.run_key = 'river:' || $1::bigint AND f.requeued_at IS NULL`, job).
		Scan(&reason, &attempts, &errs, &rescues, &msg); err != nil {
		t.Fatalf("job %d's failure row: %v", job, err)
	}
	return
}

// Every attempt of a job is a Tenure attempt row of its shadow run, with
// its status, delay and source; a job whose policy gives up fails its run
// with a failure row that counts its attempts and errors; a Retry-After
// hint is an attempt snoozed, charged to nothing.
func TestRecord_EveryAttemptIsARowAndAGivenUpJobIsAFailure(t *testing.T) {
	t.Parallel()
	w := &flakyWorker{}
	c, _, env := recorded(t, mustPolicy(t, policy.MaxAttempts(3), policy.Constant(100*time.Millisecond), policy.Jitter(policy.NoJitter)), w, nil)

	failing, err := c.Insert(t.Context(), FlakyArgs{Fail: 100, Err: "plain"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	final(t, c, failing.Job.ID, rivertype.JobStateCancelled)
	status, as := shadow(t, env, failing.Job.ID)
	if status != "failed" || statuses(as) != "failed,failed,failed" {
		t.Fatalf("run %s, attempts %s; want failed, three failed", status, statuses(as))
	}
	if as[0].Source == nil || *as[0].Source != "policy" || as[0].Message == nil || *as[0].Message != "connection reset" {
		t.Errorf("first attempt: source %v, message %v; want policy, the job's error", as[0].Source, as[0].Message)
	}
	reason, attempts, errs, rescues, msg := failureOf(t, env, failing.Job.ID)
	if reason != "retries_exhausted" || attempts != 3 || errs != 3 || rescues != 0 || msg != "connection reset" {
		t.Errorf("failure %s, %d attempts, %d errors, %d rescues, %q", reason, attempts, errs, rescues, msg)
	}
	var workflow string
	if err := env.Pool.QueryRow(t.Context(), `SELECT f.workflow FROM open_failures f JOIN runs r ON r.id = f.run_id
		WHERE r.run_key = 'river:' || $1::bigint`, failing.Job.ID).Scan(&workflow); err != nil || workflow != "river:flaky" {
		t.Errorf("open_failures: %q, %v; want the job's run as river:flaky", workflow, err)
	}

	// The UI's Failures page lists it beside Tenure runs, and its run page
	// shows its attempts.
	h, err := ui.New(ui.Config{Operator: env.Operator})
	if err != nil {
		t.Fatal(err)
	}
	var runID string
	if err := env.Pool.QueryRow(t.Context(), `SELECT id::text FROM runs WHERE run_key = 'river:' || $1::bigint`, failing.Job.ID).Scan(&runID); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]string{
		"/failures":         {"river:flaky", "retries_exhausted", "connection reset"},
		"/runs/" + runID:    {"river:flaky", "flaky", "retries_exhausted"},
		"/runs?queue=river": {runID},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		for _, w := range want {
			if rec.Code != 200 || !strings.Contains(rec.Body.String(), w) {
				t.Errorf("GET %s: %d, want %q in the page", path, rec.Code, w)
			}
		}
	}

	ok, err := c.Insert(t.Context(), FlakyArgs{Fail: 0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	final(t, c, ok.Job.ID, rivertype.JobStateCompleted)
	if status, as := shadow(t, env, ok.Job.ID); status != "completed" || statuses(as) != "succeeded" {
		t.Errorf("a job that succeeds: run %s, attempts %s", status, statuses(as))
	}
}

// A Retry-After hint is recorded as a snoozed attempt, with its delay's
// source; a permanent error fails the run non_retryable at once.
func TestRecord_SnoozesAndPermanentErrors(t *testing.T) {
	t.Parallel()
	w := &flakyWorker{}
	c, _, env := recorded(t, mustPolicy(t, policy.MaxAttempts(1)), w, nil)
	res, err := c.Insert(t.Context(), FlakyArgs{Fail: 1, Err: "retry-after"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	final(t, c, res.Job.ID, rivertype.JobStateCompleted)
	status, as := shadow(t, env, res.Job.ID)
	if status != "completed" || statuses(as) != "snoozed,succeeded" || as[0].Source == nil || *as[0].Source != "retry-after" {
		t.Fatalf("run %s, attempts %+v; want completed, snoozed (retry-after) then succeeded", status, as)
	}
}

// A job that panics or fails permanently is a failure with its reason.
func TestRecord_APermanentErrorIsANonRetryableFailure(t *testing.T) {
	t.Parallel()
	w := &flakyWorker{}
	c, _, env := recorded(t, mustPolicy(t, policy.MaxAttempts(5)), w, nil)
	res, err := c.Insert(t.Context(), FlakyArgs{Fail: 100, Err: "permanent"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	final(t, c, res.Job.ID, rivertype.JobStateCancelled)
	if reason, attempts, _, _, msg := failureOf(t, env, res.Job.ID); reason != "non_retryable" || attempts != 1 || msg != "card declined" {
		t.Errorf("failure %s after %d attempts: %q", reason, attempts, msg)
	}
}

// A failed job requeued in Tenure (requeue_failures, as the CLI and the UI
// do) goes back to River at the reconciler's next pass, with a fresh
// budget: the policy gives it its MaxAttempts again from the requeue.
func TestRecord_ARequeueInTenurePutsTheJobBackWithAFreshBudget(t *testing.T) {
	t.Parallel()
	w := &flakyWorker{}
	c, r, env := recorded(t, mustPolicy(t, policy.MaxAttempts(2), policy.Constant(50*time.Millisecond), policy.Jitter(policy.NoJitter)), w, nil)
	res, err := c.Insert(t.Context(), FlakyArgs{Fail: 3, Err: "plain"}, nil) // fails 3 times, then succeeds
	if err != nil {
		t.Fatal(err)
	}
	final(t, c, res.Job.ID, rivertype.JobStateCancelled)
	var n int
	if err := env.Pool.QueryRow(t.Context(), `SELECT count(*) FROM requeue_failures(workflow => 'river:flaky', note => 'downstream fixed')
		WHERE requeued`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("requeue_failures: %d, %v", n, err)
	}
	got, err := r.Reconcile(t.Context())
	if err != nil || got.Requeued != 1 {
		t.Fatalf("Reconcile: %+v, %v; want 1 requeued", got, err)
	}
	final(t, c, res.Job.ID, rivertype.JobStateCompleted)
	status, as := shadow(t, env, res.Job.ID)
	if status != "completed" || statuses(as) != "failed,failed,failed,succeeded" {
		t.Fatalf("run %s, attempts %s; want completed after two failures, then one and a success with the fresh budget", status, statuses(as))
	}
	var audits int
	if err := env.Pool.QueryRow(t.Context(), `SELECT count(*) FROM audit_log WHERE action = 'requeue' AND note = 'downstream fixed'`).Scan(&audits); err != nil || audits != 1 {
		t.Errorf("audit rows of the requeue: %d, %v", audits, err)
	}
}

// What River ends itself, the reconciler records: a job cancelled by
// Client.JobCancel while it waits for its retry is a failure 'cancelled';
// a job of a kind without a policy, recorded too, that River discards at
// its own MaxAttempts is a failure 'retries_exhausted'.
func TestReconcile_JobsRiverEndsItselfBecomeFailures(t *testing.T) {
	t.Parallel()
	w := &flakyWorker{}
	c, r, env := recorded(t, mustPolicy(t, policy.MaxAttempts(5), policy.Constant(time.Hour)), w, nil)
	waiting, err := c.Insert(t.Context(), FlakyArgs{Fail: 100, Err: "plain"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	final(t, c, waiting.Job.ID, rivertype.JobStateRetryable)
	if _, err := c.JobCancel(t.Context(), waiting.Job.ID); err != nil {
		t.Fatal(err)
	}
	got, err := r.Reconcile(t.Context())
	if err != nil || got.Failed != 1 {
		t.Fatalf("Reconcile: %+v, %v; want 1 failed", got, err)
	}
	if reason, attempts, errs, _, msg := failureOf(t, env, waiting.Job.ID); reason != "cancelled" || attempts != 1 || errs != 1 || !strings.Contains(msg, "cancelled in River") {
		t.Errorf("failure %s, %d attempts, %d errors: %q", reason, attempts, errs, msg)
	}
	if got, err := r.Reconcile(t.Context()); err != nil || got != (riveradapter.Reconciled{}) {
		t.Errorf("a second pass: %+v, %v; want nothing to do", got, err)
	}

	plain, err := c.Insert(t.Context(), PlainArgs{}, &river.InsertOpts{MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	final(t, c, plain.Job.ID, rivertype.JobStateDiscarded)
	if status, as := shadow(t, env, plain.Job.ID); status != "running" || statuses(as) != "failed,failed" {
		t.Fatalf("before the pass: run %s, attempts %s; want running, two failed", status, statuses(as))
	}
	if got, err := r.Reconcile(t.Context()); err != nil || got.Failed != 1 {
		t.Fatalf("Reconcile: %+v, %v; want 1 failed", got, err)
	}
	if reason, attempts, errs, _, msg := failureOf(t, env, plain.Job.ID); reason != "retries_exhausted" || attempts != 2 || errs != 2 || !strings.Contains(msg, "no policy here") {
		t.Errorf("failure %s, %d attempts, %d errors: %q", reason, attempts, errs, msg)
	}
}

// spanMiddleware puts a span context in each job's context, as a tracing
// middleware (otelriver's) does before the adapter's.
type spanMiddleware struct {
	river.WorkerMiddlewareDefaults
	sc trace.SpanContext
}

func (m *spanMiddleware) Work(ctx context.Context, _ *rivertype.JobRow, doInner func(context.Context) error) error {
	return doInner(trace.ContextWithSpanContext(ctx, m.sc))
}

// The attempt row carries the trace and span IDs of the span a tracing
// middleware before the adapter's started: the adapter is the last
// middleware, the nearest the job.
func TestRecord_TheAttemptCarriesTheTracingMiddlewaresSpan(t *testing.T) {
	t.Parallel()
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	w := &flakyWorker{}
	c, _, env := recorded(t, mustPolicy(t), w, func(cfg *river.Config) {
		cfg.Middleware = []rivertype.Middleware{&spanMiddleware{sc: sc}}
	})
	res, err := c.Insert(t.Context(), FlakyArgs{Fail: 0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	final(t, c, res.Job.ID, rivertype.JobStateCompleted)
	var traceID, spanID string
	if err := env.Pool.QueryRow(t.Context(), `SELECT a.trace_id, a.span_id FROM attempts a JOIN runs r ON r.id = a.run_id
		WHERE r.run_key = 'river:' || $1::bigint`, res.Job.ID).Scan(&traceID, &spanID); err != nil {
		t.Fatal(err)
	}
	if traceID != sc.TraceID().String() || spanID != sc.SpanID().String() {
		t.Errorf("attempt's trace %s span %s; want %s %s", traceID, spanID, sc.TraceID(), sc.SpanID())
	}
}

// TxArgs is a job whose worker completes it in its own transaction, with
// a row of its own, through riveradapter.CompleteTx; its first call rolls
// the transaction back and fails.
type TxArgs struct{}

func (TxArgs) Kind() string { return "tx_job" }

type txWorker struct {
	river.WorkerDefaults[TxArgs]
	pool  atomic.Pointer[pgxpool.Pool] // set once the test's schema is made
	calls atomic.Int32
	jit   atomic.Value // the transaction's jit setting after CompleteTx
}

func (w *txWorker) Work(ctx context.Context, job *river.Job[TxArgs]) error {
	tx, err := w.pool.Load().Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `INSERT INTO shipped (job) VALUES ($1)`, job.ID); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SET LOCAL jit = on`); err != nil {
		return err
	}
	if _, err := riveradapter.CompleteTx(ctx, tx, job); err != nil {
		return err
	}
	var jit string
	if err := tx.QueryRow(ctx, `SHOW jit`).Scan(&jit); err != nil {
		return err
	}
	w.jit.Store(jit)
	if w.calls.Add(1) == 1 {
		return errors.New("the carrier's API timed out before the commit")
	}
	return tx.Commit(ctx)
}

func (*txWorker) NextRetry(*river.Job[TxArgs]) time.Time { return time.Now() }

// CompleteTx writes the attempt's success in the worker's own transaction,
// with the job's completion: rolled back with it on the first call (the
// attempt is then recorded failed from River's errors, when the next
// begins), committed with it on the second, and not written twice; the
// transaction's jit setting is its own again after it.
func TestCompleteTx_TheAttemptCommitsWithTheJobsTransaction(t *testing.T) {
	t.Parallel()
	w := &txWorker{}
	c, _, env := recorded(t, mustPolicy(t), &flakyWorker{}, func(cfg *river.Config) {
		river.AddWorker(cfg.Workers, w)
	})
	w.pool.Store(env.Pool)
	if _, err := env.Pool.Exec(t.Context(), `CREATE TABLE shipped (job bigint PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	res, err := c.Insert(t.Context(), TxArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	final(t, c, res.Job.ID, rivertype.JobStateCompleted)
	status, as := shadow(t, env, res.Job.ID)
	if status != "completed" || statuses(as) != "failed,succeeded" {
		t.Fatalf("run %s, attempts %+v; want completed, failed (rolled back) then succeeded", status, as)
	}
	if as[0].Message == nil || !strings.Contains(*as[0].Message, "timed out before the commit") {
		t.Errorf("the rolled-back attempt's message: %v", as[0].Message)
	}
	var n int
	if err := env.Pool.QueryRow(t.Context(), `SELECT count(*) FROM shipped`).Scan(&n); err != nil || n != 1 {
		t.Errorf("rows of the job's own: %d, %v", n, err)
	}
	// The adapter's statements ran with jit off (Tenure's planner); the
	// rest of the worker's transaction has its own setting back.
	if jit, _ := w.jit.Load().(string); jit != "on" {
		t.Errorf("jit in the worker's transaction after CompleteTx: %q, want its own (on)", jit)
	}
}

// Jobs failing their first attempt together draw their jitter apart: the
// draw is seeded by the job, not by the (not yet written) run.
func TestRecord_FirstAttemptsJitterApart(t *testing.T) {
	t.Parallel()
	w := &flakyWorker{}
	c, _, env := recorded(t, mustPolicy(t, policy.MaxAttempts(3), policy.Exponential(time.Minute, 2, time.Hour), policy.Jitter(policy.FullJitter)), w, nil)
	for range 5 {
		if _, err := c.Insert(t.Context(), FlakyArgs{Fail: 100, Err: "plain"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n, distinct int
		if err := env.Pool.QueryRow(t.Context(), `SELECT count(*), count(DISTINCT delay_ms) FROM attempts WHERE status = 'failed'`).Scan(&n, &distinct); err != nil {
			t.Fatal(err)
		}
		if n == 5 {
			if distinct < 4 {
				t.Errorf("5 first attempts' delays: %d distinct; want them drawn apart", distinct)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 5 first attempts failed after 30 s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
