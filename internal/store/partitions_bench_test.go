package store_test

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
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
