package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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
		var bs backfillSchedule
		err := tx.QueryRow(ctx, s.sql(`
			SELECT spec, time_zone, workflow, queue, input, priority, now(), next_at, starts_at, ends_at
			FROM {schema}.schedules WHERE name = $1 FOR UPDATE`), name).
			Scan(&bs.spec, &bs.zone, &bs.workflow, &bs.queue, &bs.input, &bs.priority, &bs.now, &bs.nextAt, &bs.startsAt, &bs.endsAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %q", ErrNoSchedule, name)
		}
		if err != nil {
			return err
		}
		if to.IsZero() {
			to = bs.now
		}
		all, err := bs.ticks(name, from, to)
		if err != nil {
			return err
		}
		if ticks, err = s.untaken(ctx, tx, name, from, to, all); err != nil || dryRun || len(ticks) == 0 {
			return err
		}
		ticks, err = s.startBackfill(ctx, tx, name, bs, ticks)
		if err != nil || len(ticks) == 0 {
			return err
		}
		_, err = tx.Exec(ctx, s.sql(`
			INSERT INTO {schema}.audit_log (action, runs, filter, note)
			VALUES ('schedule', $2, jsonb_build_object('schedule', $1::text, 'change', 'backfilled', 'by', 'person',
			                                           'from', $3::timestamptz, 'to', $4::timestamptz), nullif($5, ''))`),
			name, len(ticks), from, to, note)
		return err
	})
	if err != nil && !errors.Is(err, ErrNoSchedule) && !errors.Is(err, ErrBackfillRange) && !errors.Is(err, ErrNotComputed) {
		err = s.wrap("backfill schedule", err)
	}
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
// (backfilled). A run of a tick's key that existed already (the schedule
// deleted and made again, a run started by hand with the key) is not
// started again: its tick is left as it is. It returns the ticks started.
func (s *Store) startBackfill(ctx context.Context, tx pgx.Tx, name string, bs backfillSchedule, ticks []time.Time) ([]time.Time, error) {
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
		SELECT $1, x.n, 'backfilled', x.r, now(), current_user FROM unnest($2::timestamptz[], $3::uuid[]) AS x(n, r)
		ON CONFLICT (schedule, nominal_at) DO UPDATE SET decision = 'backfilled', run_id = EXCLUDED.run_id, started_at = now()
		WHERE t.run_id IS NULL AND t.decision IN ('missed', 'skipped')`), name, started, ids)
	return started, err
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
