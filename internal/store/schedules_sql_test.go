package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenurehq/tenure/internal/store"
)

// The tick key SQL writes (_schedule_tick_key) is Go's, byte for byte:
// whole seconds, fractions with trailing zeros, microseconds, zones other
// than UTC, names with the key's separators.
func TestScheduleTickKey_SQLWritesGosKey(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{
		time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 8, 7, 0, 0, 500_000_000, time.UTC),
		time.Date(2026, 3, 8, 7, 0, 0, 120_000, time.UTC),
		time.Date(2026, 3, 8, 7, 0, 0, 123_456_000, berlin),
		time.Date(1999, 12, 31, 23, 59, 59, 1_000, time.FixedZone("EDT", -4*3600)),
	} {
		for _, name := range []string{"nightly", "billing@eu", "a:b", "sp ace"} {
			got := scalar[string](t, st, `SELECT {schema}._schedule_tick_key($1, $2)`, name, at)
			if want := store.ScheduleTickRun(name, at); got != want {
				t.Errorf("%q at %s: SQL %q, Go %q", name, at, got, want)
			}
		}
	}
}

// trigger_schedule, called in SQL, does what store.TriggerSchedule did in
// Go: one run of the schedule's workflow, queue, priority and input, of the
// tick key of the transaction's time, with a UUIDv7; a tick row decided
// triggered by the role; an audit row with the note; a notice on the runs
// channel, so that an idle worker claims it at once. store.TriggerSchedule
// is the same function.
func TestTriggerSchedule_InSQLStartsOneRunOfTheTicksKeyAudited(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := t.Context()
	if err := st.DeclareSchedules(ctx, []store.ScheduleDecl{{Name: "nightly", Spec: "@daily", Workflow: "report", Queue: "reports",
		Priority: 3, Input: []byte(`{"tenant": "all"}`)}}, "w"); err != nil {
		t.Fatal(err)
	}
	conn := listen(t, st.RunsChannel())
	run := scalar[uuid.UUID](t, st, `SELECT {schema}.trigger_schedule('nightly', 'INC-21: rerun')`)
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if n, err := conn.WaitForNotification(wait); err != nil || n.Payload != "reports" {
		t.Fatalf("the notice for idle workers: %+v, %v; want the run's queue", n, err)
	}
	if run.Version() != 7 || run.Variant() != uuid.RFC4122 {
		t.Errorf("run ID %s: version %d, variant %s; want a UUIDv7", run, run.Version(), run.Variant())
	}
	if at, now := time.Unix(run.Time().UnixTime()), scalar[time.Time](t, st, `SELECT now()`); at.Sub(now).Abs() > time.Minute {
		t.Errorf("run ID %s holds the time %s, the database's is %s", run, at, now)
	}
	var tick store.ScheduleTick
	var decidedBy, role string
	if err := st.Pool().QueryRow(ctx, replaceSchema(`SELECT t.nominal_at, t.decision, t.decided_by, current_user FROM {schema}.schedule_ticks t
		WHERE t.schedule = 'nightly' AND t.run_id = $1`, st.Schema()), run).Scan(&tick.NominalAt, &tick.Decision, &decidedBy, &role); err != nil {
		t.Fatalf("the tick's row: %v", err)
	}
	if tick.Decision != store.TickTriggered || decidedBy != role {
		t.Errorf("tick %s decided by %s; want triggered by %s", tick.Decision, decidedBy, role)
	}
	r, err := st.GetRun(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if want := store.ScheduleTickRun("nightly", tick.NominalAt); r.Key != want || r.Workflow != "report" || r.Queue != "reports" ||
		r.Priority != 3 || string(r.Input) != `{"tenant": "all"}` || r.Status != "queued" {
		t.Errorf("the run: %+v; want key %q, the schedule's workflow, queue, priority and input, queued", r, want)
	}
	if got := scalar[string](t, st, `SELECT filter->>'change' || ' ' || (filter->>'by') || ' ' || runs || ' ' || (run_ids = ARRAY[$1::uuid])::text || ' ' || note
		FROM {schema}.audit_log WHERE action = 'schedule' AND filter->>'schedule' = 'nightly' ORDER BY id DESC LIMIT 1`, run); got != "triggered person 1 true INC-21: rerun" {
		t.Errorf("the audit row: %s", got)
	}
	// The same, from Go; a schedule that does not exist is an error of its
	// own, in SQL and in Go.
	again, err := st.TriggerSchedule(ctx, "nightly", "")
	if err != nil || again == run {
		t.Fatalf("TriggerSchedule: %s, %v; want another run", again, err)
	}
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.schedule_ticks WHERE decision = 'triggered'`); n != 2 {
		t.Errorf("%d triggered ticks, want 2", n)
	}
	_, err = st.Pool().Exec(ctx, replaceSchema(`SELECT {schema}.trigger_schedule('nope')`, st.Schema()))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "P0002" || pgErr.Message != "trigger_schedule: no schedule nope" {
		t.Errorf("trigger_schedule of no schedule: %v; want P0002, trigger_schedule: no schedule nope", err)
	}
	if _, err := st.TriggerSchedule(ctx, "nope", ""); !errors.Is(err, store.ErrNoSchedule) {
		t.Errorf("TriggerSchedule of no schedule: %v; want ErrNoSchedule", err)
	}
}
