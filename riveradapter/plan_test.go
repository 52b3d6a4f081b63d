package riveradapter_test

import (
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/riveradapter"
	"github.com/tenurehq/tenure/tenuretest"
)

// explained collects what auto_explain says of every statement a pool's
// connections run, nested ones (inside the adapter's functions) too.
type explained struct {
	mu    sync.Mutex
	plans []string
}

func (e *explained) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	if !strings.HasPrefix(n.Message, "duration:") { // auto_explain's
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.plans = append(e.plans, n.Message)
}

func (e *explained) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.plans
	e.plans = nil
	return p
}

// compilingPool is a pool on env's database whose server JIT-compiles every
// statement (jit_above_cost and the others at 0, as a server's settings may
// be) and tells, through auto_explain's notices, the plan of every
// statement its connections run, nested ones too.
func compilingPool(t *testing.T, env *tenuretest.Env) (*pgxpool.Pool, *explained) {
	t.Helper()
	cfg := env.Pool.Config()
	for k, v := range map[string]string{
		"jit": "on", "jit_above_cost": "0", "jit_inline_above_cost": "0", "jit_optimize_above_cost": "0",
		"session_preload_libraries":          "auto_explain",
		"auto_explain.log_min_duration":      "0",
		"auto_explain.log_nested_statements": "on",
		"auto_explain.log_level":             "notice",
		"client_min_messages":                "notice",
	} {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	e := &explained{}
	cfg.ConnConfig.OnNotice = e.notice
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// The check can fail: a statement without the planner's settings is
	// compiled there.
	if _, err := pool.Exec(t.Context(), "SELECT 1"); err != nil {
		t.Fatalf("a server that compiles everything, with auto_explain (needs a superuser): %v", err)
	}
	if p := e.take(); len(p) != 1 || !strings.Contains(p[0], "\nJIT:") {
		t.Fatalf("SELECT 1 at jit_above_cost = 0: %d plans told of, want one, compiled:\n%s", len(p), strings.Join(p, "\n"))
	}
	return pool, e
}

// wholeTable is a plan's read of a whole table of Tenure's or River's
// (steps and attempts are partitioned: attempts_20261207,
// attempts_default), but for the coming days' partitions, empty (costed
// 0.00..0.00; once filled and analyzed, they are read by their keys as the
// others are); or of every run of a status through runs_workflow_status_idx
// (every workflow's runs, where the shadow runs are those of queue
// "river", in the partial indexes of running and queued runs).
var wholeTable = regexp.MustCompile(`Seq Scan on (runs|(steps|attempts)(_[0-9a-z]+)?|failures|river_job)\b|runs_(workflow_status|created)_idx`)

// On a history of 100,000 River jobs and their shadow runs, analyzed, no
// statement the adapter sends, nor any statement inside its functions, is
// JIT-compiled, even on a server that compiles everything, and none reads a
// table of Tenure's or River's whole: first attempts, later attempts, a
// budget spent, a requeue put back by the reconciler, a discard and a
// cancel it records. (River's own statements are River's: its client here
// has a pool of its own.)
func TestRecord_OnAHistoryNoStatementIsCompiledOrReadsATableWhole(t *testing.T) {
	t.Parallel()
	env := tenuretest.New(t)
	migrateRiver(t, env)
	ctx := t.Context()
	// The shadow runs' IDs are UUIDv7 of their jobs' creation, as the
	// adapter makes them: their steps and attempts are in the partition of
	// their day, as in production (random IDs would scatter them over the
	// coming days' partitions, whose scans then read a row or two).
	const history = 100_000
	for _, sql := range []string{
		`INSERT INTO river_job (state, attempt, max_attempts, attempted_at, attempted_by, created_at, scheduled_at,
			finalized_at, priority, args, errors, kind, metadata, queue, tags)
		SELECT (CASE WHEN i % 20 = 0 THEN 'discarded' ELSE 'completed' END)::river_job_state, 1, 25,
		       h.t, ARRAY['history'], h.t, h.t, h.t + interval '5 milliseconds', 1, jsonb_build_object('n', i),
		       CASE WHEN i % 20 = 0 THEN ARRAY[jsonb_build_object('at', h.t, 'attempt', 1, 'error', 'connection reset', 'trace', '')] END,
		       'flaky', '{}', 'default', '{}'
		FROM generate_series(1, $1::integer) AS i, LATERAL (SELECT now() - interval '1 day' + i * interval '1 millisecond' AS t) AS h`,
		`INSERT INTO runs (id, workflow, queue, run_key, input, output, status, epoch, created_at, updated_at,
			started_at, finished_at, error_message)
		SELECT (lpad(to_hex(floor(extract(epoch FROM j.created_at) * 1000)::bigint), 12, '0') || '70008'
		        || lpad(to_hex(j.id), 15, '0'))::uuid, 'river:flaky', 'river', 'river:' || j.id, j.args,
		       CASE WHEN j.state = 'completed' THEN 'null'::jsonb END,
		       CASE WHEN j.state = 'completed' THEN 'completed' ELSE 'failed' END, 1, j.created_at, j.finalized_at,
		       j.attempted_at, j.finalized_at, CASE WHEN j.state = 'discarded' THEN 'connection reset' END
		FROM river_job j WHERE $1::integer > 0`,
		`INSERT INTO steps (run_id, step, activity, status, policy, kind, first_started_at, finished_at, reason, error_message)
		SELECT id, 1, 'flaky', status, '{}', 'activity', started_at, finished_at,
		       CASE WHEN status = 'failed' THEN 'retries_exhausted' END, error_message
		FROM runs WHERE $1::integer > 0`,
		`INSERT INTO attempts (run_id, step, attempt, activity, status, started_at, ended_at, error_message, epoch, worker)
		SELECT id, 1, 1, 'flaky', CASE WHEN status = 'failed' THEN 'failed' ELSE 'succeeded' END, started_at, finished_at,
		       error_message, 1, 'history'
		FROM runs WHERE $1::integer > 0`,
		`INSERT INTO failures (run_id, workflow, reason, step, activity, attempts, errors, rescues, error_message, failed_at)
		SELECT id, workflow, 'retries_exhausted', 1, 'flaky', 1, 1, 0, error_message, finished_at
		FROM runs WHERE status = 'failed' AND $1::integer > 0`,
	} {
		if _, err := env.Pool.Exec(ctx, sql, history); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Pool.Exec(ctx, `ANALYZE runs, steps, attempts, failures, river_job`); err != nil {
		t.Fatal(err)
	}

	pool, seen := compilingPool(t, env)
	w := &flakyWorker{}
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
	r, err := riveradapter.NewRetry(riveradapter.Kind("flaky", mustPolicy(t, policy.MaxAttempts(2), policy.Constant(50*time.Millisecond),
		policy.Jitter(policy.NoJitter))), riveradapter.Record(pool, env.Schema))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	c := startClient(t, env, cfg)

	// A job that fails once, then succeeds (river_first, then river_begin
	// and river_end); then first attempts that succeed.
	again, err := c.Insert(ctx, FlakyArgs{Fail: 1, Err: "plain"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	final(t, c, again.Job.ID, rivertype.JobStateCompleted)
	for range 10 {
		res, err := c.Insert(ctx, FlakyArgs{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		final(t, c, res.Job.ID, rivertype.JobStateCompleted)
	}
	// A job whose budget is spent: cancelled in River, a failure; requeued
	// in Tenure and put back by the reconciler.
	spent, err := c.Insert(ctx, FlakyArgs{Fail: 1_000_000, Err: "plain"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	final(t, c, spent.Job.ID, rivertype.JobStateCancelled)
	if _, err := env.Pool.Exec(ctx, `SELECT requeue_failures(workflow => 'river:flaky', note => 'plan test', since => now() - interval '1 minute')`); err != nil {
		t.Fatal(err)
	}
	// River's own discard (a kind without a policy) and cancel.
	plain, err := c.Insert(ctx, PlainArgs{}, &river.InsertOpts{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	final(t, c, plain.Job.ID, rivertype.JobStateDiscarded)
	if got, err := r.Reconcile(ctx); err != nil || got.Requeued != 1 || got.Failed != 1 {
		t.Fatalf("Reconcile: %+v, %v; want the requeue put back and the discard failed", got, err)
	}
	final(t, c, spent.Job.ID, rivertype.JobStateCancelled)
	snoozed, err := c.Insert(ctx, FlakyArgs{Fail: 1_000_000, Err: "retry-after"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, as := shadowIfAny(t, env, snoozed.Job.ID); len(as) > 0 && as[0].Status == "snoozed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job was not snoozed within 30 s")
		}
	}
	if _, err := c.JobCancel(ctx, snoozed.Job.ID); err != nil {
		t.Fatal(err)
	}
	final(t, c, snoozed.Job.ID, rivertype.JobStateCancelled)
	if _, err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if reason, _, _, _, _ := failureOf(t, env, snoozed.Job.ID); reason != "cancelled" {
		t.Fatalf("the cancelled job's failure: %s, want cancelled", reason)
	}

	plans := seen.take()
	var nested int
	for _, p := range plans {
		if strings.Contains(p, "\nJIT:") {
			t.Errorf("JIT-compiled at jit_above_cost = 0:\n%s", p)
		}
		for _, l := range strings.Split(p, "\n") {
			if wholeTable.MatchString(l) && !strings.Contains(l, "(cost=0.00..0.00 ") {
				t.Errorf("%s in\n%s", strings.TrimSpace(l), p)
			}
		}
		if strings.Contains(p, "Query Text: INSERT INTO") || strings.Contains(p, "Query Text: UPDATE") {
			nested++ // a statement inside river_begin, river_end, ...
		}
	}
	if len(plans) < 30 || nested < 5 {
		t.Fatalf("%d plans told of, %d of them statements inside the adapter's functions: the workload did not run through the compiling pool", len(plans), nested)
	}
	t.Logf("%d statements explained (%d nested writes), none compiled, none reading a table whole", len(plans), nested)
}
