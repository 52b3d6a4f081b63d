package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// requestBackfill asks for a backfill in SQL, as a person does, and
// returns the request's ID.
func requestBackfill(t *testing.T, st *store.Store, schedule string, from, to time.Time, note string) int64 {
	t.Helper()
	return scalar[int64](t, st, `SELECT {schema}.backfill_schedule($1, $2, $3, $4)`, schedule, from, to, note)
}

// carryOut is one worker's CarryOutBackfill, which must take a request.
func carryOut(t *testing.T, st *store.Store, retry bool) store.BackfillRequest {
	t.Helper()
	req, ok, err := st.CarryOutBackfill(t.Context(), "test-worker", retry)
	if err != nil || !ok {
		t.Fatalf("carry out a backfill: %+v, %v, %v; want one carried out", req, ok, err)
	}
	return req
}

// A backfill asked for in SQL is a request a worker carries out through
// BackfillSchedule's code: seen by a worker's check, carried out by one
// worker of four trying at once, each tick of the range without a run
// started once (again: nothing), the outcome on the request, audited with
// the person who asked and the note.
func TestBackfillSchedule_InSQLIsARequestOneWorkerCarriesOut(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := t.Context()
	from, to := missedMinutes(t, st)
	if p := pass(t, st); p.Backfill {
		t.Fatalf("a check without a request: %+v", p)
	}

	conn := listen(t, st.RunsChannel())
	id := requestBackfill(t, st, "m", from, to, "INC-3")
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if n, err := conn.WaitForNotification(wait); err != nil || n.Payload != "backfill" {
		t.Fatalf("the request's notice: %+v, %v; want payload backfill", n, err)
	}
	if got := scalar[string](t, st, `SELECT schedule || ' ' || (requested_by = current_user)::text || ' ' || (done_at IS NULL)::text || ' ' || note
		FROM {schema}.schedule_backfills WHERE id = $1`, id); got != "m true true INC-3" {
		t.Fatalf("the request: %s", got)
	}
	if p, err := st.DecideTicks(ctx, "test-worker", 100, false); err != nil || !p.Backfill || p.Decided != 0 {
		t.Fatalf("a check with a request waiting: %+v, %v; want Backfill and nothing decided", p, err)
	}

	// Four workers at once: one carries it out.
	type outcome struct {
		req store.BackfillRequest
		ok  bool
		err error
	}
	results := make(chan outcome, 4)
	for range 4 {
		go func() {
			req, ok, err := st.CarryOutBackfill(ctx, "test-worker", false)
			results <- outcome{req, ok, err}
		}()
	}
	var done store.BackfillRequest
	took := 0
	for range 4 {
		o := <-results
		if o.err != nil {
			t.Fatal(o.err)
		}
		if o.ok {
			took, done = took+1, o.req
		}
	}
	if took != 1 || done.ID != id || !done.Done || done.Error != "" || len(done.Ticks) != 5 || !done.Ticks[0].Equal(from) {
		t.Fatalf("%d workers took the request; its outcome %+v; want one, the 5 ticks without a run from %s", took, done, from)
	}
	if got := tickDecisions(t, st, "m"); got != "backfilled+run backfilled+run backfilled+run backfilled+run backfilled+run started+run" {
		t.Fatalf("after the request: %s", got)
	}
	if got := scalar[string](t, st, `SELECT (done_at IS NOT NULL)::text || ' ' || done_by || ' ' || cardinality(ticks) || ' ' || (ticks[1] = $2)::text || ' ' || coalesce(error, '-')
		FROM {schema}.schedule_backfills WHERE id = $1`, id, from); got != "true test-worker 5 true -" {
		t.Fatalf("the request's outcome: %s", got)
	}
	if got := scalar[string](t, st, `SELECT (actor = current_user)::text || ' ' || runs || ' ' || (filter->>'by') || ' ' || (filter->>'request') || ' ' || (filter->>'worker') || ' ' || note
		FROM {schema}.audit_log WHERE filter->>'change' = 'backfilled'`); got != fmt.Sprintf("true 5 person %d test-worker INC-3", id) {
		t.Fatalf("the backfill's audit row: %s", got)
	}
	// The ticks without a row (the two before the downtime) are decided by
	// the role that asked; the missed ones keep their rows' decided_at and
	// decided_by, as BackfillSchedule keeps them.
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.schedule_ticks WHERE decision = 'backfilled' AND decided_by = current_user`); n != 2 {
		t.Fatalf("%d backfilled ticks decided by the role that asked, want the 2 that had no row", n)
	}
	if p := pass(t, st); p.Backfill {
		t.Fatalf("a check after the request was carried out: %+v", p)
	}
	if _, ok, err := st.CarryOutBackfill(ctx, "test-worker", true); ok || err != nil {
		t.Fatalf("a request carried out again: %v, %v", ok, err)
	}

	// Asked twice: the second starts nothing.
	runs := scalar[int64](t, st, `SELECT count(*) FROM {schema}.runs`)
	again := requestBackfill(t, st, "m", from, to, "")
	if req := carryOut(t, st, false); req.ID != again || !req.Done || req.Error != "" || len(req.Ticks) != 0 {
		t.Fatalf("the same range again: %+v; want done, nothing started", req)
	}
	if got := scalar[string](t, st, `SELECT cardinality(ticks) || ' ' || (ticks IS NOT NULL)::text FROM {schema}.schedule_backfills WHERE id = $1`, again); got != "0 true" {
		t.Fatalf("the second request's ticks: %s; want an empty array", got)
	}
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.runs`); n != runs {
		t.Fatalf("the second request started %d runs", n-runs)
	}
}

// What SQL can check, backfill_schedule refuses with a clear message and
// records nothing: no such schedule, a range reversed, in the future or
// unbounded. What only a worker can find is the request's outcome: more
// ticks than a backfill starts, a schedule deleted since (done, with the
// error); a spec this worker cannot read (left waiting, its error recorded,
// tried again with retry alone, carried out once it can be).
func TestBackfillSchedule_InSQLRefusesWhatItCanAndTheWorkerTheRest(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := t.Context()
	if err := st.DeclareSchedules(ctx, []store.ScheduleDecl{
		{Name: "m", Spec: "@every 1m", Workflow: "wf"},
		{Name: "s", Spec: "@every 1s", Workflow: "wf"},
		{Name: "gone", Spec: "@every 1m", Workflow: "wf"},
	}, "w"); err != nil {
		t.Fatal(err)
	}
	pass(t, st)
	now := scalar[time.Time](t, st, `SELECT date_trunc('second', now())`)
	for _, c := range []struct {
		schedule string
		from, to any
		code     string
		message  string
	}{
		{"none", now.Add(-time.Hour), now, "P0002", "backfill_schedule: no schedule none"},
		{"m", now, now.Add(-time.Hour), "22023", fmt.Sprintf("invalid backfill range: it ends (%s) before it starts (%s)",
			now.Add(-time.Hour).UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))},
		{"m", now.Add(-time.Hour), now.Add(time.Hour), "22023", fmt.Sprintf("invalid backfill range: it ends in the future (%s): its ticks are the workers' to decide",
			now.Add(time.Hour).UTC().Format(time.RFC3339))},
		{"m", nil, now, "22023", "backfill_schedule: from_at and to_at must be finite times"},
		{"m", "-infinity", now, "22023", "backfill_schedule: from_at and to_at must be finite times"},
	} {
		_, err := st.Pool().Exec(ctx, replaceSchema(`SELECT {schema}.backfill_schedule($1, $2::timestamptz, $3::timestamptz)`, st.Schema()), c.schedule, c.from, c.to)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != c.code || pgErr.Message != c.message {
			t.Errorf("backfill_schedule(%s, %v, %v): %v\nwant %s: %s", c.schedule, c.from, c.to, err, c.code, c.message)
		}
	}
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.schedule_backfills`); n != 0 {
		t.Fatalf("%d requests recorded by refused calls", n)
	}

	// Three hours of a one-second schedule: more ticks than a backfill
	// starts. A schedule deleted after the request: none.
	tooMany := requestBackfill(t, st, "s", now.Add(-3*time.Hour), now, "")
	gone := requestBackfill(t, st, "gone", now.Add(-time.Hour), now, "")
	exec(t, st.Pool(), st.Schema(), `DELETE FROM {schema}.schedules WHERE name = 'gone'`)
	for _, want := range []struct {
		id      int64
		message string
		is      error
	}{{tooMany, "more than 10000 ticks", store.ErrBackfillRange}, {gone, `no such schedule: "gone"`, store.ErrNoSchedule}} {
		req := carryOut(t, st, false)
		if req.ID != want.id || !req.Done || !strings.Contains(req.Error, want.message) || req.Ticks != nil {
			t.Errorf("request %d: %+v; want done, refused: %s", want.id, req, want.message)
		}
		if got := scalar[string](t, st, `SELECT (done_at IS NOT NULL)::text || ' ' || (ticks IS NULL)::text || ' ' || error FROM {schema}.schedule_backfills WHERE id = $1`, want.id); got != "true true "+req.Error {
			t.Errorf("request %d's row: %s", want.id, got)
		}
	}
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.schedule_ticks WHERE decision = 'backfilled'`); n != 0 {
		t.Fatalf("%d ticks backfilled by refused requests", n)
	}

	// A spec this worker cannot read (written in SQL, its next tick moved
	// by hand): the request waits, its error recorded, seen by a check and
	// tried again with retry alone.
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.schedules SET spec = 'every minute' WHERE name = 'm'`)
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.schedules SET next_at = date_trunc('minute', now()) + interval '1 minute' WHERE name = 'm'`)
	minute := now.Truncate(time.Minute)
	unread := requestBackfill(t, st, "m", minute.Add(-10*time.Minute), minute, "INC-5")
	if req := carryOut(t, st, false); req.ID != unread || req.Done || !strings.Contains(req.Error, "every minute") {
		t.Fatalf("a request of a spec the worker cannot read: %+v; want it waiting with the parse error", req)
	}
	if p, err := st.DecideTicks(ctx, "test-worker", 100, false); err != nil || p.Backfill {
		t.Fatalf("a check without retry, the request's last try failed: %+v, %v; want no Backfill", p, err)
	}
	if _, ok, err := st.CarryOutBackfill(ctx, "test-worker", false); ok || err != nil {
		t.Fatalf("the failed request taken without retry: %v, %v", ok, err)
	}
	if p, err := st.DecideTicks(ctx, "test-worker", 100, true); err != nil || !p.Backfill {
		t.Fatalf("a check with retry: %+v, %v; want Backfill", p, err)
	}
	// Fixed (its next tick computed anew), it is carried out.
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.schedules SET spec = '@every 1m' WHERE name = 'm'`)
	pass(t, st)
	if req := carryOut(t, st, true); req.ID != unread || !req.Done || req.Error != "" || len(req.Ticks) != 11 {
		t.Fatalf("the request once the spec is fixed: %+v; want the 11 ticks started", req)
	}
	if got := scalar[string](t, st, `SELECT coalesce(error, '-') FROM {schema}.schedule_backfills WHERE id = $1`, unread); got != "-" {
		t.Fatalf("the request carried out keeps the error of its failed try: %s", got)
	}

	// A request whose transaction failed (a timeout, say) is recorded so:
	// tried again with retry alone.
	failed := requestBackfill(t, st, "m", now.Add(-time.Minute), now, "")
	if err := st.FailBackfill(ctx, failed, "test-worker", "timeout"); err != nil {
		t.Fatal(err)
	}
	if p, err := st.DecideTicks(ctx, "test-worker", 100, false); err != nil || p.Backfill {
		t.Fatalf("a check after a failure recorded: %+v, %v; want no Backfill", p, err)
	}
}
