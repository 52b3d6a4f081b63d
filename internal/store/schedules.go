package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/schedule"
)

// Overlap and catch-up policies of a schedule (schedules.overlap and
// catchup): package schedule's.
const (
	OverlapSkip        = schedule.OverlapSkip
	OverlapBufferOne   = schedule.OverlapBufferOne
	OverlapBufferAll   = schedule.OverlapBufferAll
	OverlapAllow       = schedule.OverlapAllow
	OverlapCancelOther = schedule.OverlapCancelOther
	CatchupNone        = schedule.CatchupNone
	CatchupLatest      = schedule.CatchupLatest
	CatchupAll         = schedule.CatchupAll
)

// Tick decisions (schedule_ticks.decision).
const (
	TickStarted    = "started"
	TickSkipped    = "skipped"
	TickMissed     = "missed"
	TickBuffered   = "buffered"
	TickTriggered  = "triggered"
	TickBackfilled = "backfilled"
)

// ScheduleDecl is schedule.Declaration, the schedules row code declares.
type ScheduleDecl = schedule.Declaration

// DeclareSchedules writes the schedules code declares (by is the worker's
// label), each upserted by name in one transaction: a schedule that does
// not exist is created; one that exists is changed to the declaration only
// when they differ and no person changed it since (overridden_at), its next
// tick computed again when its timing changed. Each creation and change is
// audited (action schedule, by "declaration by <by>"), by the schedules'
// trigger.
func (s *Store) DeclareSchedules(ctx context.Context, decls []ScheduleDecl, by string) error {
	if len(decls) == 0 {
		return nil
	}
	decls = slices.Clone(decls)
	for i := range decls {
		d, err := decls[i].Checked()
		if err != nil {
			return err
		}
		decls[i] = d
	}
	// In one order, so that two workers declaring the same schedules lock
	// their rows in that order and never wait for each other in a cycle.
	slices.SortFunc(decls, func(a, b ScheduleDecl) int { return strings.Compare(a.Name, b.Name) })
	if err := s.Check(ctx); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('tenure.schedule_by', $1, true)`, "declaration by "+by); err != nil {
			return err
		}
		b := &pgx.Batch{}
		for _, d := range decls {
			b.Queue(s.sql(sqlDeclareSchedule), d.Name, d.Spec, d.Zone, d.Workflow, d.Queue, string(d.Input), d.Priority,
				d.Jitter.Milliseconds(), d.StartsAt, d.EndsAt, d.Overlap, d.BufferMax, d.Catchup, d.CatchupWindow.Milliseconds(),
				d.CatchupMax, by)
		}
		return s.send(ctx, tx, planHot, b).Close()
	})
}

// sqlDeclareSchedule upserts one declared schedule.
const sqlDeclareSchedule = `
	INSERT INTO {schema}.schedules AS s (name, spec, time_zone, workflow, queue, input, priority, jitter_ms, starts_at, ends_at,
	                                     overlap, buffer_max, catchup, catchup_window_ms, catchup_max, declared_by)
	VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
	ON CONFLICT (name) DO UPDATE SET
		spec = EXCLUDED.spec, time_zone = EXCLUDED.time_zone, workflow = EXCLUDED.workflow, queue = EXCLUDED.queue,
		input = EXCLUDED.input, priority = EXCLUDED.priority, jitter_ms = EXCLUDED.jitter_ms, starts_at = EXCLUDED.starts_at,
		ends_at = EXCLUDED.ends_at, overlap = EXCLUDED.overlap, buffer_max = EXCLUDED.buffer_max, catchup = EXCLUDED.catchup,
		catchup_window_ms = EXCLUDED.catchup_window_ms, catchup_max = EXCLUDED.catchup_max, declared_by = EXCLUDED.declared_by,
		updated_at = now()
	WHERE s.overridden_at IS NULL
	  AND {schema}._schedule_settings(s) - 'paused' IS DISTINCT FROM {schema}._schedule_settings(EXCLUDED) - 'paused'`

// ScheduleTickRun is a schedule's tick key for its run: the run key
// 'schedule:<name>@<nominal time, RFC 3339 in UTC>', unique per tick.
func ScheduleTickRun(name string, nominal time.Time) string {
	return "schedule:" + name + "@" + nominal.UTC().Format(time.RFC3339Nano)
}

// ParseScheduleTickRun is ScheduleTickRun's inverse: the schedule and the
// nominal time of a tick's run key; ok false for another key.
func ParseScheduleTickRun(key string) (name string, nominal time.Time, ok bool) {
	rest, found := strings.CutPrefix(key, "schedule:")
	i := strings.LastIndexByte(rest, '@')
	if !found || i <= 0 {
		return "", time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, rest[i+1:])
	if err != nil {
		return "", time.Time{}, false
	}
	return rest[:i], t, true
}

// SchedulePass is what one pass of DecideTicks did.
type SchedulePass struct {
	// Decided counts the ticks decided; Started the runs started.
	Decided, Started int
	// Full is true when the pass took as many schedules as it was allowed:
	// more may be due.
	Full bool
	// Next is how long, by the database's clock, until the earliest next
	// tick of a schedule not paused; 0 when none is known (no schedule, or
	// one to compute). A schedule with buffered ticks is looked at again
	// at each pass, whatever Next says.
	Next time.Duration
	// Errors are the schedules whose spec no worker can compute (written
	// in SQL), found by this pass, with why: they decide nothing until
	// fixed.
	Errors map[string]string
	// Ticks are the ticks the pass decided (a buffered tick that got its
	// run is one of them again, decided "started").
	Ticks []DecidedTick
	// Empty is true when the schema holds no schedule at all.
	Empty bool
	// Backfill is true when a backfill requested in SQL waits for a worker
	// (one whose last try failed only with retry): CarryOutBackfill carries
	// it out. The check that says so is the pass's first statement, so an
	// idle worker's check stays one statement.
	Backfill bool
}

// sqlScheduleCheck is a pass's first statement: whether a schedule is due
// (or to compute, or has buffered ticks whose open run ended), whether any
// exists, how long until the next tick, and whether a backfill requested in
// SQL waits, each through an index.
const sqlScheduleCheck = `
	SELECT EXISTS (SELECT 1 FROM {schema}.schedules s WHERE s.paused_at IS NULL AND s.next_at IS NULL)
	       -- The earliest next tick, by schedules_due_idx's order: a min, not
	       -- an EXISTS, which a plan may answer by a scan of every schedule
	       -- when none is due.
	       OR coalesce((SELECT min(s.next_at) FROM {schema}.schedules s WHERE s.paused_at IS NULL AND (s.error IS NULL OR $1)) <= now(), false)
	       OR EXISTS (SELECT 1 FROM {schema}.schedules s
	                  WHERE s.buffered > 0 AND s.paused_at IS NULL AND s.next_at > now()
	                    AND NOT EXISTS (SELECT 1 FROM {schema}.runs r WHERE r.id = s.last_run_id AND r.status IN ('queued', 'running'))),
	       (SELECT min(s.name) FROM {schema}.schedules s) IS NOT NULL,
	       extract(epoch FROM (SELECT min(s.next_at) FROM {schema}.schedules s
	                           WHERE s.paused_at IS NULL AND s.next_at > now() AND s.next_at < 'infinity' AND s.error IS NULL) - now()) * 1000,
	       -- A backfill request not carried out yet, by schedule_backfills_pending_idx
	       -- (however long the requests' history), and one whose last try
	       -- failed only with $1, as the schedules with an error.
	       EXISTS (SELECT 1 FROM {schema}.schedule_backfills b WHERE b.done_at IS NULL AND (b.error IS NULL OR $1))`

// DecidedTick is a tick a pass decided: of which schedule, what, and how
// late (the database's time of the pass less the tick's nominal time).
type DecidedTick struct {
	Schedule, Decision string
	Lag                time.Duration
}

// minScheduleWait is the shortest wait a pass asks for: what it leaves due
// another pass holds.
const minScheduleWait = 50 * time.Millisecond

// maxTicksPerPass bounds the ticks one pass decides of one schedule: a
// schedule due for longer (a one-second schedule paused for a day) is
// decided in chunks, the ticks of a chunk all missed when newer ones remain.
const maxTicksPerPass = schedule.MaxCatchup

// dueSchedule is a schedules row a pass holds, with what it decides.
type dueSchedule struct {
	name, spec, zone, workflow, queue string
	input                             []byte
	priority                          int
	jitter                            time.Duration
	startsAt, endsAt                  pgtype.Timestamptz
	overlap, catchup                  string
	bufferMax, catchupMax             int
	catchupWindow                     time.Duration
	nextAt, retimedFrom               pgtype.Timestamptz
	lastRun                           pgtype.UUID
	lastStatus                        string
	buffered                          []time.Time // nominal times, oldest first
}

// DecideTicks is one pass of the schedules' ticker, in one transaction:
// it locks up to limit schedules that are due by the database's clock (or
// whose next tick is to be computed, or that have buffered ticks), skipping
// those another worker holds, and for each decides every tick due since its
// last pass, as its catch-up and overlap policies say: a row per tick, a run
// per tick started (with the tick's run key), the next tick. by names the
// deciding worker.
//
// A schedule whose ticks a worker could not compute (its error set) counts
// as due only with retry: a worker retries them now and then, not at each
// check.
func (s *Store) DecideTicks(ctx context.Context, by string, limit int, retry bool) (SchedulePass, error) {
	var pass SchedulePass
	// One statement first, outside a transaction: whether anything is
	// due, and the next tick. The transaction that locks and writes is
	// opened only for a pass with work, so that a worker whose schedules
	// are not due (or that has none) costs one statement a check.
	var due, exists bool
	var nextMS pgtype.Float8
	if err := s.query(ctx, s.pool, planHot, scanOne(&due, &exists, &nextMS, &pass.Backfill), s.sql(sqlScheduleCheck), retry); err != nil {
		return pass, s.wrap("look for due schedules", err)
	}
	pass.Empty = !exists
	if nextMS.Valid {
		pass.Next = max(time.Duration(nextMS.Float64*float64(time.Millisecond)), minScheduleWait)
	}
	if !due {
		return pass, nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		locked, now, err := s.lockDue(ctx, tx, limit)
		if err != nil {
			return err
		}
		pass.Full = len(locked) == limit
		if len(locked) > 0 {
			d := &decisions{by: by, now: now}
			for _, sc := range locked {
				if err := d.decide(sc); err != nil {
					if pass.Errors == nil {
						pass.Errors = map[string]string{}
					}
					pass.Errors[sc.name] = err.Error()
					d.fail(sc.name, err)
				}
			}
			if err := d.write(ctx, s, tx); err != nil {
				return err
			}
			pass.Decided, pass.Started = len(d.ticks), d.started
			for _, t := range d.ticks {
				decision := t.decision
				if t.release {
					decision = TickStarted
				}
				pass.Ticks = append(pass.Ticks, DecidedTick{Schedule: t.schedule, Decision: decision, Lag: now.Sub(t.nominal)})
			}
		}
		// The pass moved its schedules' next ticks: the next check is
		// soon (and says when).
		if pass.Decided > 0 || len(locked) > 0 {
			pass.Next = minScheduleWait
		}
		return nil
	})
	if err != nil {
		return SchedulePass{}, s.wrap("decide schedule ticks", err)
	}
	return pass, nil
}

// lockDue locks the due schedules, and returns them with the database's
// time.
func (s *Store) lockDue(ctx context.Context, tx pgx.Tx, limit int) ([]dueSchedule, time.Time, error) {
	var due []dueSchedule
	var now time.Time
	err := s.query(ctx, tx, planWrite, func(rows pgx.Rows) error {
		for rows.Next() {
			var d dueSchedule
			var jitterMS, windowMS int64
			if err := rows.Scan(&d.name, &d.spec, &d.zone, &d.workflow, &d.queue, &d.input, &d.priority, &jitterMS,
				&d.startsAt, &d.endsAt, &d.overlap, &d.bufferMax, &d.catchup, &windowMS, &d.catchupMax, &d.nextAt,
				&d.retimedFrom, &d.lastRun, &d.lastStatus, &d.buffered, &now); err != nil {
				return err
			}
			d.jitter, d.catchupWindow = time.Duration(jitterMS)*time.Millisecond, time.Duration(windowMS)*time.Millisecond
			due = append(due, d)
		}
		return rows.Err()
	}, s.sql(sqlLockDue), limit)
	return due, now, err
}

// sqlLockDue locks the schedules whose next tick is to be computed, then
// the due ones, earliest first, then those with buffered ticks, each a
// range of its index, without waiting for those another worker's pass
// holds, and reads each one's last run's status by key and its buffered
// ticks.
const sqlLockDue = `
	WITH fresh AS (
		SELECT s.* FROM {schema}.schedules s
		WHERE s.paused_at IS NULL AND s.next_at IS NULL
		LIMIT $1
		FOR UPDATE SKIP LOCKED),
	due AS (
		SELECT s.* FROM {schema}.schedules s
		WHERE s.paused_at IS NULL AND s.next_at <= now()
		ORDER BY s.next_at
		LIMIT $1
		FOR UPDATE SKIP LOCKED),
	-- Buffered ticks whose open run ended: a lookup of the run by key
	-- for each schedule with buffered ticks.
	held AS (
		SELECT s.* FROM {schema}.schedules s
		WHERE s.buffered > 0 AND s.paused_at IS NULL AND s.next_at > now()
		  AND NOT EXISTS (SELECT 1 FROM {schema}.runs r WHERE r.id = s.last_run_id AND r.status IN ('queued', 'running'))
		ORDER BY s.name
		LIMIT $1
		FOR UPDATE SKIP LOCKED),
	both_ AS (SELECT * FROM fresh UNION ALL SELECT * FROM due UNION ALL SELECT * FROM held)
	SELECT b.name, b.spec, b.time_zone, b.workflow, b.queue, b.input, b.priority, b.jitter_ms, b.starts_at, b.ends_at,
	       b.overlap, b.buffer_max, b.catchup, b.catchup_window_ms, b.catchup_max, b.next_at, b.retimed_from, b.last_run_id,
	       coalesce((SELECT r.status FROM {schema}.runs r WHERE r.id = b.last_run_id), ''),
	       CASE WHEN b.buffered > 0 THEN ARRAY(SELECT t.nominal_at FROM {schema}.schedule_ticks t
	                                           WHERE t.schedule = b.name AND t.decision = 'buffered' AND t.run_id IS NULL
	                                           ORDER BY t.nominal_at)
	            ELSE '{}'::timestamptz[] END,
	       now()
	FROM both_ b
	LIMIT $1`

// decisions is what a pass writes.
type decisions struct {
	by      string
	now     time.Time
	runs    []NewRun
	ticks   []tick
	updates []scheduleUpdate
	cancels []*uuid.UUID
	failed  []scheduleUpdate // error alone
	started int
}

// tick is one schedule_ticks row to write; release marks a buffered tick
// that now gets its run (an update of its row).
type tick struct {
	schedule  string
	nominal   time.Time
	decision  string
	run       *uuid.UUID
	cancelled *uuid.UUID
	release   bool
}

// scheduleUpdate is a schedule's bookkeeping after a pass.
type scheduleUpdate struct {
	name     string
	next     time.Time // infinity: time.Time{} with ended
	ended    bool
	lastRun  *uuid.UUID
	buffered int
	err      string
}

// fail records why schedule name's ticks cannot be computed by this
// worker: its error column alone, the schedule left due for a worker that
// can (one of another build, or with the zone's data) to decide.
func (d *decisions) fail(name string, err error) {
	d.failed = append(d.failed, scheduleUpdate{name: name, err: err.Error()})
}

// maxDueCounted bounds the due ticks a pass counts of one schedule beyond
// those it decides: a schedule further behind than that (a one-second
// schedule paused for eleven days) is decided chunk by chunk, every tick
// missed, until its last chunk is within reach.
const maxDueCounted = 1_000_000

// decide decides the due ticks of sc.
func (d *decisions) decide(sc dueSchedule) error {
	spec, err := schedule.Parse(sc.spec, sc.zone)
	if err != nil {
		return err
	}
	now := d.now
	next := func(t time.Time) (time.Time, bool) {
		n := spec.Next(t)
		if n.IsZero() || (sc.endsAt.Valid && n.After(sc.endsAt.Time)) {
			return time.Time{}, false
		}
		return n, true
	}
	up := scheduleUpdate{name: sc.name, buffered: len(sc.buffered)}
	if sc.lastRun.Valid {
		id := uuid.UUID(sc.lastRun.Bytes)
		up.lastRun = &id
	}
	open := sc.lastStatus == "queued" || sc.lastStatus == "running"
	buffered := sc.buffered
	start := func(nominal time.Time) *uuid.UUID {
		id := uuid.Must(uuid.NewV7())
		delay := nominal.Add(schedule.Jitter(sc.name, nominal, sc.jitter)).Sub(now)
		d.runs = append(d.runs, NewRun{ID: id, Workflow: sc.workflow, Queue: sc.queue, Priority: sc.priority,
			Key: ScheduleTickRun(sc.name, nominal), Input: sc.input, Delay: max(delay, 0)})
		d.started++
		up.lastRun, open = &id, true
		return &id
	}
	// The run before ended: the oldest buffered tick starts.
	released := false
	if !open && len(buffered) > 0 {
		d.ticks = append(d.ticks, tick{schedule: sc.name, nominal: buffered[0], decision: TickBuffered, run: start(buffered[0]), release: true})
		buffered, released = buffered[1:], true
	}
	up.buffered = len(buffered)
	if !sc.nextAt.Valid { // created or retimed
		n, ok := next(firstFrom(sc, now))
		up.next, up.ended = n, !ok
		d.updates = append(d.updates, up)
		return nil
	}
	if sc.nextAt.InfinityModifier != pgtype.Finite || sc.nextAt.Time.After(now) { // buffered ticks alone
		if released {
			up.next, up.ended = sc.nextAt.Time, sc.nextAt.InfinityModifier != pgtype.Finite
			d.updates = append(d.updates, up)
		}
		return nil
	}
	due, total, t, more, cutoff := dueTicks(sc.nextAt.Time, now, next)
	starts := map[int]bool{}
	if !cutoff {
		starts = catchupStarts(sc, due, total-1, now, next)
	}
	for i, n := range due {
		tk := tick{schedule: sc.name, nominal: n, decision: TickMissed}
		if starts[i] {
			switch {
			case !open || sc.overlap == OverlapAllow:
				tk.decision, tk.run = TickStarted, start(n)
			case sc.overlap == OverlapCancelOther:
				other := *up.lastRun
				d.cancels = append(d.cancels, &other)
				tk.decision, tk.run, tk.cancelled = TickStarted, start(n), &other
			case (sc.overlap == OverlapBufferOne && len(buffered) < 1) || (sc.overlap == OverlapBufferAll && len(buffered) < sc.bufferMax):
				tk.decision = TickBuffered
				buffered = append(buffered, n)
			default:
				tk.decision = TickSkipped
			}
		}
		d.ticks = append(d.ticks, tk)
	}
	up.next, up.ended = t, !more
	up.buffered = len(buffered)
	d.updates = append(d.updates, up)
	return nil
}

// firstFrom is where a schedule created or retimed looks for its first
// tick (after it): now, or where its old timing stood when that is past
// (the ticks due since are decided, under the new timing), not before its
// start.
func firstFrom(sc dueSchedule, now time.Time) time.Time {
	from := now
	if sc.retimedFrom.Valid && sc.retimedFrom.Time.Before(now) {
		from = sc.retimedFrom.Time.Add(-time.Nanosecond)
	}
	if sc.startsAt.Valid && sc.startsAt.Time.After(from) {
		from = sc.startsAt.Time.Add(-time.Nanosecond)
	}
	return from
}

// dueTicks lists the due ticks from first on, as of now: the first
// maxTicksPerPass of them, decided by this pass, and counts all of them
// (up to maxDueCounted more), so that the catch-up policy picks among all
// of them, whichever chunk they fall in. It returns the next tick not
// decided by this pass (and more false when none is left), and cutoff true
// when more are due than were counted: none of this chunk is among the
// latest.
func dueTicks(first, now time.Time, next func(time.Time) (time.Time, bool)) (due []time.Time, total int, t time.Time, more, cutoff bool) {
	t, more = first, true
	resume := time.Time{} // the first tick not decided by this pass, when the due ones do not fit
	for more && !t.After(now) && total < maxTicksPerPass+maxDueCounted {
		if total < maxTicksPerPass {
			due = append(due, t)
		} else if total == maxTicksPerPass {
			resume = t
		}
		total++
		t, more = next(t)
	}
	cutoff = more && !t.After(now)
	if !resume.IsZero() {
		t, more = resume, true
	}
	return due, total, t, more, cutoff
}

// catchupStarts says which of the due ticks start, by sc's catch-up
// policy; last is the latest due tick's rank among all of them.
func catchupStarts(sc dueSchedule, due []time.Time, last int, now time.Time, next func(time.Time) (time.Time, bool)) map[int]bool {
	starts := map[int]bool{}
	switch sc.catchup {
	case CatchupLatest:
		starts[last] = true
	case CatchupNone:
		// Only a tick decided within its grace is on time: the shorter
		// of a minute and its interval to the next.
		for i, n := range due {
			grace := time.Minute
			if i+1 < len(due) {
				grace = min(grace, due[i+1].Sub(n))
			} else if i == last {
				if nx, ok := next(n); ok {
					grace = min(grace, nx.Sub(n))
				}
			}
			if now.Sub(n) <= grace {
				starts[i] = true
			}
		}
	case CatchupAll:
		for i := range due {
			if last-i < sc.catchupMax && now.Sub(due[i]) <= sc.catchupWindow {
				starts[i] = true
			}
		}
	}
	return starts
}

// write writes the pass's decisions in tx: the runs, the ticks, the
// schedules' bookkeeping, the cancels of runs that overlap cancel_other
// replaced.
func (d *decisions) write(ctx context.Context, s *Store, tx pgx.Tx) error {
	if len(d.runs) > 0 {
		ins, err := s.InsertRuns(ctx, tx, d.runs)
		if err != nil {
			return err
		}
		d.remap(ins)
	}
	b := &pgx.Batch{}
	// The audit trigger passes over a pass's bookkeeping.
	b.Queue(`SELECT pg_catalog.set_config('tenure.ticking', 'on', true)`)
	d.queueTicks(s, b)
	d.queueUpdates(s, b)
	if len(d.cancels) > 0 {
		ids := make([]pgtype.UUID, len(d.cancels))
		for i, c := range d.cancels {
			ids[i] = pgUUID(c)
		}
		b.Queue(s.sql(`SELECT {schema}.cancel_run(x) FROM unnest($1::uuid[]) AS x`), ids)
	}
	if b.Len() == 1 {
		return nil
	}
	return s.send(ctx, tx, planWrite, b).Close()
}

// remap makes the pass's runs those InsertRuns returned: a run of the
// tick's key existed already (made by hand with it), and the tick, the
// schedule's last run and a cancel name that run.
func (d *decisions) remap(ins []Inserted) {
	byKey := map[uuid.UUID]uuid.UUID{}
	for i, r := range ins {
		byKey[d.runs[i].ID] = r.ID
	}
	for _, t := range d.ticks {
		if t.run != nil {
			*t.run = byKey[*t.run]
		}
	}
	for _, u := range d.updates {
		if id, ok := byKey[ptrID(u.lastRun)]; ok {
			*u.lastRun = id
		}
	}
	for _, c := range d.cancels {
		if id, ok := byKey[*c]; ok {
			*c = id
		}
	}
}

// queueTicks queues the ticks' rows: those decided, and the buffered ones
// that now get their runs.
func (d *decisions) queueTicks(s *Store, b *pgx.Batch) {
	var names, decisions []string
	var nominals []time.Time
	var runIDs, cancelled []pgtype.UUID
	var relNames []string
	var relNominals []time.Time
	var relRuns []pgtype.UUID
	for _, t := range d.ticks {
		if t.release {
			relNames, relNominals, relRuns = append(relNames, t.schedule), append(relNominals, t.nominal), append(relRuns, pgUUID(t.run))
			continue
		}
		names, nominals, decisions = append(names, t.schedule), append(nominals, t.nominal), append(decisions, t.decision)
		runIDs, cancelled = append(runIDs, pgUUID(t.run)), append(cancelled, pgUUID(t.cancelled))
	}
	if len(names) > 0 {
		b.Queue(s.sql(`
			INSERT INTO {schema}.schedule_ticks (schedule, nominal_at, decision, run_id, started_at, cancelled_run_id, decided_by)
			SELECT x.s, x.n, x.d, x.r, CASE WHEN x.r IS NOT NULL THEN now() END, x.c, $6
			FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::uuid[], $5::uuid[]) AS x(s, n, d, r, c)
			-- A tick decided already (its row written by hand, or a clock
			-- stepped back) keeps its row; its run, of the tick's key, is
			-- the one it had.
			ON CONFLICT (schedule, nominal_at) DO NOTHING`),
			names, nominals, decisions, runIDs, cancelled, d.by)
	}
	if len(relNames) > 0 {
		b.Queue(s.sql(`
			UPDATE {schema}.schedule_ticks t SET run_id = x.r, started_at = now()
			FROM unnest($1::text[], $2::timestamptz[], $3::uuid[]) AS x(s, n, r)
			WHERE t.schedule = x.s AND t.nominal_at = x.n AND t.run_id IS NULL`), relNames, relNominals, relRuns)
	}
}

// queueUpdates queues the schedules' bookkeeping, and the errors of those
// this worker could not compute.
func (d *decisions) queueUpdates(s *Store, b *pgx.Batch) {
	if len(d.updates) > 0 {
		var upNames, errs []string
		var nexts []pgtype.Timestamptz
		var lasts []pgtype.UUID
		var bufs []int32
		for _, u := range d.updates {
			n := pgtype.Timestamptz{Time: u.next, Valid: true}
			if u.ended {
				n = pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
			}
			upNames, nexts, lasts = append(upNames, u.name), append(nexts, n), append(lasts, pgUUID(u.lastRun))
			bufs, errs = append(bufs, int32(u.buffered)), append(errs, u.err)
		}
		b.Queue(s.sql(`
			UPDATE {schema}.schedules s
			SET next_at = x.n, last_run_id = x.r, buffered = x.b, error = nullif(x.e, ''), retimed_from = NULL
			FROM unnest($1::text[], $2::timestamptz[], $3::uuid[], $4::int[], $5::text[]) AS x(name, n, r, b, e)
			WHERE s.name = x.name`), upNames, nexts, lasts, bufs, errs)
	}
	if len(d.failed) > 0 {
		var fNames, fErrs []string
		for _, u := range d.failed {
			fNames, fErrs = append(fNames, u.name), append(fErrs, u.err)
		}
		b.Queue(s.sql(`
			UPDATE {schema}.schedules s SET error = x.e
			FROM unnest($1::text[], $2::text[]) AS x(name, e)
			WHERE s.name = x.name AND s.error IS DISTINCT FROM x.e`), fNames, fErrs)
	}
}

// ptrID is *id, or the nil UUID.
func ptrID(id *uuid.UUID) uuid.UUID {
	if id == nil {
		return uuid.Nil
	}
	return *id
}

// pgUUID is id as a parameter; NULL for nil.
func pgUUID(id *uuid.UUID) pgtype.UUID {
	if id == nil {
		return pgtype.UUID{}
	}
	return pgtype.UUID{Bytes: *id, Valid: true}
}

// TriggerSchedule starts a run of schedule name now, outside its spec and
// its overlap policy (the run neither waits for the schedule's last run nor
// counts as it): a tick of decision triggered at the database's time, by
// the role, audited with note. It calls the SQL function trigger_schedule,
// the one implementation. It returns the run's ID, or ErrNoSchedule.
func (s *Store) TriggerSchedule(ctx context.Context, name, note string) (uuid.UUID, error) {
	var run uuid.UUID
	err := s.query(ctx, s.pool, planHot, scanOne((*[16]byte)(&run)), s.sql(`SELECT {schema}.trigger_schedule($1, nullif($2, ''))`), name, note)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "P0002" { // no_data_found: no such schedule
		return uuid.Nil, fmt.Errorf("%w: %q", ErrNoSchedule, name)
	}
	return run, s.wrap("trigger schedule", err)
}

// ErrNoSchedule is returned for a schedule that does not exist.
var ErrNoSchedule = errors.New("no such schedule")

// PauseSchedule pauses (pause true, with note) or resumes schedule name, as
// a person does: audited with note, and overriding its declaration from
// then on. Ticks due while it is paused are decided at its resumption, as
// its catch-up policy says. It returns ErrNoSchedule for one that does not
// exist.
func (s *Store) PauseSchedule(ctx context.Context, name string, pause bool, note string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('tenure.note', $1, true)`, note); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, s.sql(`
			UPDATE {schema}.schedules
			SET paused_at = CASE WHEN $2 THEN coalesce(paused_at, now()) END, pause_note = CASE WHEN $2 THEN nullif($3, '') END,
			    overridden_at = now(), updated_at = now()
			WHERE name = $1`), name, pause, note)
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("%w: %q", ErrNoSchedule, name)
		}
		return err
	})
	if err != nil && !errors.Is(err, ErrNoSchedule) {
		err = s.wrap("pause schedule", err)
	}
	return err
}

// Schedule is record.Schedule, defined there for applications and operators to read.
type Schedule = record.Schedule

// ScheduleTick is record.ScheduleTick, defined there for applications and operators to read.
type ScheduleTick = record.ScheduleTick

// sqlSchedules reads schedules, each one's last run's status by key.
const sqlSchedules = `
	SELECT s.name, s.spec, s.time_zone, s.workflow, s.queue, s.input, s.priority, s.jitter_ms, s.starts_at, s.ends_at,
	       s.overlap, s.buffer_max, s.catchup, s.catchup_window_ms, s.catchup_max,
	       CASE WHEN s.next_at < 'infinity' THEN s.next_at END, s.next_at = 'infinity', s.last_run_id,
	       coalesce((SELECT r.status FROM {schema}.runs r WHERE r.id = s.last_run_id), ''), s.buffered,
	       s.paused_at, coalesce(s.pause_note, ''), coalesce(s.error, ''), coalesce(s.declared_by, ''), s.overridden_at,
	       s.created_at, s.updated_at
	FROM {schema}.schedules s`

func scanSchedule(row pgx.CollectableRow) (Schedule, error) {
	var sc Schedule
	var jitterMS, windowMS int64
	var last pgtype.UUID
	var ended pgtype.Bool
	err := row.Scan(&sc.Name, &sc.Spec, &sc.Zone, &sc.Workflow, &sc.Queue, &sc.Input, &sc.Priority, &jitterMS, &sc.StartsAt, &sc.EndsAt,
		&sc.Overlap, &sc.BufferMax, &sc.Catchup, &windowMS, &sc.CatchupMax, &sc.NextAt, &ended, &last, &sc.LastRunStatus, &sc.Buffered,
		&sc.PausedAt, &sc.PauseNote, &sc.Error, &sc.DeclaredBy, &sc.OverriddenAt, &sc.CreatedAt, &sc.UpdatedAt)
	sc.Jitter, sc.CatchupWindow = time.Duration(jitterMS)*time.Millisecond, time.Duration(windowMS)*time.Millisecond
	sc.Ended = ended.Valid && ended.Bool
	if last.Valid {
		id := uuid.UUID(last.Bytes)
		sc.LastRunID = &id
	}
	return sc, err
}

// Schedules lists every schedule, by name.
func (s *Store) Schedules(ctx context.Context) ([]Schedule, error) {
	var out []Schedule
	err := s.query(ctx, s.pool, planHot, func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, scanSchedule)
		return err
	}, s.sql(sqlSchedules+` ORDER BY s.name`))
	return out, s.wrap("list schedules", err)
}

// GetSchedule reads schedule name, or returns ErrNoSchedule.
func (s *Store) GetSchedule(ctx context.Context, name string) (Schedule, error) {
	var out []Schedule
	err := s.query(ctx, s.pool, planHot, func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, scanSchedule)
		return err
	}, s.sql(sqlSchedules+` WHERE s.name = $1`), name)
	if err != nil {
		return Schedule{}, s.wrap("get schedule", err)
	}
	if len(out) == 0 {
		return Schedule{}, fmt.Errorf("%w: %q", ErrNoSchedule, name)
	}
	return out[0], nil
}

// ScheduleTicks lists schedule name's ticks decided, newest first, at most
// limit (0: 100), through the ticks' primary key.
func (s *Store) ScheduleTicks(ctx context.Context, name string, limit int) ([]ScheduleTick, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []ScheduleTick
	err := s.query(ctx, s.pool, planHot, func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (ScheduleTick, error) {
			var t ScheduleTick
			var run, cancelled pgtype.UUID
			err := row.Scan(&t.Schedule, &t.NominalAt, &t.DecidedAt, &t.DecidedBy, &t.Decision, &run, &t.StartedAt, &cancelled)
			if run.Valid {
				id := uuid.UUID(run.Bytes)
				t.RunID = &id
			}
			if cancelled.Valid {
				id := uuid.UUID(cancelled.Bytes)
				t.CancelledRunID = &id
			}
			return t, err
		})
		return err
	}, s.sql(`
		SELECT schedule, nominal_at, decided_at, decided_by, decision, run_id, started_at, cancelled_run_id
		FROM {schema}.schedule_ticks WHERE schedule = $1
		ORDER BY nominal_at DESC LIMIT $2`), name, limit)
	return out, s.wrap("list schedule ticks", err)
}

// SetSchedule creates schedule d, or changes the one of its name to d, as
// a person does: audited with note (created or changed), and from then on
// the declarations of code no longer change it (overridden_at). A change of
// its timing decides the ticks due since under the new one. It reports
// whether anything changed: the settings it has already change nothing.
func (s *Store) SetSchedule(ctx context.Context, d ScheduleDecl, note string) (changed bool, err error) {
	d, err = d.Checked()
	if err != nil {
		return false, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('tenure.note', $1, true)`, note); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, s.sql(`
			INSERT INTO {schema}.schedules AS s (name, spec, time_zone, workflow, queue, input, priority, jitter_ms, starts_at, ends_at,
			                                     overlap, buffer_max, catchup, catchup_window_ms, catchup_max, overridden_at)
			VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11, $12, $13, $14, $15, now())
			ON CONFLICT (name) DO UPDATE SET
				spec = EXCLUDED.spec, time_zone = EXCLUDED.time_zone, workflow = EXCLUDED.workflow, queue = EXCLUDED.queue,
				input = EXCLUDED.input, priority = EXCLUDED.priority, jitter_ms = EXCLUDED.jitter_ms, starts_at = EXCLUDED.starts_at,
				ends_at = EXCLUDED.ends_at, overlap = EXCLUDED.overlap, buffer_max = EXCLUDED.buffer_max, catchup = EXCLUDED.catchup,
				catchup_window_ms = EXCLUDED.catchup_window_ms, catchup_max = EXCLUDED.catchup_max,
				overridden_at = now(), updated_at = now()
			-- The same settings change nothing, and take nothing from the declarations.
			WHERE {schema}._schedule_settings(s) - 'paused' IS DISTINCT FROM {schema}._schedule_settings(EXCLUDED) - 'paused'`),
			d.Name, d.Spec, d.Zone, d.Workflow, d.Queue, string(d.Input), d.Priority, d.Jitter.Milliseconds(), d.StartsAt, d.EndsAt,
			d.Overlap, d.BufferMax, d.Catchup, d.CatchupWindow.Milliseconds(), d.CatchupMax)
		changed = tag.RowsAffected() > 0
		return err
	})
	return changed, s.wrap("set schedule", err)
}

// DeleteSchedule deletes schedule name and its ticks (not their runs),
// audited with note, or returns ErrNoSchedule. A worker whose code
// declares it creates it again at its next start.
func (s *Store) DeleteSchedule(ctx context.Context, name, note string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('tenure.note', $1, true)`, note); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, s.sql(`DELETE FROM {schema}.schedules WHERE name = $1`), name)
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("%w: %q", ErrNoSchedule, name)
		}
		return err
	})
	if err != nil && !errors.Is(err, ErrNoSchedule) {
		err = s.wrap("delete schedule", err)
	}
	return err
}
