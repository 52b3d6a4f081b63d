package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/record"
)

// HistoryAhead is how many days ahead of today (UTC) the partitions of
// steps and attempts are made (migration 22): runs created on those days
// find theirs attached, whoever made it.
const HistoryAhead = 2

// EnsureHistoryPartitions makes the missing day partitions of steps and
// attempts from today to HistoryAhead days later, through the SQL function
// ensure_history_partitions, and returns the names of those it made. It
// waits at most 100 ms for a lock (the function's lock_timeout): a call
// that times out has made nothing it reports and is to be tried again.
func (s *Store) EnsureHistoryPartitions(ctx context.Context) ([]string, error) {
	var made []string
	err := s.query(ctx, s.pool, planHot, func(rows pgx.Rows) (err error) {
		made, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}, s.sql(`SELECT {schema}.ensure_history_partitions($1)`), HistoryAhead)
	return made, s.wrap("make history partitions", err)
}

// HistoryRetention is record.HistoryRetention, defined there for
// applications and operators to read.
type HistoryRetention = record.HistoryRetention

// HistoryDrop is record.HistoryDrop.
type HistoryDrop = record.HistoryDrop

// RetentionConfigured reads the retention configured (history_retention).
func (s *Store) RetentionConfigured(ctx context.Context) (HistoryRetention, error) {
	var r HistoryRetention
	var completed, cancelled, failed float64
	err := s.query(ctx, s.pool, planHot, scanOne(&completed, &cancelled, &failed, &r.Archive, &r.ChangedAt, &r.ChangedBy, &r.Note), s.sql(`
		SELECT coalesce(extract(epoch FROM completed_after), 0)::float8, coalesce(extract(epoch FROM cancelled_after), 0)::float8,
		       coalesce(extract(epoch FROM failed_after), 0)::float8, archive, changed_at, changed_by, coalesce(note, '')
		FROM {schema}.history_retention`))
	r.Completed, r.Cancelled, r.Failed = seconds(completed), seconds(cancelled), seconds(failed)
	return r, s.wrap("read the retention", err)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ErrRetentionAge is returned by SetRetention for an age below an hour or
// negative.
var ErrRetentionAge = errors.New("tenure: a retention age must be at least an hour, or 0 to keep that kind of run")

// SetRetention sets the retention (set_history_retention): r's ages,
// Archive and Note; one audit row.
func (s *Store) SetRetention(ctx context.Context, r HistoryRetention) error {
	for _, d := range []time.Duration{r.Completed, r.Cancelled, r.Failed} {
		if d != 0 && d < time.Hour {
			return fmt.Errorf("%w: %s", ErrRetentionAge, d)
		}
	}
	ms := func(d time.Duration) *int64 {
		if d == 0 {
			return nil
		}
		v := d.Milliseconds()
		return &v
	}
	err := s.exec(ctx, s.pool, planHot, s.sql(`SELECT {schema}.set_history_retention($1 * interval '1 millisecond',
		$2 * interval '1 millisecond', $3 * interval '1 millisecond', $4, nullif($5, ''))`),
		ms(r.Completed), ms(r.Cancelled), ms(r.Failed), r.Archive, r.Note)
	return s.wrap("set the retention", err)
}

// RetainHistory carries out the retention configured (the procedure
// retain_history, whose functions turn JIT off for themselves; a CALL
// outside a batch, as its COMMITs need): the drops a killed pass left, then each day's
// partitions of which some run may go, oldest first. by names who did it in
// the ledger and the audit rows. It returns at once when another process
// is at it. It runs outside a transaction, for as long as it takes: give
// ctx a deadline of minutes, not a statement's.
func (s *Store) RetainHistory(ctx context.Context, by, note string) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return s.wrap("carry out the retention", err)
	}
	defer conn.Release()
	_, err = conn.Exec(ctx, s.sql(`CALL {schema}.retain_history($1, nullif($2, ''))`), by, note)
	if err != nil && !conn.Conn().IsClosed() {
		// A pass that failed midway kept its session's lock: give it back,
		// or this pooled connection would hold off every later pass.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if _, uerr := conn.Exec(uctx, s.sql(`SELECT pg_advisory_unlock(hashtext('{schema}.retain_history'))`)); uerr != nil {
			_ = conn.Conn().Close(uctx) // the lock goes with the session
		}
		cancel()
	}
	return s.wrap("carry out the retention", err)
}

// HistoryDrops lists retention's ledger, newest first, up to limit rows.
func (s *Store) HistoryDrops(ctx context.Context, limit int) ([]HistoryDrop, error) {
	var drops []HistoryDrop
	err := s.query(ctx, s.pool, planHot, func(rows pgx.Rows) (err error) {
		drops, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (HistoryDrop, error) {
			var d HistoryDrop
			err := row.Scan(&d.ID, &d.Partition, &d.State, &d.Kept, &d.Archived, &d.RunsDeleted, &d.FailuresDeleted, &d.By, &d.Note,
				&d.StartedAt, &d.FinishedAt)
			return d, err
		})
		return err
	}, s.sql(`
		SELECT id, partition, state, kept, archived, runs_deleted, failures_deleted, done_by, coalesce(note, ''), started_at, finished_at
		FROM {schema}.history_drops ORDER BY id DESC LIMIT $1`), limit)
	return drops, s.wrap("list history drops", err)
}
