package store_test

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
)

// Migration 22 turns steps and attempts of an existing install into
// partitioned tables: every row is kept, the rows of an ID past the first
// partition's bound (not a UUIDv7) go to the DEFAULT partition, the views
// over the tables read the partitioned ones, and what was granted on the
// tables and the views is granted on what replaced them.
func TestMigration22_PartitionsStepsAndAttemptsKeepingRowsViewsAndGrants(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	migrateTo(t, pool, schema, 21)
	// 1,000 runs of UUIDv7 IDs of the last hour, each with two steps of two
	// attempts; one run of a random (version 4) ID high in the UUID space.
	exec(t, pool, schema, `
		INSERT INTO {schema}.runs (id, workflow, input, status, epoch, finished_at)
		SELECT CASE WHEN i = 0 THEN 'f0000000-0000-4000-8000-000000000000'::uuid ELSE {schema}._uuid_v7() END,
		       'orders', '{}', 'completed', 1, now()
		FROM generate_series(0, 1000) AS i`)
	exec(t, pool, schema, `
		INSERT INTO {schema}.steps (run_id, step, activity, status, policy, finished_at)
		SELECT r.id, s, 'charge', 'completed', '{}', now() FROM {schema}.runs r, generate_series(1, 2) AS s`)
	exec(t, pool, schema, `
		INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, ended_at, epoch, worker, error_message)
		SELECT s.run_id, s.step, a, 'charge', CASE a WHEN 1 THEN 'failed' ELSE 'succeeded' END, now(), 1, 'w', 'boom'
		FROM {schema}.steps s, generate_series(1, 2) AS a`)
	exec(t, pool, schema, `GRANT SELECT ON {schema}.attempts, {schema}.attempt_timeline TO PUBLIC`)

	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}

	for _, tbl := range []string{"steps", "attempts"} {
		if kind := query[string](t, pool, schema, `SELECT relkind::text FROM pg_class WHERE oid = '{schema}.`+tbl+`'::regclass`); kind != "p" {
			t.Errorf("%s: relkind %q, want a partitioned table (p)", tbl, kind)
		}
	}
	counts := query[[]int64](t, pool, schema, `SELECT ARRAY[
		(SELECT count(*) FROM {schema}.steps), (SELECT count(*) FROM {schema}.attempts),
		(SELECT count(*) FROM {schema}.steps_0), (SELECT count(*) FROM {schema}.attempts_0),
		(SELECT count(*) FROM {schema}.steps_default), (SELECT count(*) FROM {schema}.attempts_default)]`)
	if want := []int64{2002, 4004, 2000, 4000, 2, 4}; !slices.Equal(counts, want) {
		t.Errorf("rows (steps, attempts; in _0; in _default) = %v, want %v", counts, want)
	}
	// The views read the partitioned tables: every attempt is in the timeline.
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.attempt_timeline`); n != 4004 {
		t.Errorf("attempt_timeline has %d rows, want 4004", n)
	}
	for _, rel := range []string{"attempts", "attempt_timeline"} {
		if !query[bool](t, pool, schema, `SELECT EXISTS (SELECT FROM pg_class c, aclexplode(c.relacl) AS x
			WHERE c.oid = '{schema}.`+rel+`'::regclass AND x.grantee = 0 AND x.privilege_type = 'SELECT')`) {
			t.Errorf("%s: the SELECT granted to PUBLIC before the migration is gone", rel)
		}
	}
	// Tomorrow's and the day after's partitions exist; the first one ends
	// where tomorrow's begins.
	parts := query[[]string](t, pool, schema, `SELECT array_agg(c.relname::text ORDER BY c.relname)
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = '{schema}.steps'::regclass`)
	day := time.Now().UTC()
	want := []string{"steps_0", "steps_" + day.AddDate(0, 0, 1).Format("20060102"), "steps_" + day.AddDate(0, 0, 2).Format("20060102"), "steps_default"}
	if !slices.Equal(parts, want) {
		t.Errorf("partitions of steps %v, want %v", parts, want)
	}
	// Deleting a run's steps deletes their attempts, through the trigger
	// made again on the partitioned table.
	exec(t, pool, schema, `DELETE FROM {schema}.steps WHERE run_id = 'f0000000-0000-4000-8000-000000000000'`)
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.attempts_default`); n != 0 {
		t.Errorf("%d attempts left of the deleted steps", n)
	}
}

// ensure_history_partitions makes the days' partitions that are missing,
// and only those; rows of a day already in the DEFAULT partition leave that
// day to it, with a warning; a run's rows land in the partition of its ID's
// day.
func TestEnsureHistoryPartitions_MakesWhatIsMissingAndRoutesRowsByDay(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	pool, schema := st.Pool(), st.Schema()
	if made, err := st.EnsureHistoryPartitions(t.Context()); err != nil || len(made) != 0 {
		t.Fatalf("after the migration made them: made %v, %v; want nothing", made, err)
	}
	// A run of four days from now, before its partition exists: it goes to
	// the DEFAULT partition, and that day gets no partition.
	exec(t, pool, schema, `INSERT INTO {schema}.runs (id, workflow, input) VALUES ({schema}._history_bound(now() + interval '4 days'), 'w', '{}')`)
	exec(t, pool, schema, `INSERT INTO {schema}.steps (run_id, step, activity, status, policy)
		VALUES ({schema}._history_bound(now() + interval '4 days'), 1, 'a', 'running', '{}')`)
	if got := query[string](t, pool, schema, `SELECT tableoid::regclass::text FROM {schema}.steps`); !strings.HasSuffix(got, "steps_default") {
		t.Fatalf("a step of four days ahead is in %s, want steps_default", got)
	}
	made := query[[]string](t, pool, schema, `SELECT coalesce(array_agg(n ORDER BY n), '{}') FROM {schema}.ensure_history_partitions(5) AS n`)
	day := time.Now().UTC()
	var want []string
	for _, d := range []int{3, 5} { // 4 is left to the DEFAULT partition
		want = append(want, "attempts_"+day.AddDate(0, 0, d).Format("20060102"), "steps_"+day.AddDate(0, 0, d).Format("20060102"))
	}
	slices.Sort(want)
	if !slices.Equal(made, want) {
		t.Errorf("made %v, want %v", made, want)
	}
	// A run of three days ahead lands in its day's partition.
	id := query[string](t, pool, schema, `SELECT {schema}._history_bound(now() + interval '3 days')::text`)
	exec(t, pool, schema, `INSERT INTO {schema}.steps (run_id, step, activity, status, policy) VALUES ($1, 1, 'a', 'running', '{}')`, id)
	if got := query[string](t, pool, schema, `SELECT tableoid::regclass::text FROM {schema}.steps WHERE run_id = $1`, id); !strings.HasSuffix(got, "steps_"+day.AddDate(0, 0, 3).Format("20060102")) {
		t.Errorf("a step of three days ahead is in %s", got)
	}
	if _, err := pool.Exec(t.Context(), `SELECT `+pgx.Identifier{schema}.Sanitize()+`.ensure_history_partitions(-1)`); err == nil || !strings.Contains(err.Error(), "want 0 to 366 days") {
		t.Errorf("ensure_history_partitions(-1): %v, want a clear refusal", err)
	}
	// docs/operations.md's watch of the DEFAULT partitions sees the step of
	// four days ahead.
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var watch, set string
	for _, b := range sqlBlock.FindAllStringSubmatch(string(doc), -1) {
		if strings.Contains(b[1], "steps_default") {
			watch = b[1]
		}
		if strings.Contains(b[1], "set_history_retention(") {
			set = b[1]
		}
	}
	if set == "" {
		t.Fatal("no setting of the retention in docs/operations.md")
	}
	exec(t, pool, schema, strings.ReplaceAll(set, "tenure.", "{schema}."))
	if r, err := st.RetentionConfigured(t.Context()); err != nil || r.Failed != 180*24*time.Hour || r.Note != "RP-3" {
		t.Errorf("docs/operations.md's retention: %+v, %v", r, err)
	}
	if watch == "" {
		t.Fatal("no query of the DEFAULT partitions in docs/operations.md")
	}
	var steps, attempts int64
	if err := pool.QueryRow(t.Context(), strings.ReplaceAll(watch, "tenure.", pgx.Identifier{schema}.Sanitize()+".")).Scan(&steps, &attempts); err != nil || steps != 1 || attempts != 0 {
		t.Errorf("docs/operations.md's query of the DEFAULT partitions: %d steps, %d attempts, %v; want 1, 0", steps, attempts, err)
	}
}

// With a retention configured, the partitions made are a sixth of its
// shortest age long (whole days), so that about eight stay attached: after
// 30 days' retention, five-day partitions, aligned on multiples of five days
// from 1970-01-01, the first starting where the one-day partitions end.
func TestEnsureHistoryPartitions_SpansASixthOfTheRetention(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	pool, schema := st.Pool(), st.Schema()
	if err := st.SetRetention(t.Context(), store.HistoryRetention{Completed: 30 * 24 * time.Hour, Failed: 90 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	made, err := pool.Query(t.Context(), `SELECT * FROM `+pgx.Identifier{schema}.Sanitize()+`.ensure_history_partitions(12)`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(made, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	// The ranges of steps' partitions, in days from 1970-01-01 (their
	// bounds' days), from the day after tomorrow's end on.
	ranges := query[[]string](t, pool, schema, `SELECT array_agg(({schema}._history_day(lo) - date '1970-01-01') || '-' || ({schema}._history_day(hi) - date '1970-01-01') ORDER BY lo)
		FROM (SELECT trim(substring(b FROM 'FROM \(([^)]*)\)'), '''')::uuid AS lo, trim(substring(b FROM 'TO \(([^)]*)\)'), '''')::uuid AS hi
		      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid, LATERAL pg_get_expr(c.relpartbound, c.oid) AS b
		      WHERE i.inhparent = '{schema}.steps'::regclass AND b NOT LIKE '%MINVALUE%' AND b <> 'DEFAULT') AS p`)
	today := int(time.Now().UTC().Unix() / 86400)
	want := []string{fmt.Sprintf("%d-%d", today+1, today+2), fmt.Sprintf("%d-%d", today+2, today+3)}
	next := today + 3
	if end := (next/5 + 1) * 5; end > next {
		want = append(want, fmt.Sprintf("%d-%d", next, (next/5)*5+5))
		next = (next/5)*5 + 5
	}
	for ; next <= today+12; next += 5 {
		want = append(want, fmt.Sprintf("%d-%d", next, next+5))
	}
	if strings.Join(ranges, " ") != strings.Join(want, " ") {
		t.Errorf("steps' partitions (days since 1970) %v, want %v (made %v)", ranges, want, names)
	}
}

// Migration 24 fixes run_id's distinct count, two rows a run, on every
// partition of steps and attempts and on the two tables, so that the
// planner's estimate of one run's rows does not grow with a partition's
// sample-based count (docs/benchmarks.md, H); the partitions made later
// get it from ensure_history_partitions, and a count set by hand stays.
func TestHistoryStats_EveryPartitionHasRunIDsDistinctCount(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	pool, schema := st.Pool(), st.Schema()
	without := func() []string {
		return query[[]string](t, pool, schema, `SELECT coalesce(array_agg(i.inhrelid::regclass::text ORDER BY 1), '{}')
			FROM pg_inherits i JOIN pg_attribute a ON a.attrelid = i.inhrelid AND a.attname = 'run_id'
			WHERE i.inhparent IN ('{schema}.steps'::regclass, '{schema}.attempts'::regclass)
			  AND NOT coalesce(a.attoptions @> '{n_distinct=-0.5}', false)`)
	}
	if got := without(); len(got) != 0 {
		t.Fatalf("partitions without the distinct count after the migrations: %v", got)
	}
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM pg_attribute WHERE attrelid IN ('{schema}.steps'::regclass, '{schema}.attempts'::regclass)
		AND attname = 'run_id' AND attoptions @> '{n_distinct_inherited=-0.5}'`); n != 2 {
		t.Errorf("%d of steps and attempts have run_id's inherited distinct count, want 2", n)
	}
	exec(t, pool, schema, `ALTER TABLE {schema}.steps_0 ALTER COLUMN run_id SET (n_distinct = 1000)`)
	made, err := pool.Query(t.Context(), `SELECT * FROM `+pgx.Identifier{schema}.Sanitize()+`.ensure_history_partitions(9)`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(made, pgx.RowTo[string])
	if err != nil || len(names) != 14 {
		t.Fatalf("made %v, %v; want 7 days of steps and attempts", names, err)
	}
	if got := without(); len(got) != 1 || !strings.HasSuffix(got[0], "steps_0") {
		t.Errorf("partitions without the count after 7 more days: %v, want steps_0 alone (set by hand)", got)
	}
	if got := query[string](t, pool, schema, `SELECT array_to_string(attoptions, ',') FROM pg_attribute WHERE attrelid = '{schema}.steps_0'::regclass AND attname = 'run_id'`); !strings.Contains(got, "n_distinct=1000") {
		t.Errorf("steps_0's run_id options %q: the count set by hand was changed", got)
	}
	// The analysed estimate: a run of 50 steps (of 100 runs) is still read
	// as two rows a run.
	exec(t, pool, schema, `INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, ended_at, epoch, worker)
		SELECT {schema}._uuid_v7(), s, 1, 'a', 'succeeded', now(), 1, 'w' FROM generate_series(1, 100), generate_series(1, 50) AS s`)
	part := query[string](t, pool, schema, `SELECT c.relname::text FROM {schema}.attempts a JOIN pg_class c ON c.oid = a.tableoid LIMIT 1`)
	exec(t, pool, schema, `ANALYZE {schema}.`+part)
	if got := query[float64](t, pool, schema, `SELECT n_distinct FROM pg_stats WHERE schemaname = $1 AND tablename = $2 AND attname = 'run_id'`, schema, part); got != -0.5 {
		t.Errorf("%s's analysed distinct count of run_id %v, want -0.5", part, got)
	}
}

// Migration 27 makes the partitions of steps with the policy as the row's
// last column, so that the update ending a step logs the columns it
// changes and not the policy again: the partitions made from then on, and
// those still empty at the migration; a partition that holds rows keeps
// its layout, its rows not rewritten. Retention's swaps and merges copy
// between partitions of both layouts by column name, every value kept.
func TestMigration27_NewStepsPartitionsKeepThePolicyLastAndCopiesKeepEveryValue(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	migrateTo(t, pool, schema, 26)
	exec(t, pool, schema, `INSERT INTO {schema}.runs (id, workflow, input, status, epoch) VALUES ({schema}._uuid_v7(), 'orders', '{}', 'queued', 1)`)
	exec(t, pool, schema, `INSERT INTO {schema}.steps (run_id, step, activity, status, policy, input_hash)
		SELECT id, 1, 'charge', 'running', '{"max_attempts": 3}', 42 FROM {schema}.runs`)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	// Each partition of steps and its last column.
	layouts := func() map[string]string {
		rows := query[[][]string](t, pool, schema, `SELECT coalesce(array_agg(ARRAY[c.relname::text, (SELECT a.attname::text FROM pg_attribute a
			WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum DESC LIMIT 1)]), '{}')
			FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = '{schema}.steps'::regclass`)
		m := map[string]string{}
		for _, r := range rows {
			m[r[0]] = r[1]
		}
		return m
	}
	day := time.Now().UTC()
	want := map[string]string{"steps_0": "build_id", "steps_default": "build_id",
		"steps_" + day.AddDate(0, 0, 1).Format("20060102"): "policy", "steps_" + day.AddDate(0, 0, 2).Format("20060102"): "policy"}
	if got := layouts(); !maps.Equal(got, want) {
		t.Errorf("steps' partitions and their last columns %v, want %v (steps_0 holds a row: kept as it was)", got, want)
	}
	if got := query[string](t, pool, schema, `SELECT policy::text || ' ' || input_hash || ' ' || status FROM {schema}.steps`); got != `{"max_attempts": 3} 42 running` {
		t.Errorf("the step written before the migration reads %q", got)
	}
	made := query[[]string](t, pool, schema, `SELECT coalesce(array_agg(x), '{}') FROM {schema}.ensure_history_partitions(4) AS x WHERE x LIKE 'steps%'`)
	if got := layouts(); len(made) != 2 || got[made[0]] != "policy" || got[made[1]] != "policy" {
		t.Errorf("made %v; layouts %v: want the new days with the policy last", made, got)
	}

	// Retention between layouts: the days of Backdate are partitions as
	// migration 22 made them (the table's layout); a swap copies the kept
	// histories into partitions of the new one, and merges join them.
	st := newStore(t)
	pool, schema = st.Pool(), st.Schema()
	backdate(t, pool, schema, 12)
	var failed []string
	for d := 3; d <= 10; d++ {
		failed = append(failed, oldRuns(t, pool, schema, d, 10, "failed", fmt.Sprintf("f%d", d))...)
		if d%2 == 0 { // the odd days keep every run: no swap, their layout stays
			oldRuns(t, pool, schema, d, 30, "completed", fmt.Sprintf("c%d", d))
		}
	}
	exec(t, pool, schema, `UPDATE {schema}.steps SET policy = jsonb_build_object('max_attempts', step, 'run', run_id), error_message = 'e' || step,
		budget_from = step, input_hash = step * 7, build_id = 'b' || step`)
	rows := func(tbl string) string {
		return query[string](t, pool, schema, `SELECT md5(string_agg(to_jsonb(x)::text, ',' ORDER BY x.run_id, x.step)) FROM {schema}.`+tbl+` x
			WHERE x.run_id = ANY($1::uuid[])`, failed)
	}
	steps, attempts := rows("steps"), rows("attempts")
	if err := st.SetRetention(t.Context(), store.HistoryRetention{Completed: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	for pass := 0; pass < 12; pass++ {
		if err := st.RetainHistory(t.Context(), "test", ""); err != nil {
			t.Fatal(err)
		}
	}
	swaps := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.history_drops WHERE state = 'done'`)
	merges := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.audit_log WHERE action = 'retention' AND filter->>'change' = 'merge'`)
	got := layouts()
	t.Logf("%d drops, %d merges; layouts %v", swaps, merges, got)
	if swaps < 4 || merges < 1 {
		t.Fatalf("%d drops and %d merges: want the four days with completed runs dropped and a merge", swaps, merges)
	}
	if rows("steps") != steps || rows("attempts") != attempts {
		t.Errorf("the kept runs' steps or attempts changed in the copies: %s → %s, %s → %s", steps, rows("steps"), attempts, rows("attempts"))
	}
	if n := query[int64](t, pool, schema, `SELECT count(*) FROM {schema}.steps WHERE run_id = ANY($1::uuid[])`, failed); n != int64(2*len(failed)) {
		t.Errorf("%d steps of the %d failed runs kept, want %d", n, len(failed), 2*len(failed))
	}
	var old, new int
	for _, last := range got {
		if last == "policy" {
			new++
		} else {
			old++
		}
	}
	if new == 0 || old == 0 {
		t.Errorf("layouts after retention %v: want both, the swapped days' and the untouched days'", got)
	}
}

// Migration 28 counts the slots held of activities' downstreams and keeps
// them (the holders of the workers of the earlier version that still run),
// drops their free slots, and leaves a workflow's slots as they were.
func TestMigration28_HeldSlotsAreCountedAndKeptFreeOnesGo(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	migrateTo(t, pool, schema, 27)
	exec(t, pool, schema, `INSERT INTO {schema}.downstreams (name, concurrency, holds) VALUES ('api', 5, 'attempt'), ('workflow:w', 2, 'run')`)
	exec(t, pool, schema, `INSERT INTO {schema}.flow_keys (downstream, key) VALUES ('api', ''), ('api', 'b'), ('workflow:w', '')`)
	exec(t, pool, schema, `INSERT INTO {schema}.flow_slots (downstream, key, slot, run_id, epoch, step, taken_at)
		VALUES ('api', '', 1, gen_random_uuid(), 1, 1, now()), ('api', '', 2, gen_random_uuid(), 1, 1, now()),
		       ('api', '', 3, NULL, NULL, NULL, NULL), ('api', 'b', 1, NULL, NULL, NULL, NULL),
		       ('workflow:w', '', 1, gen_random_uuid(), 1, 0, now()), ('workflow:w', '', 2, NULL, NULL, NULL, NULL)`)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	got := query[string](t, pool, schema, `SELECT string_agg(k.downstream || '/' || k.key || ' ' || k.in_use || ' ' ||
		(SELECT count(*) || ' ' || count(s.run_id) FROM {schema}.flow_slots s WHERE s.downstream = k.downstream AND s.key = k.key), ', '
		ORDER BY k.downstream, k.key) FROM {schema}.flow_keys k`)
	if want := "api/ 2 2 2, api/b 0 0 0, workflow:w/ 0 2 1"; got != want {
		t.Errorf("keys: count, slot rows and held: %s, want %s", got, want)
	}
}
