package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

// BenchmarkThroughput measures how many runs per second one worker executes:
// claim, each step checkpointed (attempt row committed before the call, step
// and attempt closed after), completion. The runs are started before the
// clock starts. Each sub-benchmark reports runs/s;
// compare them within one run (the machine is shared and noisy):
//
//	go test ./runtime -run '^$' -bench Throughput -benchtime 2000x
func BenchmarkThroughput(b *testing.B) {
	for _, c := range []struct {
		name  string
		steps int
		fail  bool
	}{
		{"steps=1", 1, false},
		{"steps=5", 5, false},
		{"steps=1/retry-once", 1, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := newEnv(b)
			act := activities.New("work", func(ctx context.Context, x in) (int, error) {
				if info, _ := activities.InfoFrom(ctx); c.fail && info.Attempt == 1 {
					return 0, errors.New("transient")
				}
				return x.N + 1, nil
			}, policy.Constant(time.Millisecond), policy.Jitter(policy.NoJitter))
			wf := sdk.NewWorkflow("bench", func(ctx context.Context, x in) (int, error) {
				for range c.steps {
					n, err := sdk.Execute(ctx, act, x)
					if err != nil {
						return 0, err
					}
					x.N = n
				}
				return x.N, nil
			})
			runs := make([]*sdk.Run[int], b.N)
			for i := range b.N {
				r, err := sdk.Start(e.ctx, e.client, wf, in{N: i})
				if err != nil {
					b.Fatal(err)
				}
				runs[i] = r
			}

			// Only the worker is timed: from start until every run completed.
			cfg := e.config()
			cfg.Concurrency = 32
			xid := func() int64 { return scalar[int64](e, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`) }
			wal := func() string { return scalar[string](e, `SELECT pg_current_wal_lsn()::text`) }
			xid0, wal0, cpu0 := xid(), wal(), busyJiffies(b)
			b.ResetTimer()
			began := time.Now()
			e.worker(cfg, wf)
			done := fmt.Sprintf(`SELECT count(*) FROM %s.runs WHERE status = 'completed'`, e.schema)
			for scalar[int](e, done) < b.N {
				time.Sleep(5 * time.Millisecond)
			}
			elapsed := time.Since(began)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "runs/s")
			// Every transaction that wrote, in the whole cluster (the
			// progress polls above write nothing), and the WAL they made.
			b.ReportMetric(float64(xid()-xid0)/float64(b.N), "xacts/run")
			b.ReportMetric(scalar[float64](e, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)`, wal0)/float64(b.N), "WAL-bytes/run")
			// Machine CPU (worker and PostgreSQL alike), in ms per run.
			b.ReportMetric(float64(busyJiffies(b)-cpu0)*10/float64(b.N), "CPU-ms/run")
			right := scalar[int](e, fmt.Sprintf(`SELECT count(*) FROM %s.runs
				WHERE status = 'completed' AND output::int = (input->>'N')::int + $1`, e.schema), c.steps)
			if right != len(runs) {
				b.Fatalf("%d of %d runs completed with the right output", right, len(runs))
			}
		})
	}
}

// busyJiffies is the machine's non-idle CPU time so far, in 1/100 s (the
// first line of /proc/stat, without idle and iowait).
func busyJiffies(b *testing.B) int64 {
	b.Helper()
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line)
	var busy int64
	for i, f := range fields[1:min(9, len(fields))] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			b.Fatalf("/proc/stat: %v", err)
		}
		busy += n
	}
	return busy
}
