package store_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/internal/storetest"
)

// BenchmarkMigration22 times migration 22 (steps and attempts made
// partitioned) on a schema at version 21 holding 10^6 attempts: 666,667
// finished runs of UUIDv7 IDs, 1.5 attempts a run as bench's history (one
// step each, every second run a second attempt), analysed. It reports the
// seconds the migration held the tables, whose ACCESS EXCLUSIVE locks it
// holds from its first statement to its commit (docs/operations.md):
//
//	go test ./internal/store -run '^$' -bench Migration22 -benchtime 1x
func BenchmarkMigration22(b *testing.B) {
	for range b.N {
		b.StopTimer()
		pool, schema := pgtest.Pool(b), pgtest.Schema(b)
		migrateTo(b, pool, schema, 21)
		const runs = 666_667
		exec(b, pool, schema, `
			INSERT INTO {schema}.runs (id, workflow, input, output, status, epoch, created_at, started_at, finished_at)
			SELECT id, 'orders', '{"n": 1}', '1', 'completed', 1, t, t, t
			FROM generate_series(1, $1::int) AS i,
			     LATERAL (SELECT now() - interval '2 days' + i * interval '200 milliseconds' AS t) AS x,
			     LATERAL (SELECT (lpad(to_hex(floor(extract(epoch FROM x.t) * 1000)::bigint), 12, '0')
			                      || '70008' || lpad(to_hex(i), 15, '0'))::uuid AS id) AS y`, runs)
		exec(b, pool, schema, `
			INSERT INTO {schema}.steps (run_id, step, activity, status, output, policy, finished_at)
			SELECT id, 1, 'charge', 'completed', '1', '{"max_attempts": 3}', now() FROM {schema}.runs`)
		exec(b, pool, schema, `
			INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, ended_at, epoch, worker, error_message)
			SELECT s.run_id, 1, a, 'charge', CASE WHEN a < n THEN 'failed' ELSE 'succeeded' END, now(), 1, 'w',
			       CASE WHEN a < n THEN 'upstream returned 503' END
			FROM {schema}.steps s, LATERAL (SELECT 1 + (('x' || substr(s.run_id::text, 34, 3))::bit(12)::int % 2) AS n) AS k,
			     generate_series(1, k.n) AS a`)
		exec(b, pool, schema, `VACUUM ANALYZE {schema}.runs, {schema}.steps, {schema}.attempts`)
		attempts := query[int64](b, pool, schema, `SELECT count(*) FROM {schema}.attempts`)
		b.StartTimer()
		start := time.Now()
		if err := store.Migrate(b.Context(), pool, store.WithSchema(schema)); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		b.ReportMetric(took.Seconds(), "s/migration")
		b.ReportMetric(float64(attempts), "attempts")
	}
}

// BenchmarkRetentionDrop drops a day of 10^6 attempts: 666,667 runs of five
// days ago, history.go's mix in bench (2 in 100 failed and kept, their
// histories moved to the day's new partitions), the retention's phases timed
// one by one through their functions, as retain_history calls them: the
// swap (the kept histories copied, the day's partitions detached and the
// new ones attached), the drop of the detached tables, the deletion of the
// runs that went, in batches of 10,000. Meanwhile one session claims 10
// runs at a time and another commits attempts' starts and ends of runs of
// today, each as fast as it can: it reports the longest claim and commit
// during the swap and the drop. Then the day's kept partition is merged
// with the day before it, as a pass merges old partitions, the same load
// beside it: its time, rows and longest claim and commit.
//
//	go test ./internal/store -run '^$' -bench RetentionDrop -benchtime 1x
func BenchmarkRetentionDrop(b *testing.B) {
	for range b.N {
		b.StopTimer()
		st := newStore(b)
		pool, schema := st.Pool(), st.Schema()
		if err := storetest.Backdate(b.Context(), pool, schema, 10); err != nil {
			b.Fatal(err)
		}
		const runs = 666_667
		exec(b, pool, schema, `INSERT INTO {schema}.runs (id, workflow, input, output, status, epoch, created_at, started_at, finished_at)
			SELECT `+storetest.DayID(5, "day")+`, 'orders', '{}', '1', CASE WHEN i % 100 < 2 THEN 'failed' ELSE 'completed' END, 1,
			       now() - interval '5 days', now() - interval '5 days', now() - interval '5 days'
			FROM generate_series(1, $1::int) AS i`, runs)
		exec(b, pool, schema, `INSERT INTO {schema}.steps (run_id, step, activity, status, output, policy, finished_at)
			SELECT id, 1, 'charge', CASE WHEN status = 'failed' THEN 'failed' ELSE 'completed' END, '1', '{"max_attempts": 3}', now()
			FROM {schema}.runs`)
		exec(b, pool, schema, `INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, ended_at, epoch, worker)
			SELECT id, 1, a, 'charge', CASE WHEN a < n THEN 'failed' ELSE 'succeeded' END, now(), 1, 'w'
			FROM (SELECT id, row_number() OVER (ORDER BY id) AS k FROM {schema}.runs) AS r,
			     LATERAL (SELECT CASE WHEN k % 2 = 0 THEN 2 ELSE 1 END AS n) AS x, generate_series(1, x.n) AS a`)
		exec(b, pool, schema, `INSERT INTO {schema}.failures (run_id, workflow, reason, step, activity, attempts, errors, rescues, error_message, failed_at)
			SELECT id, 'orders', 'retries_exhausted', 1, 'charge', 1, 1, 0, 'boom', now() - interval '5 days' FROM {schema}.runs WHERE status = 'failed'`)
		exec(b, pool, schema, `VACUUM ANALYZE {schema}.runs, {schema}.steps, {schema}.attempts, {schema}.failures`)
		attempts := query[int64](b, pool, schema, `SELECT count(*) FROM {schema}.attempts`)
		if err := st.SetRetention(b.Context(), store.HistoryRetention{Completed: 48 * time.Hour, Cancelled: 48 * time.Hour}); err != nil {
			b.Fatal(err)
		}
		day := time.Now().UTC().AddDate(0, 0, -5).Format("20060102")
		lo := query[string](b, pool, schema, `SELECT {schema}._history_bound(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '5 days')::text`)
		hi := query[string](b, pool, schema, `SELECT {schema}._history_bound(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '4 days')::text`)

		// The load beside it: claims of a workflow of today, and commits of
		// its runs' attempts.
		var worstClaim, worstCommit atomic.Int64
		var stop chan struct{}
		var wg sync.WaitGroup
		load := func() {
			stop = make(chan struct{})
			wg.Add(1)
			go loadBeside(b, st, stop, &wg, &worstClaim, &worstCommit)
			time.Sleep(200 * time.Millisecond)
			worstClaim.Store(0)
			worstCommit.Store(0)
		}
		load()
		b.StartTimer()
		start := time.Now()
		dropID := query[int64](b, pool, schema, `SELECT {schema}._retention_swap($1, $2::uuid, $3::uuid, 'bench', NULL)`, day, lo, hi)
		swapped := time.Since(start)
		exec(b, pool, schema, `SELECT {schema}._retention_finish($1, 0)`, dropID)
		dropped := time.Since(start)
		claimWorst, commitWorst := time.Duration(worstClaim.Load()), time.Duration(worstCommit.Load())
		close(stop)
		wg.Wait()
		for query[int64](b, pool, schema, `SELECT {schema}._retention_finish($1, 10000)`, dropID) == 10000 {
		}
		deleted := time.Since(start) - dropped
		b.StopTimer()
		kept := query[int64](b, pool, schema, `SELECT kept FROM {schema}.history_drops WHERE id = $1`, dropID)
		b.ReportMetric(float64(attempts), "attempts")
		b.ReportMetric(float64(kept), "runs-kept")
		b.ReportMetric(swapped.Seconds(), "s/swap")
		b.ReportMetric((dropped - swapped).Seconds(), "s/drop-tables")
		b.ReportMetric(deleted.Seconds(), "s/delete-runs")
		b.ReportMetric(float64(claimWorst.Microseconds())/1000, "ms/worst-claim")
		b.ReportMetric(float64(commitWorst.Microseconds())/1000, "ms/worst-commit")

		// The kept day merged with the (empty) day before it, as a pass
		// merges old partitions, the load beside it again.
		before := time.Now().UTC().AddDate(0, 0, -6).Format("20060102")
		lo6 := query[string](b, pool, schema, `SELECT {schema}._history_bound(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '6 days')::text`)
		load()
		b.StartTimer()
		start = time.Now()
		moved := query[int64](b, pool, schema, `SELECT {schema}._retention_merge($1, $2, $3::uuid, $4::uuid, 'bench', NULL)`, before, day, lo6, hi)
		merged := time.Since(start)
		b.StopTimer()
		claimWorst, commitWorst = time.Duration(worstClaim.Load()), time.Duration(worstCommit.Load())
		close(stop)
		wg.Wait()
		b.ReportMetric(float64(moved), "rows-merged")
		b.ReportMetric(merged.Seconds(), "s/merge")
		b.ReportMetric(float64(claimWorst.Microseconds())/1000, "ms/merge-worst-claim")
		b.ReportMetric(float64(commitWorst.Microseconds())/1000, "ms/merge-worst-commit")
	}
}

// loadBeside claims 10 runs of today at a time and commits their attempts'
// starts, as fast as it can until stop, keeping the longest of each.
func loadBeside(b *testing.B, st *store.Store, stop chan struct{}, wg *sync.WaitGroup, worstClaim, worstCommit *atomic.Int64) {
	defer wg.Done()
	pool, schema := st.Pool(), st.Schema()
	pol := []byte(`{"max_attempts": 3}`)
	for {
		select {
		case <-stop:
			return
		default:
		}
		if _, err := pool.Exec(b.Context(), replaceSchema(`INSERT INTO {schema}.runs (id, workflow, input)
			SELECT {schema}._uuid_v7(), 'today', '{}' FROM generate_series(1, 10)`, schema)); err != nil {
			b.Error(err)
			return
		}
		start := time.Now()
		claimed, err := st.Claim(b.Context(), []string{"today"}, []string{"default"}, 10, "bench", time.Minute)
		took := time.Since(start)
		if err != nil {
			b.Error(err)
			return
		}
		if took.Nanoseconds() > worstClaim.Load() {
			worstClaim.Store(took.Nanoseconds())
		}
		ws := make([]store.Write, len(claimed))
		for j, r := range claimed {
			ws[j] = store.Write{Lease: store.Lease{RunID: r.ID, Epoch: r.Epoch},
				StartAttempt: &store.AttemptStart{Step: 1, Attempt: 1, Activity: "a", Policy: pol, Worker: "bench"}}
		}
		start = time.Now()
		if _, err := st.Commit(b.Context(), pool, ws); err != nil {
			b.Error(err)
			return
		}
		if took := time.Since(start).Nanoseconds(); took > worstCommit.Load() {
			worstCommit.Store(took)
		}
	}
}
