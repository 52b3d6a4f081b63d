package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/internal/storetest"
)

// backdate is storetest.Backdate, failing t.
func backdate(t *testing.T, pool *pgxpool.Pool, schema string, days int) {
	t.Helper()
	if err := storetest.Backdate(t.Context(), pool, schema, days); err != nil {
		t.Fatal(err)
	}
}

// oldRuns inserts n runs created at noon (UTC) days ago, each with two
// steps of one attempt, finished an hour later with status (a failed one
// with its failure row; a running one with a live lease and its second
// step's attempt running). It returns the runs' IDs.
func oldRuns(t *testing.T, pool *pgxpool.Pool, schema string, days, n int, status, tag string) []string {
	t.Helper()
	ids := query[[]string](t, pool, schema, `WITH ins AS (
		INSERT INTO {schema}.runs (id, workflow, input, status, epoch, claimant, lease_expires_at, created_at, started_at, finished_at, run_key)
		SELECT overlay({schema}._history_bound(x.t)::text PLACING lpad(to_hex(i + abs(hashtext($3)) % 100000 * 1000 + 100000000), 12, '0') FROM 25)::uuid,
		       'w', '{}', $2, 1, CASE WHEN $2 = 'running' THEN 'w1' END, CASE WHEN $2 = 'running' THEN now() + interval '1 hour' END,
		       x.t, x.t, CASE WHEN $2 <> 'running' THEN x.t + interval '1 hour' END, $3 || '-' || i
		FROM generate_series(1, $1::int) AS i,
		     LATERAL (SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - $4 * interval '1 day' + interval '12 hours' AS t) AS x
		RETURNING id::text) SELECT array_agg(id) FROM ins`, n, status, tag, days)
	exec(t, pool, schema, `
		INSERT INTO {schema}.steps (run_id, step, activity, status, policy, finished_at)
		SELECT id::uuid, s, 'a', CASE WHEN $2 = 'running' AND s = 2 THEN 'running' WHEN $2 = 'failed' AND s = 2 THEN 'failed' ELSE 'completed' END,
		       '{}', CASE WHEN NOT ($2 = 'running' AND s = 2) THEN now() END
		FROM unnest($1::text[]) AS id, generate_series(1, 2) AS s`, ids, status)
	exec(t, pool, schema, `
		INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, ended_at, epoch, worker)
		SELECT id::uuid, s, 1, 'a', CASE WHEN $2 = 'running' AND s = 2 THEN 'running' WHEN $2 = 'failed' AND s = 2 THEN 'failed' ELSE 'succeeded' END,
		       CASE WHEN NOT ($2 = 'running' AND s = 2) THEN now() END, 1, 'w1'
		FROM unnest($1::text[]) AS id, generate_series(1, 2) AS s`, ids, status)
	if status == "failed" {
		exec(t, pool, schema, `
			INSERT INTO {schema}.failures (run_id, workflow, reason, step, activity, attempts, errors, rescues, error_message, failed_at)
			SELECT id::uuid, 'w', 'retries_exhausted', 2, 'a', 1, 1, 0, 'boom', now() - interval '5 days' FROM unnest($1::text[]) AS id`, ids)
	}
	return ids
}

// Retention drops a day's partitions once its ages let the day's runs go:
// the histories of the runs it keeps (open, failed while failures are
// kept, a child its running parent may read) move to a partition of the
// same day holding only them; the failure histories that go are archived
// first; the ledger and the audit log record each drop; a day whose runs
// all went has no partition left.
func TestRetainHistory_DropsADaysPartitionsKeepingWhatMayNotGo(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	pool, schema := st.Pool(), st.Schema()
	backdate(t, pool, schema, 10)
	day := time.Now().UTC().AddDate(0, 0, -5).Format("20060102")
	completed := oldRuns(t, pool, schema, 5, 100, "completed", "c")
	cancelled := oldRuns(t, pool, schema, 5, 2, "cancelled", "x")
	failed := oldRuns(t, pool, schema, 5, 3, "failed", "f")
	running := oldRuns(t, pool, schema, 5, 1, "running", "r")
	// A completed child of the running run: its parent may still read it.
	child := oldRuns(t, pool, schema, 5, 1, "completed", "k")
	exec(t, pool, schema, `UPDATE {schema}.runs SET parent_run_id = $1 WHERE id = $2`, running[0], child[0])
	// Runs of yesterday: too young to go.
	young := oldRuns(t, pool, schema, 1, 5, "completed", "y")

	if err := st.RetainHistory(t.Context(), "test", "nothing configured"); err != nil {
		t.Fatal(err)
	}
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.history_drops`); n != 0 {
		t.Fatalf("%d drops with no retention configured", n)
	}
	if err := st.SetRetention(t.Context(), store.HistoryRetention{Completed: 48 * time.Hour, Cancelled: 48 * time.Hour, Archive: true, Note: "test"}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetRetention(t.Context(), store.HistoryRetention{Completed: time.Minute}); err == nil {
		t.Error("a minute's retention was accepted")
	}
	if err := st.RetainHistory(t.Context(), "test", "first"); err != nil {
		t.Fatal(err)
	}
	count := func(q string, args ...any) int64 { t.Helper(); return query[int64](t, pool, schema, q, args...) }
	if n := count(`SELECT count(*) FROM {schema}.runs WHERE id = ANY ($1::uuid[])`, append(completed, cancelled...)); n != 0 {
		t.Errorf("%d completed or cancelled runs of five days ago left", n)
	}
	kept := append(append(append([]string{}, failed...), running...), child...)
	if n := count(`SELECT count(*) FROM {schema}.steps_` + day); n != int64(2*len(kept)) {
		t.Errorf("the day's new partition holds %d steps, want the kept runs' %d", n, 2*len(kept))
	}
	if n := count(`SELECT count(*) FROM {schema}.attempts WHERE run_id = ANY ($1::uuid[])`, kept); n != int64(2*len(kept)) {
		t.Errorf("kept runs have %d attempts, want %d", n, 2*len(kept))
	}
	if n := count(`SELECT count(*) FROM {schema}.steps WHERE run_id = ANY ($1::uuid[])`, young); n != 10 {
		t.Errorf("yesterday's runs have %d steps, want 10", n)
	}
	if n := count(`SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace AND relname ~ '_(k|gone)$'`, schema); n != 0 {
		t.Errorf("%d tables of the swap left over", n)
	}
	drops, err := st.HistoryDrops(t.Context(), 10)
	if err != nil || len(drops) != 1 || drops[0].State != "done" || drops[0].Partition != day || drops[0].Kept != int64(len(kept)) ||
		drops[0].RunsDeleted != 102 || drops[0].Archived != 0 {
		t.Fatalf("ledger %+v, %v; want one drop of %s, done, %d kept, 102 runs deleted", drops, err, day, len(kept))
	}
	if got := query[string](t, pool, schema, `SELECT runs || ' ' || (filter->>'partition') || ' ' || (filter->>'kept')
		FROM {schema}.audit_log WHERE action = 'retention' AND filter->>'change' = 'drop'`); got != fmt.Sprintf("102 %s %d", day, len(kept)) {
		t.Errorf("audit row %q", got)
	}

	// Failures go after an hour now: archived, then dropped.
	if err := st.SetRetention(t.Context(), store.HistoryRetention{Completed: 48 * time.Hour, Cancelled: 48 * time.Hour, Failed: time.Hour, Archive: true}); err != nil {
		t.Fatal(err)
	}
	if err := st.RetainHistory(t.Context(), "test", "failures too"); err != nil {
		t.Fatal(err)
	}
	if got := query[string](t, pool, schema, `SELECT count(*) || ' ' || sum(jsonb_array_length(steps)) || ' ' || sum(jsonb_array_length(attempts)) || ' ' ||
		sum(jsonb_array_length(failures)) FROM {schema}.history_archive WHERE run_id = ANY ($1::uuid[])`, failed); got != "3 6 6 3" {
		t.Errorf("archive (runs, steps, attempts, failures) = %s, want 3 6 6 3", got)
	}
	if n := count(`SELECT count(*) FROM {schema}.failures`); n != 0 {
		t.Errorf("%d failure rows left", n)
	}
	if n := count(`SELECT count(*) FROM {schema}.steps WHERE run_id = ANY ($1::uuid[])`, append(running, child...)); n != 4 {
		t.Errorf("the running run and its child have %d steps, want 4", n)
	}

	// The run ends, and so does its parent's hold on the child: the day goes whole.
	exec(t, pool, schema, `UPDATE {schema}.runs SET status = 'completed', finished_at = now() - interval '3 days', claimant = NULL, lease_expires_at = NULL
		WHERE id = $1`, running[0])
	if err := st.RetainHistory(t.Context(), "test", "the rest"); err != nil {
		t.Fatal(err)
	}
	if n := count(`SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace AND relname IN ('steps_`+day+`', 'attempts_`+day+`')`, schema); n != 0 {
		t.Errorf("the day's partitions are still there, with nothing kept")
	}
	if n := count(`SELECT count(*) FROM {schema}.runs WHERE id = ANY ($1::uuid[])`, append(running, child...)); n != 0 {
		t.Errorf("%d runs of the day left", n)
	}
	if n := count(`SELECT count(*) FROM {schema}.runs`); n != int64(len(young)) {
		t.Errorf("%d runs left, want yesterday's %d", n, len(young))
	}
}

// A retention pass killed in the middle of a drop (its backend terminated
// once the day's partitions are detached, while it deletes the runs that
// went with them) leaves a consistent schema: the ledger says 'detached',
// the day's histories are gone whole, the tables it detached are there or
// dropped. The next pass finishes the job: one audit row, every run of the
// day deleted, no table left over.
func TestRetainHistory_AKilledPassIsFinishedByTheNext(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	pool, schema := st.Pool(), st.Schema()
	backdate(t, pool, schema, 10)
	day := time.Now().UTC().AddDate(0, 0, -5).Format("20060102")
	const runs = 60_000 // six batches of deletions: seconds to kill it in
	exec(t, pool, schema, `INSERT INTO {schema}.runs (id, workflow, input, status, epoch, created_at, finished_at)
		SELECT `+storetest.DayID(5, "done")+`, 'w', '{}', 'completed', 1, now() - interval '5 days', now() - interval '5 days'
		FROM generate_series(1, $1::int) AS i`, runs)
	exec(t, pool, schema, `INSERT INTO {schema}.steps (run_id, step, activity, status, policy, finished_at)
		SELECT id, 1, 'a', 'completed', '{}', now() FROM {schema}.runs`)
	exec(t, pool, schema, `INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, ended_at, epoch, worker)
		SELECT id, 1, 1, 'a', 'succeeded', now(), 1, 'w' FROM {schema}.runs`)
	if err := st.SetRetention(t.Context(), store.HistoryRetention{Completed: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}

	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	pid := conn.Conn().PgConn().PID()
	passed := make(chan error, 1)
	go func() {
		defer conn.Release()
		_, err := conn.Exec(t.Context(), replaceSchema(`CALL {schema}.retain_history('killed')`, schema))
		passed <- err
	}()
	for state := ""; state != "detached"; {
		select {
		case err := <-passed:
			t.Fatalf("the pass ended (%v) before it could be killed mid-drop", err)
		default:
		}
		_ = pool.QueryRow(t.Context(), replaceSchema(`SELECT coalesce(max(state), '') FROM {schema}.history_drops`, schema)).Scan(&state)
		if state == "done" {
			t.Fatal("the drop was done before it could be killed: make the day bigger")
		}
		time.Sleep(2 * time.Millisecond)
	}
	exec(t, pool, schema, `SELECT pg_terminate_backend($1)`, pid)
	if err := <-passed; err == nil {
		t.Fatal("the killed pass returned no error")
	}
	// Its backend gone, with its session's advisory lock (a pass that
	// finds the lock held returns at once, as while another runs).
	for query[bool](t, pool, schema, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, pid) {
		time.Sleep(5 * time.Millisecond)
	}
	// Consistent: no attached partition of the day holds a step; the
	// ledger has the drop open.
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.steps WHERE run_id >= {schema}._history_bound(now() - interval '6 days')
		AND run_id < {schema}._history_bound(now() - interval '3 days')`); n != 0 {
		t.Errorf("%d steps of the day still attached after the kill", n)
	}
	if got := query[string](t, pool, schema, `SELECT string_agg(state, ',') FROM {schema}.history_drops`); got != "detached" {
		t.Errorf("ledger after the kill: %q, want detached", got)
	}
	left := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.runs`)
	t.Logf("killed with %d of %d runs left to delete", left, runs)

	if err := st.RetainHistory(t.Context(), "next", ""); err != nil {
		t.Fatal(err)
	}
	drops, err := st.HistoryDrops(t.Context(), 10)
	if err != nil || len(drops) != 1 || drops[0].State != "done" || drops[0].RunsDeleted != runs || drops[0].Partition != day {
		t.Fatalf("ledger %+v, %v; want one drop of %s, done, %d runs", drops, err, day, runs)
	}
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.runs`); n != 0 {
		t.Errorf("%d runs left", n)
	}
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace AND relname ~ '^(steps|attempts)_`+day+`'`, schema); n != 0 {
		t.Errorf("%d tables of the day left", n)
	}
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.audit_log WHERE action = 'retention' AND filter->>'change' = 'drop'`); n != 1 {
		t.Errorf("%d audit rows of drops, want 1", n)
	}
}

// A pass that fails midway (here: its archive table renamed away) gives
// its session's lock back: the next pass, on whichever pooled connection,
// does the work instead of finding the lock held for ever.
func TestRetainHistory_AFailedPassHoldsOffNoLaterPass(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	pool, schema := st.Pool(), st.Schema()
	backdate(t, pool, schema, 10)
	oldRuns(t, pool, schema, 5, 3, "failed", "f")
	if err := st.SetRetention(t.Context(), store.HistoryRetention{Failed: time.Hour, Archive: true}); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, schema, `ALTER TABLE {schema}.history_archive RENAME TO history_archive_away`)
	if err := st.RetainHistory(t.Context(), "test", ""); err == nil {
		t.Fatal("the pass without its archive table returned no error")
	}
	// No session holds retention's lock any more.
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND ((classid::bigint << 32) | objid::bigint) = hashtext($1)::bigint AND granted`, pgx.Identifier{schema}.Sanitize()+".retain_history"); n != 0 {
		t.Fatalf("%d sessions still hold retention's lock after the failed pass", n)
	}
	exec(t, pool, schema, `ALTER TABLE {schema}.history_archive_away RENAME TO history_archive`)
	for range 3 { // on whichever connections the pool hands out
		if err := st.RetainHistory(t.Context(), "test", ""); err != nil {
			t.Fatal(err)
		}
	}
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.history_drops WHERE state = 'done'`); n != 1 {
		t.Fatalf("%d drops done after the failed pass, want 1", n)
	}
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.history_archive`); n != 3 {
		t.Errorf("%d runs archived, want 3", n)
	}
}

// Retention merges the old partitions it keeps (failures are kept unless
// configured, so each old day leaves one): a pass merges one adjacent
// pair, oldest first, whose newer one is at least half the older one's
// size, so that the old partitions come down to about the logarithm of
// their number. Every kept history is there after, readable through steps
// and attempts, an open run's worker still writes its next attempt, and
// each merge has its audit row.
func TestRetainHistory_MergesTheOldPartitionsItKeeps(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	pool, schema := st.Pool(), st.Schema()
	backdate(t, pool, schema, 20)
	var failed []string
	for day := 3; day <= 14; day++ {
		failed = append(failed, oldRuns(t, pool, schema, day, 20, "failed", fmt.Sprintf("f%d", day))...)
		oldRuns(t, pool, schema, day, 50, "completed", fmt.Sprintf("c%d", day))
	}
	open := oldRuns(t, pool, schema, 10, 5, "running", "r")
	if err := st.SetRetention(t.Context(), store.HistoryRetention{Completed: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	oldParts := func() int64 {
		return query[int64](t, pool, schema, `SELECT count(*) FROM {schema}._history_old_partitions(interval '48 hours')`)
	}
	before := oldParts()
	merges := func() int64 {
		return query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.audit_log WHERE action = 'retention' AND filter->>'change' = 'merge'`)
	}
	for pass := 0; ; pass++ {
		n := merges()
		if err := st.RetainHistory(t.Context(), "test", ""); err != nil {
			t.Fatal(err)
		}
		if merges() == n {
			break
		}
		if pass == 40 {
			t.Fatalf("still merging after %d passes: %d old partitions", pass, oldParts())
		}
	}
	after := oldParts()
	t.Logf("old partitions: %d before, %d after %d merges", before, after, merges())
	if before < 18 || after > 6 {
		t.Errorf("old partitions %d before, %d after: want 18 or more merged to 6 or fewer", before, after)
	}
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.steps WHERE run_id = ANY($1::uuid[])`, failed); n != int64(2*len(failed)) {
		t.Errorf("%d steps of the %d failed runs kept, want %d", n, len(failed), 2*len(failed))
	}
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.attempts WHERE run_id = ANY($1::uuid[])`, failed); n != int64(2*len(failed)) {
		t.Errorf("%d attempts of the %d failed runs kept, want %d", n, len(failed), 2*len(failed))
	}
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.runs WHERE status = 'completed'`); n != 0 {
		t.Errorf("%d completed runs left, want none", n)
	}
	// The open runs' workers write on.
	exec(t, pool, schema, `INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, epoch, worker)
		SELECT id::uuid, 2, 2, 'a', 'running', 1, 'w1' FROM unnest($1::text[]) AS id`, open)
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.attempts a JOIN pg_class c ON c.oid = a.tableoid
		WHERE a.run_id = ANY($1::uuid[]) AND c.relname NOT LIKE '%default'`, open); n != 15 {
		t.Errorf("%d attempts of the 5 open runs in their partitions, want 15", n)
	}
	// Each merge says what it merged; the merged partitions have the
	// statistics setting.
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.audit_log WHERE action = 'retention' AND filter->>'change' = 'merge'
		AND jsonb_array_length(filter->'partitions') = 2 AND (filter->>'rows')::bigint >= 0`); n != merges() {
		t.Errorf("%d well-formed merge audit rows of %d", n, merges())
	}
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM pg_inherits i JOIN pg_attribute a ON a.attrelid = i.inhrelid AND a.attname = 'run_id'
		WHERE i.inhparent IN ('{schema}.steps'::regclass, '{schema}.attempts'::regclass) AND NOT coalesce(a.attoptions @> '{n_distinct=-0.5}', false)`); n != 0 {
		t.Errorf("%d partitions without run_id's distinct count after the merges", n)
	}
}

// When few of a partition's runs go (under a tenth of those it keeps), a
// pass deletes their rows where they are: the partition stays the same
// table, the other runs' histories with it, and the drop is in the ledger
// and the audit log as any other.
func TestRetainHistory_FewRunsGoingAreDeletedInPlace(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	pool, schema := st.Pool(), st.Schema()
	backdate(t, pool, schema, 10)
	kept := oldRuns(t, pool, schema, 5, 40, "running", "r")
	gone := oldRuns(t, pool, schema, 5, 2, "completed", "c")
	day := time.Now().UTC().AddDate(0, 0, -5).Format("20060102")
	oid := func() int64 {
		return query[int64](t, pool, schema, `SELECT to_regclass($1)::oid::bigint`, pgx.Identifier{schema, "steps_" + day}.Sanitize())
	}
	before := oid()
	if err := st.SetRetention(t.Context(), store.HistoryRetention{Completed: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := st.RetainHistory(t.Context(), "test", ""); err != nil {
		t.Fatal(err)
	}
	if after := oid(); after != before {
		t.Errorf("steps_%s is table %d after the pass, was %d: swapped, want the rows deleted in place", day, after, before)
	}
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.steps WHERE run_id = ANY($1::uuid[])`, gone); n != 0 {
		t.Errorf("%d steps of the 2 runs that went", n)
	}
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.attempts WHERE run_id = ANY($1::uuid[])`, kept); n != 80 {
		t.Errorf("%d attempts of the 40 kept runs, want 80", n)
	}
	drops, err := st.HistoryDrops(t.Context(), 10)
	if err != nil || len(drops) != 1 || drops[0].State != "done" || drops[0].RunsDeleted != 2 || drops[0].Kept != 40 {
		t.Fatalf("ledger %+v, %v; want one drop, done, 2 runs deleted, 40 kept", drops, err)
	}
}
