package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/store"
)

// pass runs one pass of the schedules' ticker and fails the test on error.
func pass(t *testing.T, st *store.Store) store.SchedulePass {
	t.Helper()
	p, err := st.DecideTicks(t.Context(), "test-worker", 100, true)
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
	// Every change by hand is audited (five of the policies, eight of the
	// next tick); the passes' bookkeeping is not.
	if got := scalar[string](t, st, `SELECT string_agg(filter->>'change', ' ' ORDER BY id) FROM {schema}.audit_log WHERE action = 'schedule'`); got != fmt.Sprint("created", strings.Repeat(" changed", 13)) {
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

// What one schedule does wrong holds up no other: a tick decided already
// (its row there before the pass), a spec no worker can read. A schedule
// with buffered ticks behind an open run is not rewritten by every pass,
// and a retimed schedule decides the ticks due since, not from now on.
func TestDecideTicks_OneScheduleHoldsUpNoOther(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := t.Context()
	var decls []store.ScheduleDecl
	for _, name := range []string{"a-conflict", "b-bad", "c-fine", "d-buffered"} {
		decls = append(decls, store.ScheduleDecl{Name: name, Spec: "@every 1m", Workflow: "wf", Overlap: store.OverlapBufferOne})
	}
	if err := st.DeclareSchedules(ctx, decls, "w"); err != nil {
		t.Fatal(err)
	}
	pass(t, st)
	for _, name := range []string{"a-conflict", "c-fine", "d-buffered"} {
		behind(t, st, name, 2)
	}
	// a's latest tick has a row already; b's spec was broken in SQL (its
	// retime leaves it to compute, and it cannot be).
	exec(t, st.Pool(), st.Schema(), `INSERT INTO {schema}.schedule_ticks (schedule, nominal_at, decision, decided_by)
		SELECT name, date_trunc('minute', now()), 'skipped', 'someone' FROM {schema}.schedules WHERE name = 'a-conflict'`)
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.schedules SET spec = 'every minute' WHERE name = 'b-bad'`)
	p := pass(t, st)
	if p.Errors["b-bad"] == "" || len(p.Errors) != 1 {
		t.Fatalf("pass errors: %v, want b-bad's", p.Errors)
	}
	if p.Next < 50*time.Millisecond {
		t.Fatalf("next wait %v with a schedule nobody can compute: the ticker would spin", p.Next)
	}
	if got := tickDecisions(t, st, "c-fine"); got != "missed missed started+run" {
		t.Fatalf("c-fine beside a conflict and a bad spec: %s", got)
	}
	if got := tickDecisions(t, st, "a-conflict"); got != "missed missed skipped" {
		t.Fatalf("a-conflict: %s (its tick's row written before the pass stands)", got)
	}
	if got := scalar[string](t, st, `SELECT (coalesce(error, '') <> '' AND next_at IS NULL)::text FROM {schema}.schedules WHERE name = 'b-bad'`); got != "true" {
		t.Fatal("b-bad's error is not recorded, or its next tick was moved")
	}
	// d's run is open, its next due tick buffered; passes leave it alone.
	behind(t, st, "d-buffered", 0)
	pass(t, st)
	if got := tickDecisions(t, st, "d-buffered"); got != "buffered" {
		t.Fatalf("d-buffered: %s", got)
	}
	xmin := scalar[string](t, st, `SELECT xmin::text FROM {schema}.schedules WHERE name = 'd-buffered'`)
	pass(t, st)
	if now := scalar[string](t, st, `SELECT xmin::text FROM {schema}.schedules WHERE name = 'd-buffered'`); now != xmin {
		t.Fatal("a pass rewrote a schedule whose buffered tick waits for an open run")
	}
	// A trigger starts a run outside the overlap policy: the buffered tick
	// still waits for the scheduled run.
	if _, err := st.TriggerSchedule(ctx, "d-buffered", ""); err != nil {
		t.Fatal(err)
	}
	pass(t, st)
	if got := tickDecisions(t, st, "d-buffered"); got != "buffered triggered+run" {
		t.Fatalf("d-buffered after a trigger: %s", got)
	}
	// Fixed: b's ticks are computed again. Retimed while 3 minutes behind,
	// c decides the ticks due since under its new spec.
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.schedules SET spec = '@every 1m' WHERE name = 'b-bad'`)
	behind(t, st, "c-fine", 3)
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.schedules SET spec = '*/1 * * * *' WHERE name = 'c-fine'`)
	pass(t, st) // computes both first ticks: b's from now, c's from where its old timing stood
	pass(t, st)
	if got := tickDecisions(t, st, "c-fine"); got != "missed missed missed buffered" { // its run of before is open still
		t.Fatalf("c-fine retimed 3 minutes behind: %s, want its 4 due ticks decided", got)
	}
	if got := scalar[string](t, st, `SELECT coalesce(error, '-') || ' ' || (next_at > now())::text FROM {schema}.schedules WHERE name = 'b-bad'`); got != "- true" {
		t.Fatalf("b-bad fixed: %s", got)
	}
}

// A backfill starts the ticks of a past range that have no run: the
// missed ones, and those from before the schedule existed; once.
func TestBackfillSchedule_StartsTheTicksOfARangeThatHaveNoRun(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := t.Context()
	from, to := missedMinutes(t, st)
	dry, err := st.BackfillSchedule(ctx, "m", from, to, true, "")
	if err != nil || len(dry) != 5 || !dry[0].Equal(from) {
		t.Fatalf("dry run: %v, %v; want the 5 ticks without a run from %s", dry, err, from)
	}
	if got := tickDecisions(t, st, "m"); got != "missed missed missed started+run" {
		t.Fatalf("the dry run changed the ticks: %s", got)
	}
	done, err := st.BackfillSchedule(ctx, "m", from, to, false, "INC-3")
	if err != nil || len(done) != 5 {
		t.Fatalf("backfill: %v, %v", done, err)
	}
	if got := tickDecisions(t, st, "m"); got != "backfilled+run backfilled+run backfilled+run backfilled+run backfilled+run started+run" {
		t.Fatalf("after the backfill: %s", got)
	}
	if again, err := st.BackfillSchedule(ctx, "m", from, to, false, ""); err != nil || len(again) != 0 {
		t.Fatalf("a second backfill: %v, %v; want nothing", again, err)
	}
	if got := scalar[string](t, st, `SELECT runs || ' ' || note FROM {schema}.audit_log WHERE filter->>'change' = 'backfilled'`); got != "5 INC-3" {
		t.Fatalf("the backfill's audit row: %s", got)
	}
	for _, bad := range [][2]time.Time{{to, from}, {from, to.Add(time.Hour)}, {to.Add(-30 * 24 * time.Hour), to}} {
		if _, err := st.BackfillSchedule(ctx, "m", bad[0], bad[1], true, ""); !errors.Is(err, store.ErrBackfillRange) {
			t.Errorf("backfill %s to %s: %v, want ErrBackfillRange", bad[0], bad[1], err)
		}
	}
	if _, err := st.BackfillSchedule(ctx, "none", from, to, true, ""); !errors.Is(err, store.ErrNoSchedule) {
		t.Errorf("backfill of no schedule: %v", err)
	}
}

// A backfill takes none of the ticks the workers are to decide (from the
// schedule's next one on), none outside its bounds, and starts no run
// whose key exists already; a person's set changes what differs, audited,
// and the same settings change nothing; a deletion takes the ticks, not
// their runs.
func TestBackfillAndSet_LeaveTheWorkersTheirTicks(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := t.Context()
	if err := st.DeclareSchedules(ctx, []store.ScheduleDecl{{Name: "m", Spec: "@every 1m", Workflow: "wf",
		Overlap: store.OverlapCancelOther, Catchup: store.CatchupAll}}, "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.BackfillSchedule(ctx, "m", time.Now().Add(-time.Hour), time.Time{}, true, ""); !errors.Is(err, store.ErrNotComputed) {
		t.Fatalf("a backfill before the next tick is computed: %v, want ErrNotComputed", err)
	}
	pass(t, st)
	behind(t, st, "m", 3) // 3 minutes behind: those ticks are the next pass's
	now := scalar[time.Time](t, st, `SELECT date_trunc('minute', now())`)
	got, err := st.BackfillSchedule(ctx, "m", now.Add(-10*time.Minute), time.Time{}, false, "")
	if err != nil || len(got) != 7 || !got[6].Equal(now.Add(-4*time.Minute)) {
		t.Fatalf("backfill: %v, %v; want the 7 ticks before the next one (%s)", got, err, now.Add(-3*time.Minute))
	}
	pass(t, st) // decides its 4 due ticks; cancel_other cancels within them alone
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.runs r JOIN {schema}.schedule_ticks t ON t.run_id = r.id
		WHERE t.decision = 'backfilled' AND r.status = 'cancelled'`); n != 0 {
		t.Fatalf("%d backfilled runs cancelled by the pass after", n)
	}
	// Deleted and made again: its old ticks' runs keep their keys, and a
	// backfill starts none of them again.
	if err := st.DeleteSchedule(ctx, "m", "again"); err != nil {
		t.Fatal(err)
	}
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.schedule_ticks`); n != 0 {
		t.Fatalf("%d ticks left after the deletion", n)
	}
	if changed, err := st.SetSchedule(ctx, store.ScheduleDecl{Name: "m", Spec: "@every 1m", Workflow: "wf"}, "INC-16"); err != nil || !changed {
		t.Fatalf("set: %v, %v", changed, err)
	}
	pass(t, st)
	behind(t, st, "m", 0)
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.runs SET run_key = substring(run_key FROM '^(schedule:m@[^ ]+)')`) // the old keys back
	if got, err := st.BackfillSchedule(ctx, "m", now.Add(-10*time.Minute), time.Time{}, false, ""); err != nil || len(got) != 0 {
		t.Fatalf("backfill over runs of the same keys: %v, %v; want nothing started", got, err)
	}
	if changed, err := st.SetSchedule(ctx, store.ScheduleDecl{Name: "m", Spec: "@every 1m", Workflow: "wf"}, "again"); err != nil || changed {
		t.Fatalf("the same settings again: %v, %v; want nothing changed", changed, err)
	}
	if got := scalar[string](t, st, `SELECT string_agg(filter->>'change' || ' ' || coalesce(note, '-'), ', ' ORDER BY id) FROM {schema}.audit_log
		WHERE action = 'schedule' AND filter->>'change' IN ('deleted', 'created')`); got != "created -, deleted again, created INC-16" {
		t.Fatalf("audit: %s", got)
	}
	if err := st.DeleteSchedule(ctx, "none", ""); !errors.Is(err, store.ErrNoSchedule) {
		t.Fatalf("delete of no schedule: %v", err)
	}
}

// missedMinutes declares schedule m (@every 1m, catch-up none), puts it
// three minutes behind and passes: its last five minutes then hold three
// missed ticks, the on-time one started, and one from before it existed.
// It returns those five minutes, from and to included.
func missedMinutes(t *testing.T, st *store.Store) (from, to time.Time) {
	t.Helper()
	if err := st.DeclareSchedules(t.Context(), []store.ScheduleDecl{{Name: "m", Spec: "@every 1m", Workflow: "wf", Catchup: store.CatchupNone}}, "w"); err != nil {
		t.Fatal(err)
	}
	pass(t, st)
	behind(t, st, "m", 3)
	pass(t, st) // catch-up none: 3 missed, the on-time one started
	now := scalar[time.Time](t, st, `SELECT date_trunc('minute', now())`)
	return now.Add(-5 * time.Minute), now
}
