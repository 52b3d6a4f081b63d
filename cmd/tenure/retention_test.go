package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/store"
)

// execSQL runs sql ({schema} replaced) on pool, failing t.
func execSQL(t *testing.T, pool *pgxpool.Pool, schema, sql string) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), replaceSchemaName(sql, schema)); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// tenure retention show on a new schema: every kind kept, no drop; set
// changes only the settings given, audited, and keep unsets an age; bad
// ages and no setting at all are usage errors.
func TestCLI_RetentionShowAndSet(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(s)); err != nil {
		t.Fatal(err)
	}
	expect(t, tenure(t, s, "retention", "show"), 0, "completed  kept", "cancelled  kept", "failed     kept",
		"archive    yes", "by postgres", "every kind of run is kept: nothing is dropped", "no drop yet")
	expect(t, tenure(t, s, "--json", "retention", "show"), 0, `"completed_after_ns": null`, `"failed_after_ns": null`,
		`"archive": true`, `"drops": []`)

	expect(t, tenure(t, s, "retention", "set", "--completed", "48h", "--cancelled", "7d", "--note", "RP-3"), 0,
		"retention set (audited)", "completed  2d", "cancelled  7d", "failed     kept", "note       RP-3",
		"every 10 minutes the workers drop")
	// Only what is given changes; the note is the change's.
	expect(t, tenure(t, s, "retention", "set", "--failed", "36h", "--archive=false"), 0, "completed  2d", "cancelled  7d",
		"failed     36h", "archive    no")
	r := tenure(t, s, "--json", "retention", "show")
	expect(t, r, 0, `"completed_after_ns": 172800000000000`, `"cancelled_after_ns": 604800000000000`,
		`"failed_after_ns": 129600000000000`, `"archive": false`, `"note": ""`, `"drops": []`)
	if strings.Count(r.stdout, `"retention"`) != 1 || !strings.HasPrefix(r.stdout, "{") {
		t.Fatalf("--json printed more than one object:\n%s", r)
	}
	expect(t, tenure(t, s, "--json", "retention", "set", "--failed", "keep", "--archive"), 0, `"failed_after_ns": null`,
		`"completed_after_ns": 172800000000000`, `"archive": true`)
	expect(t, tenure(t, s, "retention", "show"), 0, "failed     kept", "archive    yes")
	if n := count(t, pool, s, `SELECT count(*) FROM {schema}.audit_log WHERE action = 'retention' AND filter->>'change' = 'config'`); n != 3 {
		t.Fatalf("%d audit rows for three changes", n)
	}

	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"set"}, "give what to change: --completed, --cancelled, --failed or --archive"},
		{[]string{"set", "--note", "why"}, "give what to change"},
		{[]string{"set", "--completed", "30m"}, "--completed 30m: an age must be at least an hour; give keep to keep these runs for good"},
		{[]string{"set", "--cancelled", "0"}, "--cancelled 0: an age must be at least an hour"},
		{[]string{"set", "--failed", "never"}, `--failed: invalid age "never": want e.g. 30d, 36h or 90m, or keep`},
		{[]string{"set", "--failed", "-3d"}, `--failed: invalid age "-3d"`},
		{[]string{"set", "--completed", "99999999999d"}, `--completed: invalid age "99999999999d": at most 106751d`},
		{[]string{"show", "--drops", "0"}, "--drops must be at least 1, got 0"},
		{[]string{"show", "extra"}, `unknown command "extra"`},
	} {
		got := tenure(t, s, append([]string{"retention"}, c.args...)...)
		if got.code != exitUsage || !strings.Contains(got.stderr, c.stderr) || got.stdout != "" {
			t.Errorf("tenure retention %s:\n%s\nwant exit 2 and %q", strings.Join(c.args, " "), got, c.stderr)
		}
	}
	// Nothing of the refused changes reached the database.
	expect(t, tenure(t, s, "retention", "show"), 0, "completed  2d", "cancelled  7d", "failed     kept")
}

// tenure retention run drops a day of old completed runs, keeping its
// failed run, prints the drop and shows it in the ledger; a second pass
// finds nothing due, a pass while another holds retention's lock says so,
// and with every age kept nothing is configured.
func TestCLI_RetentionRun(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(s)); err != nil {
		t.Fatal(err)
	}
	if err := storetest.Backdate(t.Context(), pool, s, 10); err != nil {
		t.Fatal(err)
	}
	day := time.Now().UTC().AddDate(0, 0, -5).Format("20060102")
	// Three runs completed five days ago with a step and an attempt each,
	// and one failed run of the day, kept (failures are kept for good).
	const noon = `LATERAL (SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '5 days' + interval '12 hours' AS t) AS x`
	execSQL(t, pool, s, `INSERT INTO {schema}.runs (id, workflow, input, status, epoch, created_at, started_at, finished_at)
		SELECT `+storetest.DayID(5, "c")+`, 'w', '{}', 'completed', 1, x.t, x.t, x.t + interval '1 hour'
		FROM generate_series(1, 3) AS i, `+noon)
	execSQL(t, pool, s, `INSERT INTO {schema}.steps (run_id, step, activity, status, policy, finished_at)
		SELECT id, 1, 'a', 'completed', '{}', now() FROM {schema}.runs`)
	execSQL(t, pool, s, `INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, ended_at, epoch, worker)
		SELECT id, 1, 1, 'a', 'succeeded', now(), 1, 'w1' FROM {schema}.runs`)
	execSQL(t, pool, s, `INSERT INTO {schema}.runs (id, workflow, input, status, epoch, created_at, started_at, finished_at)
		SELECT `+storetest.DayID(5, "f")+`, 'w', '{}', 'failed', 1, x.t, x.t, x.t + interval '1 hour'
		FROM generate_series(1, 1) AS i, `+noon)
	execSQL(t, pool, s, `INSERT INTO {schema}.failures (run_id, workflow, reason, step, activity, attempts, errors, rescues, error_message, failed_at)
		SELECT id, 'w', 'retries_exhausted', 1, 'a', 1, 1, 0, 'boom', finished_at FROM {schema}.runs WHERE status = 'failed'`)

	expect(t, tenure(t, s, "retention", "run"), 0, "no retention is configured: nothing is dropped")
	expect(t, tenure(t, s, "retention", "set", "--completed", "2d", "--note", "RP-3"), 0, "retention set")
	expect(t, tenure(t, s, "retention", "run", "--note", "INC-20"), 0, "carried out 1 drop",
		"PARTITION", day, "done", "postgres", "INC-20")
	if n := count(t, pool, s, `SELECT count(*) FROM {schema}.runs`); n != 1 {
		t.Fatalf("%d runs left, want the failed one", n)
	}
	if n := count(t, pool, s, `SELECT count(*) FROM {schema}.history_drops WHERE kept = 1 AND runs_deleted = 3 AND done_by = 'postgres'`); n != 1 {
		t.Fatalf("%d ledger rows of the drop", n)
	}
	expect(t, tenure(t, s, "retention", "run"), 0, "nothing was due")
	expect(t, tenure(t, s, "--json", "retention", "run"), 0, `"drops": []`, `"another_pass_running": false`)
	expect(t, tenure(t, s, "retention", "show"), 0, "completed  2d", "drops, newest first", day, "done", "INC-20")
	expect(t, tenure(t, s, "--json", "retention", "show", "--drops", "1"), 0, `"partition": "`+day+`"`, `"state": "done"`,
		`"kept": 1`, `"runs_deleted": 3`, `"by": "postgres"`, `"note": "INC-20"`)

	// Another pass holds retention's lock: this one returns at once.
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	lock := pgx.Identifier{s}.Sanitize() + ".retain_history"
	if _, err := conn.Exec(t.Context(), `SELECT pg_advisory_lock(hashtext($1))`, lock); err != nil {
		t.Fatal(err)
	}
	expect(t, tenure(t, s, "retention", "run"), 0, "another pass is running")
	expect(t, tenure(t, s, "--json", "retention", "run"), 0, `"another_pass_running": true`)
	if _, err := conn.Exec(t.Context(), `SELECT pg_advisory_unlock(hashtext($1))`, lock); err != nil {
		t.Fatal(err)
	}
	conn.Release()
	expect(t, tenure(t, s, "retention", "run"), 0, "nothing was due")
}

// A pass's NOTICEs, the drops it did by the ledger before and after it,
// and the ages as a person reads them.
func TestRetentionNotices_PassDrops_AgeText(t *testing.T) {
	busy, others := retentionNotices([]string{"retain_history: another pass is running",
		"retain_history: the lock on steps and attempts was not free within 100 ms; partition 20261201 is left to the next pass",
		"relation \"x\" already exists, skipping"})
	if !busy || len(others) != 1 || !strings.HasSuffix(others[0], "partition 20261201 is left to the next pass") ||
		strings.HasPrefix(others[0], "retain_history") {
		t.Errorf("retentionNotices = %v, %q", busy, others)
	}
	if busy, others := retentionNotices(nil); busy || others != nil {
		t.Errorf("retentionNotices(nil) = %v, %q", busy, others)
	}

	before := []record.HistoryDrop{{ID: 2, State: "detached"}, {ID: 1, State: "done"}}
	after := []record.HistoryDrop{{ID: 4, State: "done"}, {ID: 3, State: "done"}, {ID: 2, State: "done"}, {ID: 1, State: "done"}}
	var ids []int64
	for _, d := range passDrops(before, after) {
		ids = append(ids, d.ID)
	}
	if fmt.Sprint(ids) != "[4 3 2]" {
		t.Errorf("passDrops = %v, want the two new drops and the one finished", ids)
	}

	const day = 24 * time.Hour
	for d, want := range map[time.Duration]string{0: "kept", day: "1d", 30 * day: "30d", 36 * time.Hour: "36h",
		90 * time.Minute: "1h30m", time.Hour + 30*time.Second: "1h0m30s"} {
		if got := ageText(d); got != want {
			t.Errorf("ageText(%s) = %q, want %q", d, got, want)
		}
	}
}
