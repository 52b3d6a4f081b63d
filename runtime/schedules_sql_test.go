package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// tickReader is a workflow that records the tick each of its runs reads
// (sdk.ScheduledTick), by its nominal time.
func tickReader(name string) (*sdk.Workflow[int, int], *sync.Map) {
	var read sync.Map // nominal time (Unix µs) -> schedule
	return sdk.NewWorkflow(name, func(ctx context.Context, n int) (int, error) {
		if schedule, nominal, ok := sdk.ScheduledTick(ctx); ok {
			read.Store(nominal.UnixMicro(), schedule)
		}
		return n, nil
	}), &read
}

// A trigger in SQL starts a run a running worker claims and completes: the
// run reads its tick, the transaction's time.
func TestSchedules_ATriggerInSQLRunsOnAWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf, read := tickReader("report")
	scheduledWorker(t, e, "scheduler", nil, wf, sdk.NewSchedule("nightly", wf, "@daily", 1))
	eventually(t, "the schedule declared", func() bool {
		return q[int](e, `SELECT count(*) FROM {schema}.schedules WHERE name = 'nightly'`) == 1
	})
	run := q[string](e, `SELECT {schema}.trigger_schedule('nightly', 'rerun after the fix')::text`)
	eventually(t, "the triggered run completed", func() bool {
		return q[string](e, `SELECT status FROM {schema}.runs WHERE id = $1`, run) == "completed"
	})
	nominal := q[time.Time](e, `SELECT nominal_at FROM {schema}.schedule_ticks WHERE run_id = $1 AND decision = 'triggered'`, run)
	if schedule, ok := read.Load(nominal.UnixMicro()); !ok || schedule != "nightly" {
		t.Fatalf("the triggered run read the tick %v, %v; want nightly at %s", schedule, ok, nominal)
	}
}

// A backfill asked for in SQL is carried out by a running worker: each
// minute of the range without a run gets one, decided backfilled, and the
// worker runs it (each reads its tick); the request says what it started.
// Asked again, it starts nothing.
func TestSchedules_ABackfillInSQLIsCarriedOutByARunningWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf, read := tickReader("minutely")
	scheduledWorker(t, e, "scheduler", nil, wf, sdk.NewSchedule("m", wf, "@every 1m", 1, sdk.WithCatchup(sdk.CatchupNone, 0, 0)))
	eventually(t, "the first tick computed", func() bool {
		return q[int](e, `SELECT count(*) FROM {schema}.schedules WHERE name = 'm' AND next_at IS NOT NULL`) == 1
	})
	// The range ends a minute before the current one: the schedule's own
	// ticks (next_at, at the earliest the current minute) stay out of it.
	minute := q[time.Time](e, `SELECT date_trunc('minute', now()) - interval '1 minute'`)
	done := func(id int64) bool {
		return q[bool](e, `SELECT done_at IS NOT NULL FROM {schema}.schedule_backfills WHERE id = $1`, id)
	}
	id := q[int64](e, `SELECT {schema}.backfill_schedule('m', $1, $2, 'INC-12: the warehouse is back')`, minute.Add(-10*time.Minute), minute)
	eventually(t, "the request carried out", func() bool { return done(id) })
	if got := q[string](e, `SELECT cardinality(ticks) || ' ' || coalesce(error, '-') || ' ' || done_by FROM {schema}.schedule_backfills WHERE id = $1`, id); got != "11 - scheduler" {
		t.Fatalf("the request's outcome: %s; want the 11 minutes started by the worker", got)
	}
	if got := q[string](e, `SELECT count(*) || ' ' || count(r.id) FROM {schema}.schedule_ticks t
		LEFT JOIN {schema}.runs r ON r.id = t.run_id AND r.run_key = 'schedule:m@' || to_char(t.nominal_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
		WHERE t.decision = 'backfilled' AND t.nominal_at BETWEEN $1 AND $2`, minute.Add(-10*time.Minute), minute); got != "11 11" {
		t.Fatalf("backfilled ticks, and their runs of the tick's key: %s; want 11 each", got)
	}
	eventually(t, "every backfilled run completed", func() bool {
		return q[int](e, `SELECT count(*) FROM {schema}.runs r JOIN {schema}.schedule_ticks t ON t.run_id = r.id
			WHERE t.decision = 'backfilled' AND r.status = 'completed'`) == 11
	})
	for at := minute.Add(-10 * time.Minute); !at.After(minute); at = at.Add(time.Minute) {
		if schedule, ok := read.Load(at.UnixMicro()); !ok || schedule != "m" {
			t.Errorf("no run read the tick at %s: %v, %v", at, schedule, ok)
		}
	}
	// Runs other than the schedule's own ticks: a minute may turn during
	// the test, and CatchupNone then starts that minute's run.
	const requested = `SELECT count(*) FROM {schema}.runs r WHERE NOT EXISTS
		(SELECT 1 FROM {schema}.schedule_ticks t WHERE t.run_id = r.id AND t.decision = 'started')`
	runs := q[int](e, requested)
	again := q[int64](e, `SELECT {schema}.backfill_schedule('m', $1, $2)`, minute.Add(-10*time.Minute), minute)
	eventually(t, "the request again carried out", func() bool { return done(again) })
	if got := q[string](e, `SELECT cardinality(ticks) || ' ' || coalesce(error, '-') FROM {schema}.schedule_backfills WHERE id = $1`, again); got != "0 -" {
		t.Fatalf("the same range again: %s; want nothing started", got)
	}
	if n := q[int](e, requested); n != runs {
		t.Fatalf("the same range again started %d runs", n-runs)
	}
}

// A worker's ticker waits 10 s between checks while the schema has no
// schedule; a backfill_schedule's notice wakes it: the request (of a
// schedule deleted in its transaction) is refused within seconds, not at
// the next check.
func TestSchedules_ABackfillsNoticeWakesAnIdleTicker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf, _ := tickReader("idle")
	scheduledWorker(t, e, "scheduler", nil, wf)
	time.Sleep(time.Second) // the ticker's first check is done: the next is 10 s away
	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(e.ctx) }()
	var id int64
	for _, stmt := range []string{
		`INSERT INTO {schema}.schedules (name, spec, workflow) VALUES ('brief', '@daily', 'idle')`,
		`SELECT {schema}.backfill_schedule('brief', now() - interval '3 days', now())`,
		`DELETE FROM {schema}.schedules WHERE name = 'brief'`,
	} {
		if err := tx.QueryRow(e.ctx, strings.ReplaceAll(stmt, "{schema}", e.schema)).Scan(&id); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	for !q[bool](e, `SELECT done_at IS NOT NULL FROM {schema}.schedule_backfills WHERE id = $1`, id) {
		if time.Since(asked) > 5*time.Second {
			t.Fatal("the request was not carried out within 5 s: its notice did not wake the idle ticker")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := q[string](e, `SELECT error FROM {schema}.schedule_backfills WHERE id = $1`, id); got != `no such schedule: "brief"` {
		t.Fatalf("the request's outcome: %s", got)
	}
}

// A worker whose schedules are not due sends one statement a check (a
// check a second), with a history of backfill requests carried out: the
// check that looks for a waiting request is the same statement.
func TestSchedules_AnIdleTickerSendsOneStatementACheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(`INSERT INTO {schema}.schedules (name, spec, workflow) VALUES ('nightly', '@daily', 'idle')`)
	e.exec(`INSERT INTO {schema}.schedule_backfills (schedule, from_at, to_at, done_at, ticks)
		SELECT 'nightly', now() - interval '1 day', now(), now(), '{}' FROM generate_series(1, 1000)`)
	counter := &matching{substr: "schedule"} // the ticker's statements name a schedules table
	pool := e.tracedPool(t, counter)
	wcfg := e.config()
	wf, _ := tickReader("idle")
	w, err := runtime.NewWorker(pool, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(wf); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.WithoutCancel(e.ctx)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, w, 5*time.Second) })
	eventually(t, "the first tick computed", func() bool {
		return q[int](e, `SELECT count(*) FROM {schema}.schedules WHERE next_at IS NOT NULL`) == 1
	})
	time.Sleep(100 * time.Millisecond) // the pass that computed it ends
	before := counter.n.Load()
	const window = 3 * time.Second
	time.Sleep(window)
	// A check a second: up to one more in the window than its seconds.
	if sent := counter.n.Load() - before; sent > int64(window/time.Second)+1 || sent < int64(window/time.Second)-1 {
		t.Fatalf("the idle ticker sent %d statements in %s, want one a second", sent, window)
	}
}
