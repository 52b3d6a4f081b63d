package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tenurehq/tenure/schedule"
)

// maxBackfill bounds the ticks one backfill starts.
const maxBackfill = 10_000

// ErrNotComputed is returned by BackfillSchedule for a schedule whose next
// tick no worker has computed yet: where the workers' ticks begin is not
// known.
var ErrNotComputed = errors.New("the schedule's next tick is not computed yet")

// ErrBackfillRange is returned by BackfillSchedule for a range that ends in
// the future, ends before it starts, or holds more than maxBackfill ticks.
var ErrBackfillRange = errors.New("invalid backfill range")

// BackfillSchedule starts a run for each tick of schedule name in [from,
// to] that has none: a tick without a row (from before the schedule was
// created, say), or one decided missed or skipped; within the schedule's
// bounds, and before its next tick (the ticks from there on are the
// workers' to decide).
// Each is decided backfilled (a missed or skipped tick's row keeps its
// decided_at), its run of the tick's key, outside the overlap policy, all in
// one transaction with the schedule's row locked, audited with note (the
// range and the count). A zero to is the database's now. With dryRun it
// changes nothing and returns the ticks it would start. It returns the
// ticks' nominal times, in order.
func (s *Store) BackfillSchedule(ctx context.Context, name string, from, to time.Time, dryRun bool, note string) ([]time.Time, error) {
	var ticks []time.Time
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		ticks, err = s.backfillTx(ctx, tx, backfill{name: name, from: from, to: to, dryRun: dryRun, note: note})
		return err
	})
	if err != nil && !errors.Is(err, ErrNoSchedule) && !errors.Is(err, ErrBackfillRange) && !errors.Is(err, ErrNotComputed) {
		err = s.wrap("backfill schedule", err)
	}
	return ticks, err
}

// backfill is what a backfill is asked: BackfillSchedule's arguments, or a
// request made in SQL (a row of schedule_backfills) that a worker carries
// out.
type backfill struct {
	name     string
	from, to time.Time // a zero to: the database's now
	dryRun   bool
	note     string
	// by is the person who asked, a database role: the audit row's actor
	// and the ticks' decided_by; empty: the session's role.
	by string
	// request is the schedule_backfills row, worker the label of the
	// worker that carries it out; 0 and empty for BackfillSchedule.
	request int64
	worker  string
}

// backfillTx is a backfill's one implementation, in tx: BackfillSchedule's
// and CarryOutBackfill's.
func (s *Store) backfillTx(ctx context.Context, tx pgx.Tx, b backfill) ([]time.Time, error) {
	var bs backfillSchedule
	err := tx.QueryRow(ctx, s.sql(`
		SELECT spec, time_zone, workflow, queue, input, priority, now(), next_at, starts_at, ends_at
		FROM {schema}.schedules WHERE name = $1 FOR UPDATE`), b.name).
		Scan(&bs.spec, &bs.zone, &bs.workflow, &bs.queue, &bs.input, &bs.priority, &bs.now, &bs.nextAt, &bs.startsAt, &bs.endsAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", ErrNoSchedule, b.name)
	}
	if err != nil {
		return nil, err
	}
	if b.to.IsZero() {
		b.to = bs.now
	}
	all, err := bs.ticks(b.name, b.from, b.to)
	if err != nil {
		return nil, err
	}
	ticks, err := s.untaken(ctx, tx, b.name, b.from, b.to, all)
	if err != nil || b.dryRun || len(ticks) == 0 {
		return ticks, err
	}
	ticks, err = s.startBackfill(ctx, tx, b, bs, ticks)
	if err != nil || len(ticks) == 0 {
		return ticks, err
	}
	// A request made in SQL names itself and its worker; the person is
	// the role that asked, whichever worker carried it out.
	_, err = tx.Exec(ctx, s.sql(`
		INSERT INTO {schema}.audit_log (actor, action, runs, filter, note)
		VALUES (coalesce(nullif($6, ''), current_user), 'schedule', $2,
		        jsonb_build_object('schedule', $1::text, 'change', 'backfilled', 'by', 'person',
		                           'from', $3::timestamptz, 'to', $4::timestamptz)
		        || CASE WHEN $7::bigint > 0 THEN jsonb_build_object('request', $7::bigint, 'worker', $8::text) ELSE '{}' END,
		        nullif($5, ''))`),
		b.name, len(ticks), b.from, b.to, b.note, b.by, b.request, b.worker)
	return ticks, err
}

// backfillSchedule is the schedules row a backfill holds.
type backfillSchedule struct {
	spec, zone, workflow, queue string
	input                       []byte
	priority                    int
	now                         time.Time
	nextAt, startsAt, endsAt    pgtype.Timestamptz
}

// ticks lists the schedule's ticks a backfill of [from, to] may start:
// within its bounds, and before its next tick (the ticks from there on are
// its workers' to decide: a backfill of them would be decided again, under
// the overlap policy).
func (bs backfillSchedule) ticks(name string, from, to time.Time) ([]time.Time, error) {
	switch {
	case to.After(bs.now):
		return nil, fmt.Errorf("%w: it ends in the future (%s): its ticks are the workers' to decide", ErrBackfillRange, to.Format(time.RFC3339))
	case to.Before(from):
		return nil, fmt.Errorf("%w: it ends (%s) before it starts (%s)", ErrBackfillRange, to.Format(time.RFC3339), from.Format(time.RFC3339))
	case !bs.nextAt.Valid:
		return nil, fmt.Errorf("schedule %q: %w (it was just created or changed, or no worker runs): try again once a worker has", name, ErrNotComputed)
	}
	sp, err := schedule.Parse(bs.spec, bs.zone)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", name, err)
	}
	last := to
	if bs.nextAt.InfinityModifier == pgtype.Finite {
		last = minTime(last, bs.nextAt.Time.Add(-time.Nanosecond))
	}
	if bs.endsAt.Valid {
		last = minTime(last, bs.endsAt.Time)
	}
	first := from
	if bs.startsAt.Valid && bs.startsAt.Time.After(first) {
		first = bs.startsAt.Time
	}
	var all []time.Time
	for t := sp.Next(first.Add(-time.Nanosecond)); !t.IsZero() && !t.After(last); t = sp.Next(t) {
		if len(all) == maxBackfill {
			return nil, fmt.Errorf("%w: more than %d ticks between %s and %s: backfill a shorter range", ErrBackfillRange, maxBackfill,
				from.Format(time.RFC3339), to.Format(time.RFC3339))
		}
		all = append(all, t)
	}
	return all, nil
}

// untaken is the ticks of all without a run and not waiting for one: no
// row in [from, to], or a row decided missed or skipped.
func (s *Store) untaken(ctx context.Context, tx pgx.Tx, name string, from, to time.Time, all []time.Time) ([]time.Time, error) {
	taken := map[int64]bool{}
	rows, err := tx.Query(ctx, s.sql(`
		SELECT nominal_at FROM {schema}.schedule_ticks
		WHERE schedule = $1 AND nominal_at >= $2 AND nominal_at <= $3 AND decision NOT IN ('missed', 'skipped')`), name, from, to)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var t time.Time
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		taken[t.UnixMicro()] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []time.Time
	for _, t := range all {
		if !taken[t.Truncate(time.Microsecond).UnixMicro()] {
			out = append(out, t)
		}
	}
	return out, nil
}

// startBackfill starts a run of each of ticks and writes their rows
// (backfilled, decided by the person who asked). A run of a tick's key that existed already (the schedule
// deleted and made again, a run started by hand with the key) is not
// started again: its tick is left as it is. It returns the ticks started.
func (s *Store) startBackfill(ctx context.Context, tx pgx.Tx, b backfill, bs backfillSchedule, ticks []time.Time) ([]time.Time, error) {
	name := b.name
	runs := make([]NewRun, len(ticks))
	for i, t := range ticks {
		runs[i] = NewRun{ID: uuid.Must(uuid.NewV7()), Workflow: bs.workflow, Queue: bs.queue, Priority: bs.priority,
			Key: ScheduleTickRun(name, t), Input: bs.input}
	}
	ins, err := s.InsertRuns(ctx, tx, runs)
	if err != nil {
		return nil, err
	}
	var started []time.Time
	var ids []pgtype.UUID
	for i, r := range ins {
		if r.Created {
			started, ids = append(started, ticks[i]), append(ids, pgtype.UUID{Bytes: r.ID, Valid: true})
		}
	}
	if len(started) == 0 {
		return nil, nil
	}
	_, err = tx.Exec(ctx, s.sql(`
		INSERT INTO {schema}.schedule_ticks AS t (schedule, nominal_at, decision, run_id, started_at, decided_by)
		SELECT $1, x.n, 'backfilled', x.r, now(), coalesce(nullif($4, ''), current_user)
		FROM unnest($2::timestamptz[], $3::uuid[]) AS x(n, r)
		ON CONFLICT (schedule, nominal_at) DO UPDATE SET decision = 'backfilled', run_id = EXCLUDED.run_id, started_at = now()
		WHERE t.run_id IS NULL AND t.decision IN ('missed', 'skipped')`), name, started, ids, b.by)
	return started, err
}

// BackfillRequest is a backfill asked for in SQL (the function
// backfill_schedule: a row of schedule_backfills), as CarryOutBackfill left
// it.
type BackfillRequest struct {
	// ID is the request's (schedule_backfills.id, what backfill_schedule
	// returned); Schedule, From and To what it asks: the schedule's ticks
	// in [From, To].
	ID       int64
	Schedule string
	From, To time.Time
	// Done is true once it was carried out: Ticks are the nominal times of
	// the ticks it started, in order (empty: every tick of the range had a
	// run), or Error says why it started none (no such schedule, more
	// ticks than a backfill starts). While it is not done, Error says why
	// the worker could not carry it out (a spec its build cannot read, a
	// next tick not computed yet, a database error), and a worker tries it
	// again with retry.
	Done  bool
	Ticks []time.Time
	Error string
}

// sqlTakeBackfill locks the oldest backfill request not carried out yet
// that no other worker holds, through schedule_backfills_pending_idx: one
// worker carries out each, once, in the transaction that writes its
// outcome. One whose last try failed is taken only with retry ($1).
const sqlTakeBackfill = `
	SELECT b.id, b.schedule, b.from_at, b.to_at, coalesce(b.note, ''), b.requested_by
	FROM {schema}.schedule_backfills b
	WHERE b.done_at IS NULL AND (b.error IS NULL OR $1)
	ORDER BY b.id
	LIMIT 1
	FOR UPDATE SKIP LOCKED`

// CarryOutBackfill carries out the oldest backfill requested in SQL that no
// other worker holds, as BackfillSchedule does (the same code: the person is
// the role that asked, the note the request's), and writes its outcome on
// the request, in one transaction; by is the worker's label. One refused for
// good (ErrNoSchedule, ErrBackfillRange) is done with its error. One this
// worker cannot carry out now (ErrNotComputed, a spec its build cannot
// parse, a database error) keeps waiting, its error recorded, for a worker
// that can: with retry alone (once a minute, as a schedule whose ticks a
// worker could not compute), so that no worker tries it at every check. It
// returns the request, and ok false when none was waiting; when its
// transaction fails (a timeout, a lost connection), the request taken, if
// any, with the error, for FailBackfill.
func (s *Store) CarryOutBackfill(ctx context.Context, by string, retry bool) (req BackfillRequest, ok bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := backfill{worker: by}
		err := tx.QueryRow(ctx, s.sql(sqlTakeBackfill), retry).Scan(&b.request, &b.name, &b.from, &b.to, &b.note, &b.by)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		ok, req = true, BackfillRequest{ID: b.request, Schedule: b.name, From: b.from, To: b.to}
		// In a savepoint: a backfill refused, or failed in the database,
		// leaves the transaction to write so on the request.
		berr := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
			ticks, err := s.backfillTx(ctx, sp, b)
			req.Ticks = append([]time.Time{}, ticks...)
			return err
		})
		var parse *schedule.ParseError
		var pgErr *pgconn.PgError
		switch {
		case berr == nil:
			req.Done = true
		case errors.Is(berr, ErrNoSchedule) || errors.Is(berr, ErrBackfillRange):
			req.Done, req.Ticks, req.Error = true, nil, berr.Error()
		case ctx.Err() == nil && (errors.Is(berr, ErrNotComputed) || errors.As(berr, &parse) || errors.As(berr, &pgErr)):
			req.Ticks, req.Error = nil, berr.Error()
		default:
			return berr
		}
		_, err = tx.Exec(ctx, s.sql(`
			UPDATE {schema}.schedule_backfills
			SET done_at = CASE WHEN $2 THEN now() END, done_by = $3, ticks = $4, error = nullif($5, '')
			WHERE id = $1`), req.ID, req.Done, by, req.Ticks, req.Error)
		return err
	})
	if err != nil {
		return BackfillRequest{ID: req.ID, Schedule: req.Schedule, From: req.From, To: req.To}, ok,
			s.wrap("carry out a backfill request", err)
	}
	return req, ok, nil
}

// FailBackfill records on backfill request id, not carried out yet, why
// worker by could not (its transaction failed), so that the workers try it
// again with retry alone, as they do a request they found they could not
// carry out, and not at every check.
func (s *Store) FailBackfill(ctx context.Context, id int64, by, why string) error {
	return s.wrap("record a backfill request's failure", s.exec(ctx, s.pool, planHot, s.sql(`
		UPDATE {schema}.schedule_backfills SET done_by = $2, error = $3
		WHERE id = $1 AND done_at IS NULL`), id, by, why))
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
