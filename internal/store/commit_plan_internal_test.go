package store

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
)

// scanOfTable is a plan node that reads a whole table Tenure writes per run.
var scanOfTable = regexp.MustCompile(`(Seq Scan|Bitmap Heap Scan) on (runs|steps|attempts|failures)\b`)

// TestCommit_EveryStatementFindsItsRowsByKeyWithALongHistory: with 100,000
// finished runs in the tables and few running, each statement of a commit
// reads only the rows of its batch, through their keys, in the plan
// PostgreSQL chooses for the batch's own values and in the generic plan it
// may cache for the prepared statement. The statements' cost must not grow
// with history. (With a few thousand rows the planner rightly prefers to
// read a whole table: cheaper there than 300 index lookups.)
func TestCommit_EveryStatementFindsItsRowsByKeyWithALongHistory(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	ctx := t.Context()
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	const history, held = 100_000, 300
	if _, err := pool.Exec(ctx, s.sql(fmt.Sprintf(`
		INSERT INTO {schema}.runs (id, workflow, input, status, output, started_at, finished_at)
		SELECT gen_random_uuid(), 'wf', '{}', 'completed', '1', now(), now() FROM generate_series(1, %[1]d);
		INSERT INTO {schema}.steps (run_id, step, activity, status, policy, output, finished_at)
		SELECT id, 1, 'a', 'completed', '{}', '1', now() FROM {schema}.runs;
		INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, ended_at, epoch, worker)
		SELECT id, 1, 1, 'a', 'succeeded', now(), 1, 'w' FROM {schema}.runs;
		INSERT INTO {schema}.runs (id, workflow, input, status, epoch, claimant, lease_expires_at, started_at)
		SELECT gen_random_uuid(), 'wf', '{}', 'running', 1, 'w', now() + interval '1 hour', now() FROM generate_series(1, %[2]d);
		INSERT INTO {schema}.steps (run_id, step, activity, status, policy)
		SELECT id, 1, 'a', 'running', '{}' FROM {schema}.runs WHERE status = 'running';
		INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, epoch, worker)
		SELECT id, 1, 1, 'a', 'running', 1, 'w' FROM {schema}.runs WHERE status = 'running';
		ANALYZE {schema}.runs, {schema}.steps, {schema}.attempts, {schema}.failures`, history, held))); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, s.sql(`SELECT id FROM {schema}.runs WHERE status = 'running'`))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil || len(ids) != held {
		t.Fatalf("%d running runs, %v", len(ids), err)
	}

	// One batch holds every kind of the activity path's parts, each for a
	// share of the held runs, as a busy worker's commit does.
	delay := time.Second
	var c commitBatch
	for i, id := range ids {
		w := Write{Lease: Lease{RunID: id, Epoch: 1}}
		switch i % 6 {
		case 0:
			w.StepDone, w.CompleteRun = &StepDone{Step: 1, Attempt: 1, Output: []byte(`1`)}, &RunOutput{Output: []byte(`1`)}
		case 1:
			w.StepDone = &StepDone{Step: 1, Attempt: 1, Output: []byte(`1`)}
			w.StartAttempt = &AttemptStart{Step: 2, Attempt: 1, Activity: "a", Policy: []byte(`{}`), Worker: "w"}
		case 2:
			w.EndAttempt = &AttemptEnd{Step: 1, Attempt: 1, Status: AttemptFailed, ErrorMessage: "x", Delay: &delay, DelaySource: "policy"}
			w.Release = &Release{Delay: delay}
		case 3:
			w.FailStep = &StepFailure{Step: 1, Reason: "retries_exhausted", ErrorMessage: "x", End: &AttemptEnd{ErrorMessage: "x"}}
			w.FailRun = &Failure{Reason: "retries_exhausted", Step: 1, Activity: "a", Attempts: 1, Errors: 1, ErrorMessage: "x"}
		case 4:
			w.EndAttempt = &AttemptEnd{Step: 1, Attempt: 1, Status: AttemptCancelled, ErrorMessage: "x"}
			w.CancelRun = &RunCancel{Message: "x"}
		case 5:
			w.StartAttempt = &AttemptStart{Step: 1, Attempt: 2, Activity: "a", Policy: []byte(`{}`), Worker: "w"}
		}
		c.add(i, &w)
	}
	b := &pgx.Batch{}
	c.queue(s, b)
	if len(b.QueuedQueries) < 8 {
		t.Fatalf("%d statements queued, want every kind's", len(b.QueuedQueries))
	}
	for _, q := range b.QueuedQueries {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := explainIn(t, pool, mode, q.SQL, q.Arguments)
			if m := scanOfTable.FindString(plan); m != "" {
				t.Errorf("%s in the plan (%s) of\n%s\n%s", m, mode, q.SQL, plan)
			}
		}
	}
}

// explainIn returns the plan of sql with args under plan_cache_mode mode
// (force_custom_plan: for the values; force_generic_plan: the plan a
// prepared statement may keep for any), read through PREPARE and EXPLAIN
// EXECUTE in a transaction that is rolled back. The arguments are sent as
// literals (the simple protocol), which EXECUTE takes.
func explainIn(t *testing.T, pool *pgxpool.Pool, mode, sql string, args []any) string {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	if _, err := tx.Exec(t.Context(), "SET LOCAL plan_cache_mode = "+mode); err != nil {
		t.Fatal(err)
	}
	// Prepared statements belong to the session, not the transaction.
	if _, err := tx.Exec(t.Context(), "PREPARE planned AS "+sql); err != nil {
		t.Fatalf("prepare: %v\n%s", err, sql)
	}
	marks := make([]string, len(args))
	for i := range args {
		marks[i] = fmt.Sprintf("$%d", i+1)
	}
	rows, err := tx.Query(t.Context(), "EXPLAIN EXECUTE planned("+strings.Join(marks, ", ")+")",
		append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, sql)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, sql)
	}
	if _, err := tx.Exec(t.Context(), "DEALLOCATE planned"); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}
