package store_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/store"
)

// pass runs one pass of the schedules' ticker and fails the test on error.
func pass(t *testing.T, st *store.Store) store.SchedulePass {
	t.Helper()
	p, err := st.DecideTicks(t.Context(), "test-worker", 100)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// decisions lists schedule's ticks' decisions in nominal order, as
// "decision" or "decision+run" when the tick has a run.
func tickDecisions(t *testing.T, st *store.Store, schedule string) string {
	t.Helper()
	return scalar[string](t, st, `SELECT coalesce(string_agg(decision || CASE WHEN run_id IS NOT NULL THEN '+run' ELSE '' END, ' ' ORDER BY nominal_at), '')
		FROM {schema}.schedule_ticks WHERE schedule = $1`, schedule)
}

// behind makes schedule's next tick due minutes ago, on a minute, as after
// a downtime of that long, and clears its ticks. The runs of earlier ticks
// stay, but lose their tick keys: the same minutes are decided again, and
// start runs of their own.
func behind(t *testing.T, st *store.Store, schedule string, minutes int) {
	t.Helper()
	exec(t, st.Pool(), st.Schema(), `DELETE FROM {schema}.schedule_ticks WHERE schedule = $1`, schedule)
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.runs SET run_key = run_key || ' ' || id WHERE run_key LIKE 'schedule:%@%Z'`)
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.schedules SET next_at = date_trunc('minute', now()) - $2 * interval '1 minute'
		WHERE name = $1`, schedule, minutes)
}

func TestDecideTicks_CatchupAndOverlapPoliciesDecideEachTickOnce(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := t.Context()
	decl := store.ScheduleDecl{Name: "minutely", Spec: "@every 1m", Workflow: "report", Input: []byte(`{"n": 1}`)}
	if err := st.DeclareSchedules(ctx, []store.ScheduleDecl{decl}, "w"); err != nil {
		t.Fatal(err)
	}
	// The first pass computes the first tick, after now: nothing due.
	if p := pass(t, st); p.Decided != 0 || p.Next <= 0 || p.Next > time.Minute {
		t.Fatalf("first pass: %+v, want nothing decided and the next tick within a minute", p)
	}
	// 30 minutes of downtime, catch-up latest: the latest tick starts, the
	// 30 before it are missed; its run has the tick's key and input.
	behind(t, st, "minutely", 30)
	if p := pass(t, st); p.Decided != 31 || p.Started != 1 {
		t.Fatalf("after 30 minutes behind: %+v, want 31 decided, 1 started", p)
	}
	if got, want := tickDecisions(t, st, "minutely"), strings.TrimSpace(strings.Repeat("missed ", 30))+" started+run"; got != want {
		t.Fatalf("ticks: %s\nwant %s", got, want)
	}
	if got := scalar[string](t, st, `SELECT r.workflow || ' ' || r.input::text || ' ' || (r.run_key = 'schedule:minutely@' || to_char(t.nominal_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
		FROM {schema}.schedule_ticks t JOIN {schema}.runs r ON r.id = t.run_id WHERE t.schedule = 'minutely'`); got != `report {"n": 1} true` {
		t.Fatalf("the tick's run: %s", got)
	}
	if p := pass(t, st); p.Decided != 0 {
		t.Fatalf("a pass right after: %+v, want nothing decided", p)
	}
	// Overlap skip: the run is still queued, the next ticks are skipped.
	behind(t, st, "minutely", 1)
	pass(t, st)
	if got := tickDecisions(t, st, "minutely"); got != "missed skipped" {
		t.Fatalf("overlap skip: %s", got)
	}
	// Buffer one: the latest due tick waits, then starts once the run
	// before it ended.
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.schedules SET overlap = 'buffer_one' WHERE name = 'minutely'`)
	behind(t, st, "minutely", 0)
	pass(t, st)
	if got := tickDecisions(t, st, "minutely"); got != "buffered" {
		t.Fatalf("overlap buffer_one: %s", got)
	}
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.runs SET status = 'completed', finished_at = now()`)
	if p := pass(t, st); p.Started != 1 {
		t.Fatalf("the pass after the run ended: %+v, want the buffered tick started", p)
	}
	if got := tickDecisions(t, st, "minutely"); got != "buffered+run" {
		t.Fatalf("released buffer: %s", got)
	}
	// Allow: a tick starts beside the open run; cancel_other: it cancels it.
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.schedules SET overlap = 'allow' WHERE name = 'minutely'`)
	behind(t, st, "minutely", 0)
	pass(t, st)
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.schedules SET overlap = 'cancel_other' WHERE name = 'minutely'`)
	behind(t, st, "minutely", 0)
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.schedules SET next_at = next_at - interval '1 second' WHERE name = 'minutely'`) // another nominal time than allow's
	pass(t, st)
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.schedule_ticks WHERE cancelled_run_id IS NOT NULL`); n != 1 {
		t.Fatalf("%d ticks cancelled a run, want 1", n)
	}
	// Catch-up none: the ticks of a downtime are all missed but one
	// decided within its grace; all: each one within the window starts
	// (with allow, beside each other).
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.schedules SET overlap = 'allow', catchup = 'none' WHERE name = 'minutely'`)
	behind(t, st, "minutely", 5)
	pass(t, st)
	if got := tickDecisions(t, st, "minutely"); got != "missed missed missed missed missed started+run" {
		t.Fatalf("catch-up none: %s", got)
	}
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.schedules SET catchup = 'all', catchup_window_ms = 180000 WHERE name = 'minutely'`)
	behind(t, st, "minutely", 5)
	pass(t, st)
	if got := tickDecisions(t, st, "minutely"); got != "missed missed missed started+run started+run started+run" {
		t.Fatalf("catch-up all within 3 minutes: %s", got)
	}
	// Every change of the settings is audited; the bookkeeping is not.
	if got := scalar[string](t, st, `SELECT string_agg(filter->>'change', ' ' ORDER BY id) FROM {schema}.audit_log WHERE action = 'schedule'`); got != fmt.Sprint("created", strings.Repeat(" changed", 5)) {
		t.Fatalf("audit: %s", got)
	}
}

func TestDeclareSchedules_ChangesTheRowOnlyWhenTheDeclarationDoes(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := t.Context()
	decl := store.ScheduleDecl{Name: "nightly", Spec: "0 3 * * *", Zone: "Europe/Berlin", Workflow: "cleanup"}
	for range 3 {
		if err := st.DeclareSchedules(ctx, []store.ScheduleDecl{decl}, "w"); err != nil {
			t.Fatal(err)
		}
	}
	pass(t, st)
	next := scalar[time.Time](t, st, `SELECT next_at FROM {schema}.schedules WHERE name = 'nightly'`)
	if berlin, _ := time.LoadLocation("Europe/Berlin"); next.In(berlin).Hour() != 3 || next.In(berlin).Minute() != 0 {
		t.Fatalf("next tick %s, want 03:00 in Berlin", next.In(berlin))
	}
	decl.Spec = "0 4 * * *"
	if err := st.DeclareSchedules(ctx, []store.ScheduleDecl{decl}, "w"); err != nil {
		t.Fatal(err)
	}
	if got := scalar[string](t, st, `SELECT string_agg(filter->>'change' || ' by ' || (filter->>'by'), ', ' ORDER BY id) FROM {schema}.audit_log WHERE action = 'schedule'`); got != "created by declaration by w, changed by declaration by w" {
		t.Fatalf("audit of three equal declarations and a change: %s", got)
	}
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.schedules WHERE name = 'nightly' AND next_at IS NULL`); n != 1 {
		t.Fatal("a changed spec kept its next tick")
	}
	// Paused by hand: the declaration no longer changes it.
	if err := st.PauseSchedule(ctx, "nightly", true, "INC-9"); err != nil {
		t.Fatal(err)
	}
	decl.Spec = "0 5 * * *"
	if err := st.DeclareSchedules(ctx, []store.ScheduleDecl{decl}, "w"); err != nil {
		t.Fatal(err)
	}
	if got := scalar[string](t, st, `SELECT spec FROM {schema}.schedules WHERE name = 'nightly'`); got != "0 4 * * *" {
		t.Fatalf("a declaration changed a schedule paused by hand: %s", got)
	}
	if got := scalar[string](t, st, `SELECT filter->>'change' || ' ' || note FROM {schema}.audit_log WHERE action = 'schedule' ORDER BY id DESC LIMIT 1`); got != "paused INC-9" {
		t.Fatalf("the pause's audit row: %s", got)
	}
	for _, bad := range []store.ScheduleDecl{
		{Name: "x", Spec: "61 * * * *", Workflow: "w"},
		{Name: "x", Spec: "@daily", Zone: "Mars/Olympus", Workflow: "w"},
		{Name: "x", Spec: "@daily", Workflow: "w", Overlap: "sometimes"},
		{Name: "", Spec: "@daily", Workflow: "w"},
	} {
		if err := st.DeclareSchedules(ctx, []store.ScheduleDecl{bad}, "w"); err == nil {
			t.Errorf("declared %+v", bad)
		}
	}
}

func TestScheduleTickRun_RoundTrips(t *testing.T) {
	at := time.Date(2026, 3, 8, 7, 0, 0, 500, time.FixedZone("EDT", -4*3600))
	for _, name := range []string{"nightly", "billing@eu", "a:b"} {
		key := store.ScheduleTickRun(name, at)
		got, nominal, ok := store.ParseScheduleTickRun(key)
		if !ok || got != name || !nominal.Equal(at) {
			t.Errorf("%q: %q %s %v", key, got, nominal, ok)
		}
	}
	for _, key := range []string{"", "order-42", "schedule:", "schedule:@2026-03-08T07:00:00Z", "schedule:x@yesterday"} {
		if _, _, ok := store.ParseScheduleTickRun(key); ok {
			t.Errorf("%q parsed as a tick's key", key)
		}
	}
}
