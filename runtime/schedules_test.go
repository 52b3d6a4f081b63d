package runtime_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tenureotel "github.com/tenurehq/tenure/otel"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// tickCounter is an Observer (otel's) that also counts the ticks its
// workers decided started (runtime.ScheduleObserver).
type tickCounter struct {
	*tenureotel.Instrumentation
	started atomic.Int32
}

func (c *tickCounter) TickDecided(schedule, decision string, lag time.Duration) {
	if decision == "started" {
		c.started.Add(1)
	}
}

// scheduledWorker starts a worker of wf declaring schedules; Shutdown at
// cleanup (stop may come first).
func scheduledWorker(t testing.TB, e *env, label string, obs runtime.Observer, wf sdk.Definition, schedules ...*sdk.Schedule) *runtime.Worker {
	t.Helper()
	cfg := e.config()
	cfg.Label, cfg.Observer = label, obs
	w, err := runtime.NewWorker(e.pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(wf); err != nil {
		t.Fatal(err)
	}
	if err := w.RegisterSchedules(schedules...); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.WithoutCancel(e.ctx)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, w, 5*time.Second) })
	return w
}

// Three workers decide a one-second schedule's ticks: every second is one
// tick row, every tick started is one run (with the tick's key), none twice;
// with every worker down for three seconds (TENURE_SCHEDULE_DOWNTIME) and
// catch-up latest, the ticks of the downtime are missed but the latest,
// which is one catch-up run.
func TestSchedules_ThreeWorkersStartEachTickOnceAndCatchUpTheLatest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ran atomic.Int32
	var ticks sync.Map // nominal time (Unix seconds) -> the schedule's name, as each run read it
	wf := sdk.NewWorkflow("tick", func(ctx context.Context, n int) (int, error) {
		if name, nominal, ok := sdk.ScheduledTick(ctx); ok {
			ticks.Store(nominal.Unix(), name)
		}
		ran.Add(1)
		return n, nil
	})
	every := sdk.NewSchedule("every-second", wf, "@every 1s", 7)
	started := func() int {
		return q[int](e, `SELECT count(*) FROM {schema}.schedule_ticks WHERE decision = 'started'`)
	}
	inst, err := tenureotel.New()
	if err != nil {
		t.Fatal(err)
	}
	observed := &tickCounter{Instrumentation: inst}
	var workers []*runtime.Worker
	for i := range 3 {
		workers = append(workers, scheduledWorker(t, e, fmt.Sprintf("scheduler-%d", i), observed, wf, every))
	}
	eventually(t, "5 ticks started", func() bool { return started() >= 5 })
	for _, w := range workers {
		stop(t, w, 5*time.Second)
	}
	check := func(when string) {
		t.Helper()
		// Every second between the first and the last tick is one row.
		if rows, seconds := q[int](e, `SELECT count(*) FROM {schema}.schedule_ticks WHERE schedule = 'every-second'`),
			q[int](e, `SELECT (extract(epoch FROM max(nominal_at) - min(nominal_at)) + 1)::int FROM {schema}.schedule_ticks
				WHERE schedule = 'every-second'`); rows != seconds {
			t.Fatalf("%s: %d ticks over the %d seconds between the first and the last, want one a second", when, rows, seconds)
		}
		// Each started tick is one run of its key; no run is of two ticks.
		if got := q[string](e, `SELECT count(*) || ' ' || count(DISTINCT t.run_id) || ' ' || count(r.id)
			FROM {schema}.schedule_ticks t LEFT JOIN {schema}.runs r ON r.id = t.run_id
			  AND r.run_key = 'schedule:every-second@' || to_char(t.nominal_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
			WHERE t.decision = 'started'`); got != fmt.Sprintf("%d %d %d", started(), started(), started()) {
			t.Fatalf("%s: started ticks, their distinct runs, their runs of the tick's key: %s", when, got)
		}
		if n := q[int](e, `SELECT count(*) FROM {schema}.runs WHERE run_key LIKE 'schedule:%'`); n != started() {
			t.Fatalf("%s: %d runs of schedule keys, %d ticks started", when, n, started())
		}
	}
	check("three workers")
	before := started()
	missedBefore := q[int](e, `SELECT count(*) FROM {schema}.schedule_ticks WHERE decision = 'missed'`)
	down := 3 * time.Second // the proof: TENURE_SCHEDULE_DOWNTIME=30s
	if s := os.Getenv("TENURE_SCHEDULE_DOWNTIME"); s != "" {
		if down, err = time.ParseDuration(s); err != nil {
			t.Fatalf("TENURE_SCHEDULE_DOWNTIME=%q: %v", s, err)
		}
	}
	time.Sleep(down) // every worker down
	scheduledWorker(t, e, "scheduler-back", observed, wf, every)
	eventually(t, "the catch-up run", func() bool { return started() > before })
	check("after the downtime")
	if n := q[int](e, `SELECT count(*) FROM {schema}.schedule_ticks WHERE decision = 'missed'`) - missedBefore; n < 2 {
		t.Fatalf("%d ticks missed over 3 s of downtime, want at least 2", n)
	}
	// The first pass after the downtime started one run: the latest tick.
	if n := q[int](e, `SELECT count(*) FROM {schema}.schedule_ticks t WHERE t.decided_by = 'scheduler-back' AND t.decision = 'started'
		AND t.decided_at = (SELECT min(decided_at) FROM {schema}.schedule_ticks WHERE decided_by = 'scheduler-back')`); n != 1 {
		t.Fatalf("the first pass after the downtime started %d runs, want 1 (catch-up latest)", n)
	}
	eventually(t, "every started run to run", func() bool { return int(ran.Load()) >= started() })
	// Each run read its tick: the schedule's name and nominal time.
	rows, err := e.pool.Query(e.ctx, fmt.Sprintf(`SELECT extract(epoch FROM nominal_at)::bigint FROM %s.schedule_ticks
		WHERE decision = 'started'`, e.schema))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var sec int64
		if err := rows.Scan(&sec); err != nil {
			t.Fatal(err)
		}
		if name, ok := ticks.Load(sec); !ok || name != "every-second" {
			t.Errorf("the run of the tick at %d read %v, %v from sdk.ScheduledTick", sec, name, ok)
		}
	}
	rows.Close()
	if n := int(observed.started.Load()); n != started() {
		t.Errorf("the workers' observer heard of %d ticks started, the table has %d", n, started())
	}
	t.Log(q[string](e, `SELECT string_agg(decision || ' by ' || decided_by || ' ' || to_char(nominal_at, 'SS') || ' lag ' ||
		round(extract(epoch FROM decided_at - nominal_at) * 1000) || 'ms', E'\n' ORDER BY nominal_at) FROM {schema}.schedule_ticks`))
}
