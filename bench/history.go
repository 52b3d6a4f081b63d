package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// With -history N, each system's tables hold N finished runs before each
// workload, as production leaves them after a day's work, so that a workload
// meets full tables and their statistics instead of empty ones.
//
// The three histories are alike, run for run. Run i of N was created at t,
// spread evenly over the 23 hours before the fill and ending a minute before
// it, the oldest first (River deletes completed jobs 24 hours after they
// ended: none of these is due for its cleaner during a timed part). Of every
// 100 runs, 2 failed after three attempts of their one step (the budget of
// Tenure's default policy, given to River's jobs too; DBOS records a step's
// last outcome only), 5 ran ten steps (B's runs), 1 completed at its second
// attempt and the other 92 ran one step at the first. None of it is
// claimable: every run is finished, in the past.
//
// Each table is filled by one INSERT … SELECT FROM generate_series, through a
// column list (a column that a later migration adds takes its default), a
// system's tables in one transaction; then they are vacuumed and analysed, as
// autovacuum would have left them, so that no vacuum of the history runs in a
// timed part and the planner knows the tables' sizes. The fill is part of a
// workload's setup, before the meter's baseline (meter.measure): none of its
// transactions, WAL or CPU is charged to the workload.

// historyFrom is the FROM clause of every statement of a fill ($1 is N): run
// i, when it was created (t) and finished, whether it failed, its steps, the
// attempts of each step (tries) and the error of a failed attempt.
const historyFrom = `generate_series(1, $1::int) AS i,
	LATERAL (SELECT now() - interval '1 minute' - (($1::int - i) * interval '23 hours') / $1::int AS t,
	                i % 100 < 2 AS failed,
	                CASE WHEN i % 100 BETWEEN 2 AND 6 THEN 10 ELSE 1 END AS steps,
	                CASE WHEN i % 100 < 2 THEN 3 WHEN i % 100 = 7 THEN 2 ELSE 1 END AS tries,
	                format('upstream returned 503 (request %s)', i) AS error) AS h,
	LATERAL (SELECT h.t + (2 * h.steps + 2) * interval '1 millisecond'
	                    + ((h.tries - 1) * h.tries / 2) * interval '1 second' AS finished) AS f`

// The timeline of a run: attempt a of step s starts 2·s ms after the run's
// creation, plus the waits before it (1 s after the first attempt, 2 s after
// the second), and ends 1 ms later; a step ends with its last attempt, the
// run 1 ms after its last step.
func attemptStart(s, a string) string {
	return `h.t + 2 * ` + s + ` * interval '1 millisecond' + ((` + a + ` - 1) * ` + a + ` / 2) * interval '1 second'`
}

func attemptEnd(s, a string) string { return attemptStart(s, a) + ` + interval '1 millisecond'` }

// historyStmt is one statement of a fill; its first argument is N.
type historyStmt struct {
	sql  string
	args []any
}

// tenurePolicy is the effective policy the worker records with each step of
// benchWF: the default one.
const tenurePolicy = `{"jitter": "full", "backoff": {"max": "1m0s", "kind": "exponential", "factor": 2, "initial": "1s"}, "deadline": "0s", "max_rescues": 3, "at_most_once": false, "max_attempts": 3, "attempt_timeout": "0s", "max_retry_after": "1h0m0s"}`

// tenureHistoryID is run i's ID, a UUIDv7 of its creation time as sdk.Start
// makes them, with i for the random bits: the runs are in the order of their
// primary key, as time-ordered IDs put them.
const tenureHistoryID = `(lpad(to_hex(floor(extract(epoch FROM h.t) * 1000)::bigint), 12, '0')
	|| '70008' || lpad(to_hex(i), 15, '0'))::uuid`

// tenureHistory is benchWF's history: each run, its steps, their attempts,
// and the open failure of each failed run.
func tenureHistory() []historyStmt {
	return []historyStmt{
		{sql: `INSERT INTO {schema}.runs (id, workflow, queue, input, output, status, run_after, epoch,
			error_message, created_at, updated_at, started_at, finished_at)
		SELECT ` + tenureHistoryID + `, 'bench', 'default', jsonb_build_object('steps', h.steps),
		       CASE WHEN NOT h.failed THEN to_jsonb(h.steps) END,
		       CASE WHEN h.failed THEN 'failed' ELSE 'completed' END, h.t, 1,
		       CASE WHEN h.failed THEN h.error END, h.t, f.finished, h.t + interval '1 millisecond', f.finished
		FROM ` + historyFrom},
		{sql: `INSERT INTO {schema}.steps (run_id, step, activity, status, output, reason, error_message, error_type,
			policy, first_started_at, finished_at)
		SELECT ` + tenureHistoryID + `, s, 'noop', CASE WHEN h.failed THEN 'failed' ELSE 'completed' END,
		       CASE WHEN NOT h.failed THEN to_jsonb(s - 1) END,
		       CASE WHEN h.failed THEN 'retries_exhausted' END,
		       CASE WHEN h.failed THEN h.error END,
		       CASE WHEN h.failed THEN '*errors.errorString' END,
		       $2::jsonb, ` + attemptStart("s", "1") + `, ` + attemptEnd("s", "h.tries") + `
		FROM ` + historyFrom + `, generate_series(1, h.steps) AS s`,
			args: []any{tenurePolicy}},
		{sql: `INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, started_at, ended_at,
			error_message, error_type, delay_ms, delay_source, epoch, worker)
		SELECT ` + tenureHistoryID + `, s, a, 'noop', CASE WHEN x.failed THEN 'failed' ELSE 'succeeded' END,
		       ` + attemptStart("s", "a") + `, ` + attemptEnd("s", "a") + `,
		       CASE WHEN x.failed THEN h.error END, CASE WHEN x.failed THEN '*errors.errorString' END,
		       CASE WHEN a < h.tries THEN 1000 * a END, CASE WHEN a < h.tries THEN 'jitter' END,
		       1, 'history-' || i % 4
		FROM ` + historyFrom + `, generate_series(1, h.steps) AS s, generate_series(1, h.tries) AS a,
		     LATERAL (SELECT h.failed OR a < h.tries AS failed) AS x`},
		{sql: `INSERT INTO {schema}.failures (run_id, workflow, reason, step, activity, attempts, errors, rescues,
			error_message, error_type, failed_at)
		SELECT ` + tenureHistoryID + `, 'bench', 'retries_exhausted', 1, 'noop', h.tries, h.tries, 0,
		       h.error, '*errors.errorString', f.finished
		FROM ` + historyFrom + ` WHERE h.failed`},
	}
}

var tenureHistoryTables = []string{"runs", "steps", "attempts", "failures"}

// riverHistory is noopArgs's history in River's one table: a completed job
// per run, a discarded one per failed run, each with the errors of its
// failed attempts.
func riverHistory() []historyStmt {
	return []historyStmt{
		{sql: `INSERT INTO {schema}.river_job (state, attempt, max_attempts, attempted_at, attempted_by, created_at,
			scheduled_at, finalized_at, priority, args, errors, kind, metadata, queue, tags)
		SELECT (CASE WHEN h.failed THEN 'discarded' ELSE 'completed' END)::{schema}.river_job_state, h.tries, 3,
		       ` + attemptStart("1", "h.tries") + `,
		       ARRAY['history_' || i % 4], h.t,
		       h.t + ((h.tries - 1) * h.tries / 2) * interval '1 second', f.finished, 1,
		       jsonb_build_object('n', i),
		       CASE WHEN h.tries > 1 THEN ARRAY(
		           SELECT jsonb_build_object('at', ` + attemptEnd("1", "a") + `,
		                                     'attempt', a, 'error', h.error, 'trace', '')
		           FROM generate_series(1, CASE WHEN h.failed THEN h.tries ELSE h.tries - 1 END) AS a) END,
		       'bench_noop', '{}', 'default', '{}'
		FROM ` + historyFrom},
	}
}

var riverHistoryTables = []string{"river_job"}

// dbosHistoryID is workflow i's ID: random-looking, as DBOS's own (UUIDv4)
// are, so that they land all over its primary key.
const dbosHistoryID = `md5('history ' || i)::uuid::text`

// dbosMillis is DBOS's unit of time: milliseconds since the epoch.
func dbosMillis(t string) string { return `floor(extract(epoch FROM ` + t + `) * 1000)::bigint` }

// dbosHistory is dbosWF's history: each workflow's status, input and output,
// and the output of each of its steps ($2 is the application version, $3
// its name).
func dbosHistory(version, app string) []historyStmt {
	return []historyStmt{
		{sql: `INSERT INTO {schema}.workflow_status (workflow_uuid, status, name, authenticated_roles, executor_id,
			application_version, created_at, updated_at, recovery_attempts, serialization, completed_at, application_name)
		SELECT ` + dbosHistoryID + `, CASE WHEN h.failed THEN 'ERROR' ELSE 'SUCCESS' END, 'main.dbosWF', 'null', 'local',
		       $2, ` + dbosMillis("h.t") + `, ` + dbosMillis("f.finished") + `, 1, 'DBOS_JSON',
		       ` + dbosMillis("f.finished") + `, $3
		FROM ` + historyFrom,
			args: []any{version, app}},
		{sql: `INSERT INTO {schema}.workflow_input (workflow_uuid, inputs, retention_timestamp)
		SELECT ` + dbosHistoryID + `, encode(convert_to(h.steps::text, 'UTF8'), 'base64'), ` + dbosMillis("h.t") + `
		FROM ` + historyFrom},
		{sql: `INSERT INTO {schema}.workflow_output (workflow_uuid, output, error, retention_timestamp)
		SELECT ` + dbosHistoryID + `, CASE WHEN NOT h.failed THEN encode(convert_to(h.steps::text, 'UTF8'), 'base64') END,
		       CASE WHEN h.failed THEN h.error END, ` + dbosMillis("f.finished") + `
		FROM ` + historyFrom},
		{sql: `INSERT INTO {schema}.operation_outputs (workflow_uuid, function_id, function_name, output, error,
			started_at_epoch_ms, completed_at_epoch_ms, serialization, application_name, retention_timestamp)
		SELECT ` + dbosHistoryID + `, s - 1, 'noop', CASE WHEN NOT h.failed THEN 'MA==' END,
		       CASE WHEN h.failed THEN h.error END, ` + dbosMillis(attemptStart("s", "1")) + `,
		       ` + dbosMillis(attemptEnd("s", "h.tries")) + `, 'DBOS_JSON', $2, ` + dbosMillis(attemptEnd("s", "h.tries")) + `
		FROM ` + historyFrom + `, generate_series(1, h.steps) AS s`,
			args: []any{app}},
	}
}

var dbosHistoryTables = []string{"workflow_status", "workflow_input", "workflow_output", "operation_outputs"}

// fillHistory fills schema's tables with c.history finished runs by stmts, in
// one transaction, then vacuums and analyses tables. It returns since: every
// run of the history was created before it, every run the workload creates
// after it (with half a minute to spare for an application clock behind the
// server's: DBOS stamps its rows itself). Without a history it returns the
// zero time and does nothing.
func fillHistory(ctx context.Context, c config, pool *pgxpool.Pool, schema string, stmts []historyStmt, tables []string) (since time.Time, err error) {
	if c.history <= 0 {
		return time.Time{}, nil
	}
	began := time.Now()
	q := pgx.Identifier{schema}.Sanitize()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, strings.ReplaceAll(s.sql, "{schema}", q), append([]any{c.history}, s.args...)...); err != nil {
				return fmt.Errorf("%.40s…: %w", strings.Join(strings.Fields(s.sql), " "), err)
			}
		}
		return tx.QueryRow(ctx, `SELECT now() - interval '30 seconds'`).Scan(&since)
	})
	if err != nil {
		return since, fmt.Errorf("history: %w", err)
	}
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = pgx.Identifier{schema, t}.Sanitize()
	}
	// A backend reports its inserts to the statistics up to a second after
	// its commit. Reported after the vacuum, they would count as inserted
	// since it, and autovacuum would vacuum and analyse the history again,
	// in a timed part.
	if err := waitFor(ctx, 20*time.Millisecond, time.Minute, "history: the inserts' statistics", func() (bool, error) {
		var reported bool
		err := pool.QueryRow(ctx, `SELECT n_tup_ins > 0 FROM pg_stat_user_tables WHERE relid = $1::regclass`, names[0]).Scan(&reported)
		return reported, err
	}); err != nil {
		return since, err
	}
	vacuumed := time.Now()
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) `+strings.Join(names, ", ")); err != nil {
		return since, fmt.Errorf("history: %w", err)
	}
	fmt.Fprintf(c.log, "bench: history: %d finished runs in %.1fs (vacuum and analyze %.1fs)\n",
		c.history, time.Since(began).Seconds(), time.Since(vacuumed).Seconds())
	return since, nil
}
