package runtime_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tenurehq/tenure/sdk"
)

// BenchmarkSchedules_10000DueAtOnce: 10,000 schedules whose next ticks
// fall on one instant, decided by one worker, then by three (each pass locks up to
// schedulesPerPass of them): how late each tick was decided after its
// nominal time (p50, p99, max), and the write transactions per tick (each
// pass's transaction stamps its ticks with its own now()). The runs the
// ticks start are of a workflow no worker serves: they are recorded, not
// run. One round per b.N:
//
//	go test ./runtime -run '^$' -bench Schedules_10000 -benchtime 3x
func BenchmarkSchedules_10000DueAtOnce(b *testing.B) {
	for _, workers := range []int{1, 3} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) { benchScheduleTicks(b, workers) })
	}
}

func benchScheduleTicks(b *testing.B, workers int) {
	e := newEnv(b)
	other := sdk.NewWorkflow("other", func(ctx context.Context, n int) (int, error) { return n, nil })
	const n = 10_000
	e.exec(`INSERT INTO {schema}.schedules (name, spec, workflow, next_at)
		SELECT 's' || i, '@every 1h', 'reported', 'infinity' FROM generate_series(1, $1) AS i`, n)
	for i := range workers {
		scheduledWorker(b, e, fmt.Sprintf("scheduler-%d", i), nil, other)
	}
	var p50, p99, worst, xacts float64
	b.ResetTimer()
	for round := range b.N {
		e.exec(`UPDATE {schema}.schedules SET next_at = date_trunc('second', now()) + interval '2 seconds'`)
		deadline := time.Now().Add(time.Minute)
		for q[int](e, `SELECT count(*) FROM {schema}.schedule_ticks`) < n*(round+1) {
			if time.Now().After(deadline) {
				b.Fatalf("round %d: %d of %d ticks decided in a minute", round, q[int](e, `SELECT count(*) FROM {schema}.schedule_ticks`)-n*round, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
		var r struct{ p50, p99, worst, xacts float64 }
		if err := e.pool.QueryRow(e.ctx, fmt.Sprintf(`
			SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY lag), percentile_cont(0.99) WITHIN GROUP (ORDER BY lag), max(lag),
			       count(DISTINCT decided_at)::float8 / count(*)
			FROM (SELECT extract(epoch FROM decided_at - nominal_at) * 1000 AS lag, decided_at
			      FROM %s.schedule_ticks WHERE nominal_at = (SELECT max(nominal_at) FROM %[1]s.schedule_ticks)) AS t`, e.schema)).
			Scan(&r.p50, &r.p99, &r.worst, &r.xacts); err != nil {
			b.Fatal(err)
		}
		p50, p99, worst, xacts = p50+r.p50, p99+r.p99, worst+r.worst, xacts+r.xacts
	}
	b.StopTimer()
	k := float64(b.N)
	b.ReportMetric(p50/k, "lag_p50_ms")
	b.ReportMetric(p99/k, "lag_p99_ms")
	b.ReportMetric(worst/k, "lag_max_ms")
	b.ReportMetric(xacts/k, "xacts/tick")
}
