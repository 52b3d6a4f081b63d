package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
)

// migrateTo brings schema to version to, as Migrate did when the binary
// knew no later migration: each migration's SQL and its schema_version row,
// in one transaction.
func migrateTo(t testing.TB, pool *pgxpool.Pool, schema string, to int) {
	t.Helper()
	ident := pgx.Identifier{schema}.Sanitize()
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), `CREATE SCHEMA IF NOT EXISTS `+ident+`;
			CREATE TABLE `+ident+`.schema_version (
			    version    integer     PRIMARY KEY,
			    name       text        NOT NULL,
			    applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		for _, m := range store.Migrations() {
			if m.Version > to {
				break
			}
			if _, err := tx.Exec(t.Context(), strings.ReplaceAll(m.SQL, "{schema}", ident)); err != nil {
				return err
			}
			if _, err := tx.Exec(t.Context(), `INSERT INTO `+ident+`.schema_version (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("migrate %s to version %d: %v", schema, to, err)
	}
}

// exec runs statements with {schema} replaced by schema's quoted name.
func exec(t testing.TB, pool *pgxpool.Pool, schema, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), strings.ReplaceAll(sql, "{schema}", pgx.Identifier{schema}.Sanitize()), args...); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
}

// query reads one value with {schema} replaced.
func query[T any](t testing.TB, pool *pgxpool.Pool, schema, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := pool.QueryRow(t.Context(), strings.ReplaceAll(sql, "{schema}", pgx.Identifier{schema}.Sanitize()), args...).Scan(&v); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
	return v
}

// Migration 13 regroups the open failures by the new fingerprint rule
// without rewriting the failures table (whose rewrite held every worker up)
// and without dropping the column (which a view of the user's would
// forbid); from then on a trigger keeps the column, for new rows and for a
// changed message. A requeued failure keeps the fingerprint it had: it is
// history, outside the groups.
func TestMigration13_RegroupsOpenFailuresWithoutARewrite(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	migrateTo(t, pool, schema, 12)
	// 10,000 failed runs, each with 10 requeued failure rows before its open
	// one: 110,000 rows, of which 10,000 are open.
	const runs, history = 10_000, 10
	exec(t, pool, schema, `
		INSERT INTO {schema}.runs (id, workflow, queue, input, status, epoch, finished_at)
		SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid, 'orders', 'default', '{}', 'failed', 1, now()
		FROM generate_series(1, $1) i`, runs)
	exec(t, pool, schema, `
		INSERT INTO {schema}.failures (run_id, workflow, reason, step, activity, attempts, errors, error_message, failed_at, requeued_at)
		SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid, 'orders', 'retries_exhausted', 1, 'charge', 3, 3,
		       CASE WHEN i % 2 = 0 THEN format('POST /charges/%s: 503 Service Unavailable', i)
		            ELSE format('received %s bytes from 10.0.0.%s', 100 + i % 400, i % 7) END,
		       now() - (h + 1) * interval '1 hour', CASE WHEN h < $2 THEN now() - h * interval '1 hour' END
		FROM generate_series(1, $1) i, generate_series(0, $2) h`, runs, history)
	exec(t, pool, schema, `CREATE VIEW {schema}.my_groups AS
		SELECT fingerprint, count(*) AS n FROM {schema}.failures WHERE requeued_at IS NULL GROUP BY fingerprint`)
	exec(t, pool, schema, `VACUUM ANALYZE {schema}.failures`)
	const oldRule = "POST /charges/<n>: <n> Service Unavailable" // version 7's: every number blanked
	if got := query[string](t, pool, schema, `SELECT fingerprint FROM {schema}.failures WHERE error_message = 'POST /charges/42: 503 Service Unavailable' LIMIT 1`); got != oldRule {
		t.Fatalf("before the migration the fingerprint is %q, want version 7's %q", got, oldRule)
	}
	file := query[uint32](t, pool, schema, `SELECT relfilenode FROM pg_catalog.pg_class WHERE oid = '{schema}.failures'::regclass`)

	begin := time.Now()
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	t.Logf("migrations 13 and 14 on %d failure rows (%d open): %s", runs*(history+1), runs, time.Since(begin).Round(time.Millisecond))

	if got := query[uint32](t, pool, schema, `SELECT relfilenode FROM pg_catalog.pg_class WHERE oid = '{schema}.failures'::regclass`); got != file {
		t.Errorf("the failures table was rewritten (relfilenode %d, was %d)", got, file)
	}
	const newRule = "POST /charges/<n>: 503 Service Unavailable"
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.failures
		WHERE requeued_at IS NULL AND fingerprint IS DISTINCT FROM {schema}.failure_fingerprint(error_message)`); n != 0 {
		t.Errorf("%d open failures are not regrouped", n)
	}
	if n := query[int64](t, pool, schema, `SELECT n FROM {schema}.my_groups WHERE fingerprint = $1`, newRule); n != runs/2 {
		t.Errorf("the user's view counts %d open failures in the new group, want %d", n, runs/2)
	}
	// Requeued rows are history: they keep the fingerprint they had.
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.failures WHERE requeued_at IS NOT NULL AND fingerprint = $1`, newRule); n != 0 {
		t.Errorf("%d requeued failures were regrouped: the migration wrote history", n)
	}

	// New rows, and a changed message, get the new rule from the trigger.
	id := query[int64](t, pool, schema, `
		WITH r AS (INSERT INTO {schema}.runs (id, workflow, queue, input, status, epoch)
		           VALUES ('00000000-0000-4000-9000-000000000001', 'orders', 'default', '{}', 'failed', 1) RETURNING id)
		INSERT INTO {schema}.failures (run_id, workflow, reason, error_message, fingerprint)
		SELECT r.id, 'orders', 'workflow_error', 'got 150 rows, status 503', 'set by hand' FROM r
		RETURNING id`)
	if got := query[string](t, pool, schema, `SELECT fingerprint FROM {schema}.failures WHERE id = $1`, id); got != "got <n> rows, status 503" {
		t.Errorf("a new row's fingerprint is %q", got)
	}
	exec(t, pool, schema, `UPDATE {schema}.failures SET error_message = 'HTTP/2 502 Bad Gateway' WHERE id = $1`, id)
	if got := query[string](t, pool, schema, `SELECT fingerprint FROM {schema}.failures WHERE id = $1`, id); got != "HTTP/<n> 502 Bad Gateway" {
		t.Errorf("after its message changed, a row's fingerprint is %q", got)
	}
	exec(t, pool, schema, `UPDATE {schema}.failures SET error_message = NULL WHERE id = $1`, id)
	if got := query[*string](t, pool, schema, `SELECT fingerprint FROM {schema}.failures WHERE id = $1`, id); got != nil {
		t.Errorf("a row without a message has the fingerprint %q", *got)
	}
}

// Migration 13 counts rescues in the failure rows written before it as the
// runtime now does: a step that gave up on its lost attempt rescued one
// fewer than it lost. The other rows are left as they were.
func TestMigration13_CountsTheRescuesMadeInOldFailureRows(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	migrateTo(t, pool, schema, 12)
	// Each row as the runtime of schema 12 wrote it, and its rescues after.
	rows := []struct {
		reason      string
		step        int // 0: none
		rescues     int
		requeued    bool
		wantRescues int
	}{
		{"indeterminate", 1, 1, false, 0},     // its only attempt lost: nothing rescued it
		{"indeterminate", 2, 2, true, 1},      // lost, rescued, lost again: history too
		{"rescues_exhausted", 1, 3, false, 2}, // MaxRescues 2: three lost, two rescues
		{"rescues_exhausted", 0, 0, false, 0}, // the workflow reclaimed too often, outside its steps
		{"retries_exhausted", 1, 2, false, 2}, // two lost attempts, both rescued, then errors
		{"indeterminate", 1, 0, false, 0},     // nothing to take
	}
	for i, r := range rows {
		exec(t, pool, schema, `
			WITH r AS (INSERT INTO {schema}.runs (id, workflow, queue, input, status, epoch)
			           VALUES (gen_random_uuid(), 'payouts', 'default', '{}', 'failed', 1) RETURNING id)
			INSERT INTO {schema}.failures (id, run_id, workflow, reason, step, activity, attempts, rescues, requeued_at)
			SELECT $1, r.id, 'payouts', $2, nullif($3, 0), 'pay', $4, $4, CASE WHEN $5 THEN now() END FROM r`,
			i+1, r.reason, r.step, r.rescues, r.requeued)
	}
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		if got := query[int](t, pool, schema, `SELECT rescues FROM {schema}.failures WHERE id = $1`, i+1); got != r.wantRescues {
			t.Errorf("a %s row with step %d and %d rescues has %d after the migration, want %d", r.reason, r.step, r.rescues, got, r.wantRescues)
		}
	}
}
