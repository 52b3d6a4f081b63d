package store

import (
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/pgtest"
)

// TestSchedules_TheTickersStatementsReadByIndex: a worker's check (every
// second, on every worker) and a pass's lock, on 10,000 schedules (a tenth
// due, a hundred with buffered ticks), 200,000 runs and 10,000 backfill
// requests carried out (two waiting), analyzed, read their rows through
// indexes, and are never JIT-compiled at jit_above_cost 0 (explain fails on
// JIT), as the worker sends them; so does the take of a backfill request.
func TestSchedules_TheTickersStatementsReadByIndex(t *testing.T) {
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
	for _, q := range []string{
		`INSERT INTO {schema}.runs (id, workflow, input, status, output, started_at, finished_at)
		 SELECT gen_random_uuid(), 'wf', '{}', 'completed', '1', now(), now() FROM generate_series(1, 200000)`,
		`INSERT INTO {schema}.schedules (name, spec, workflow, next_at, buffered, last_run_id)
		 SELECT 's' || i, '@every 1h', 'wf',
		        now() + CASE WHEN i % 10 = 0 THEN -interval '1 minute' ELSE interval '1 hour' END,
		        CASE WHEN i % 100 = 0 THEN 1 ELSE 0 END, CASE WHEN i % 100 = 0 THEN gen_random_uuid() END
		 FROM generate_series(1, 10000) AS i`,
		`INSERT INTO {schema}.schedule_backfills (schedule, from_at, to_at, done_at, done_by, ticks, error)
		 SELECT 's' || i, now() - interval '1 day', now(), CASE WHEN i > 2 THEN now() END, 'w', '{}',
		        CASE WHEN i = 2 THEN 'a spec this build cannot read' END
		 FROM generate_series(1, 10002) AS i`,
		`ANALYZE {schema}.runs, {schema}.schedules, {schema}.schedule_ticks, {schema}.schedule_backfills`,
	} {
		if _, err := pool.Exec(ctx, s.sql(q)); err != nil {
			t.Fatal(err)
		}
	}
	seq := func(plan string) bool {
		for _, table := range []string{"schedules", "schedule_ticks", "runs", "schedule_backfills"} {
			if strings.Contains(plan, "Seq Scan on "+table+" ") {
				return true
			}
		}
		return false
	}
	for _, retry := range []bool{false, true} {
		check := explain(t, s, planHot, s.sql(sqlScheduleCheck), []any{retry})
		if seq(check) || !strings.Contains(check, "schedules_due_idx") || !strings.Contains(check, "schedules_buffered_idx") ||
			!strings.Contains(check, "schedule_backfills_pending_idx") {
			t.Errorf("the ticker's check (retry %v) does not read the schedules' and the backfill requests' indexes:\n%s", retry, check)
		}
	}
	// Sent in the backfill's transaction, without planner settings.
	take := explainUnder(t, s, "", s.sql(sqlTakeBackfill), []any{true})
	if seq(take) || !strings.Contains(take, "schedule_backfills_pending_idx") {
		t.Errorf("the take of a backfill request does not read the waiting ones by index:\n%s", take)
	}
	lock := explain(t, s, planWrite, s.sql(sqlLockDue), []any{schedulesLimit})
	if seq(lock) || !strings.Contains(lock, "schedules_due_idx") {
		t.Errorf("a pass's lock does not read the due schedules by index:\n%s", lock)
	}
}

// schedulesLimit is the runtime's schedules per pass.
const schedulesLimit = 500

// TestSchedules_AnEmptySchemaIsCheckedWithoutError: the check answers
// false, not NULL, when there is no schedule at all.
func TestSchedules_AnEmptySchemaIsCheckedWithoutError(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	if err := Migrate(t.Context(), pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.DecideTicks(t.Context(), "w", 10, false)
	if err != nil || !p.Empty || p.Decided != 0 {
		t.Fatalf("a pass on no schedule: %+v, %v; want empty, no error", p, err)
	}
}
