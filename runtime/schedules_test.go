package runtime_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
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

// Two services of different code share one schema: service A serves
// workflow a and declares schedule sa, service B serves b and declares sb,
// both every second. Every worker decides every schedule's ticks, so with
// B stopped, A decides sb's too: its ticks go on, one a second, and their
// runs wait queued for a worker of b, named by orphaned_runs (what tenure
// workers, the UI and the tenure.runs.orphaned gauge read), while sa's
// ticks and runs go on as before. B back, the waiting runs complete. Each
// schedule has one tick row a second throughout, and each started tick is
// one run of its key.
func TestSchedules_TwoServicesOnOneSchemaDecideEveryTickWhileOneIsDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ranA, ranB atomic.Int32
	a := sdk.NewWorkflow("a", func(ctx context.Context, n int) (int, error) { ranA.Add(1); return n, nil })
	b := sdk.NewWorkflow("b", func(ctx context.Context, n int) (int, error) { ranB.Add(1); return n, nil })
	// Overlap allowed: every tick B misses is a run waiting for it.
	sa := sdk.NewSchedule("sa", a, "@every 1s", 1, sdk.WithOverlap(sdk.OverlapAllow, 0))
	sb := sdk.NewSchedule("sb", b, "@every 1s", 2, sdk.WithOverlap(sdk.OverlapAllow, 0))
	logA := &logBuffer{}
	service := func(label string, log *slog.Logger, wf sdk.Definition, s *sdk.Schedule) *runtime.Worker {
		t.Helper()
		cfg := e.config()
		cfg.Label = label
		if log != nil {
			cfg.Logger = log
		}
		w, err := runtime.NewWorker(e.pool, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Register(wf); err != nil {
			t.Fatal(err)
		}
		if err := w.RegisterSchedules(s); err != nil {
			t.Fatal(err)
		}
		if err := w.Start(context.WithoutCancel(e.ctx)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stop(t, w, 5*time.Second) })
		return w
	}
	service("service-a", logA.logger(), a, sa)
	serviceB := service("service-b", nil, b, sb)
	// wait waits, longer than eventually would on a loaded machine, for
	// cond.
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(45 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	dbNow := func() time.Time { return q[time.Time](e, `SELECT clock_timestamp()`) }
	// completedSince counts the runs of a schedule's ticks decided after
	// since that completed.
	completedSince := func(schedule string, since time.Time) int {
		return q[int](e, `SELECT count(*) FROM {schema}.schedule_ticks t JOIN {schema}.runs r ON r.id = t.run_id
			WHERE t.schedule = $1 AND t.decided_at > $2 AND r.status = 'completed'`, schedule, since)
	}
	both := dbNow()
	wait("3 runs of each schedule completed with both services up", func() bool {
		return completedSince("sa", both) >= 3 && completedSince("sb", both) >= 3
	})

	stop(t, serviceB, 5*time.Second)
	down := dbNow()
	bRan := ranB.Load()
	wait("sb's ticks decided with B down, their runs queued, named by orphaned_runs; sa's runs completed", func() bool {
		// One statement, one snapshot: the view counts the queued runs of b.
		return q[bool](e, `SELECT (SELECT count(*) FROM {schema}.schedule_ticks WHERE schedule = 'sb' AND decided_at > $1 AND decision = 'started') >= 3
			AND coalesce((SELECT runs = (SELECT count(*) FROM {schema}.runs WHERE workflow = 'b' AND status = 'queued')
			              FROM {schema}.orphaned_runs WHERE workflow = 'b' AND queue = 'default' AND build = ''), false)`, down) &&
			completedSince("sa", down) >= 3
	})
	if n := q[int](e, `SELECT count(*) FROM {schema}.schedule_ticks WHERE schedule IN ('sa', 'sb') AND decided_at > $1 AND decided_by <> 'service-a'`, down); n != 0 {
		t.Fatalf("%d ticks decided by another worker than A, the one alive", n)
	}
	if n := q[int](e, `SELECT count(*) FROM {schema}.schedule_ticks t JOIN {schema}.runs r ON r.id = t.run_id
		WHERE t.schedule = 'sb' AND t.decided_at > $1 AND r.status <> 'queued'`, down); n != 0 || ranB.Load() != bRan {
		t.Fatalf("with B down, %d runs of sb's ticks left queued and b ran %d times: no worker serves b", n, ranB.Load()-bRan)
	}
	if n := q[int](e, `SELECT count(*) FROM {schema}.orphaned_runs WHERE workflow = 'a'`); n != 0 {
		t.Fatal("runs of a named by orphaned_runs while A serves them")
	}
	orphans, err := e.op.Orphans(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(orphans) != 1 || orphans[0].Workflow != "b" || orphans[0].Runs < 3 {
		t.Fatalf("the operator's orphaned runs: %+v, want b's runs queued since B stopped", orphans)
	}
	waiting := orphans[0].Runs

	back := dbNow()
	service("service-b-again", nil, b, sb)
	wait("every run of b queued while B was down completed", func() bool {
		return q[int](e, `SELECT count(*) FROM {schema}.runs WHERE workflow = 'b' AND created_at < $1 AND status <> 'completed'`, back) == 0 &&
			completedSince("sb", back) >= 2 && completedSince("sa", back) >= 2
	})

	// The end: no tick after the pauses, every run completed.
	for _, s := range []string{"sa", "sb"} {
		if err := e.op.PauseSchedule(e.ctx, s, "the test's end"); err != nil {
			t.Fatal(err)
		}
	}
	wait("every run of a tick completed", func() bool {
		return q[int](e, `SELECT count(*) FROM {schema}.runs WHERE status <> 'completed'`) == 0
	})
	var about []string
	for _, s := range []string{"sa", "sb"} {
		if rows, seconds := q[int](e, `SELECT count(*) FROM {schema}.schedule_ticks WHERE schedule = $1`, s),
			q[int](e, `SELECT (extract(epoch FROM max(nominal_at) - min(nominal_at)) + 1)::int FROM {schema}.schedule_ticks
				WHERE schedule = $1`, s); rows != seconds || rows < 8 {
			t.Fatalf("%s: %d ticks over the %d seconds between its first and its last, want one a second (at least 8)", s, rows, seconds)
		}
		started := q[int](e, `SELECT count(*) FROM {schema}.schedule_ticks WHERE schedule = $1 AND decision = 'started'`, s)
		if got := q[string](e, `SELECT count(*) || ' ' || count(DISTINCT t.run_id) || ' ' || count(r.id)
			FROM {schema}.schedule_ticks t LEFT JOIN {schema}.runs r ON r.id = t.run_id
			  AND r.run_key = 'schedule:' || $1 || '@' || to_char(t.nominal_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
			WHERE t.schedule = $1 AND t.decision = 'started'`, s); got != fmt.Sprintf("%d %d %d", started, started, started) {
			t.Fatalf("%s: started ticks, their distinct runs, their runs of the tick's key: %s", s, got)
		}
		if n := q[int](e, `SELECT count(*) FROM {schema}.runs WHERE run_key LIKE 'schedule:' || $1 || '@%'`, s); n != started {
			t.Fatalf("%s: %d runs of its tick keys, %d ticks started", s, n, started)
		}
		about = append(about, q[string](e, `SELECT $1 || ': ' || string_agg(decision || ' ' || n, ', ' ORDER BY decision)
			FROM (SELECT decision, count(*) AS n FROM {schema}.schedule_ticks WHERE schedule = $1 GROUP BY 1) x`, s))
	}
	if n := q[int](e, `SELECT count(*) FROM {schema}.runs WHERE workflow = 'a'`); int(ranA.Load()) < n {
		t.Fatalf("a ran %d times for %d runs", ranA.Load(), n)
	}
	// A decided sb's ticks as a matter of course: nothing it warns of.
	for _, line := range strings.Split(logA.String(), "\n") {
		if strings.Contains(line, "schedule=sb") || strings.Contains(line, "workflow=b") {
			t.Errorf("A logged of B's schedule or workflow: %s", line)
		}
	}
	t.Logf("%s; %d runs of b waited for B; decided by: %s", strings.Join(about, "; "), waiting,
		q[string](e, `SELECT string_agg(schedule || ' ' || decided_by || ' ' || n, ', ' ORDER BY schedule, decided_by)
			FROM (SELECT schedule, decided_by, count(*) AS n FROM {schema}.schedule_ticks GROUP BY 1, 2) x`))
}
