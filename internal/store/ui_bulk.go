package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/policy"
)

// The statements of the web UI's bulk actions: the whole set of open
// failures a requeue by filter touches, however large, and the runs a purge
// of failures deletes, counted, sampled and deleted against one cutoff
// (PurgeOptions.Before).

// FailureMember is one open failure of the set a bulk requeue previews and
// confirms: enough to count it, hash the set and requeue it by ID.
type FailureMember struct {
	ID       int64 // the failure row's
	RunID    uuid.UUID
	Workflow string
	Activity string // empty when the workflow itself failed
	Reason   policy.Reason
	FailedAt time.Time
}

// OpenFailureMembers lists every open failure f selects, oldest first, with
// no limit: a requeue by filter previews the whole set (a count, a
// breakdown and a sample) and then requeues exactly those rows by ID.
// It reads one row of a few columns per failure, through the index that
// f's filters select (a group's members are one range of
// failures_open_fingerprint_idx).
func (s *Store) OpenFailureMembers(ctx context.Context, f FailureGroupFilter) ([]FailureMember, error) {
	var args []any
	cond := f.where(&args, nil)
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT f.id, f.run_id, f.workflow, coalesce(f.activity, ''), f.reason, f.failed_at
		FROM {schema}.failures f
		WHERE `+cond+`
		ORDER BY f.failed_at, f.id`), args...)
	if err != nil {
		return nil, s.wrap("list open failures", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (FailureMember, error) {
		var m FailureMember
		err := row.Scan(&m.ID, (*[16]byte)(&m.RunID), &m.Workflow, &m.Activity, &m.Reason, &m.FailedAt)
		return m, err
	})
	return out, s.wrap("list open failures", err)
}

// PurgeCutoff is now minus olderThan by the database's clock: the cutoff a
// purge preview counts against and its confirm deletes against
// (PurgeOptions.Before), so that runs finishing meanwhile do not change the
// set.
func (s *Store) PurgeCutoff(ctx context.Context, olderThan time.Duration) (time.Time, error) {
	if olderThan < 0 {
		return time.Time{}, fmt.Errorf("purge_failures: negative age %s", olderThan)
	}
	var t time.Time
	err := s.pool.QueryRow(ctx, `SELECT now() - $1::bigint * interval '1 microsecond'`, olderThan.Microseconds()).Scan(&t)
	return t, s.wrap("purge cutoff", err)
}

// PurgeCandidate is one run a purge of failures would delete.
type PurgeCandidate struct {
	RunID      uuid.UUID
	Workflow   string
	Status     RunStatus
	FinishedAt time.Time
	Failures   int64         // its failure rows, requeued ones included
	Reason     policy.Reason // of its last failure
}

// PurgeWorkflow counts, for one workflow, the runs a purge would delete.
type PurgeWorkflow struct {
	Workflow string
	Runs     int64
}

// PurgeSample returns the oldest limit runs (0: 20) that PurgeFailures
// with o would delete, and how many of them each workflow has: what the
// purge preview shows beside the counts. It reads the runs that
// purge_failures deletes, from the SQL function that selects them for it
// (purge_failure_candidates), and locks none.
func (s *Store) PurgeSample(ctx context.Context, o PurgeOptions, limit int) ([]PurgeCandidate, []PurgeWorkflow, error) {
	if limit <= 0 {
		limit = 20
	}
	if o.OlderThan < 0 {
		return nil, nil, fmt.Errorf("purge_failures: negative age %s", o.OlderThan)
	}
	if !o.Before.IsZero() && o.OlderThan != 0 {
		return nil, nil, fmt.Errorf("purge_failures: an age (%s) and a cutoff (%s): give one", o.OlderThan, o.Before.Format(time.RFC3339))
	}
	before := nullTime(o.Before)
	const chosen = `{schema}.purge_failure_candidates(coalesce($1, now() - $2::bigint * interval '1 microsecond'), nullif($3, '')) c`
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT c.run_id, c.workflow, c.status, c.finished_at,
		       (SELECT count(*) FROM {schema}.failures f WHERE f.run_id = c.run_id),
		       (SELECT f.reason FROM {schema}.failures f WHERE f.run_id = c.run_id ORDER BY f.failed_at DESC, f.id DESC LIMIT 1)
		FROM `+chosen+`
		ORDER BY c.finished_at, c.run_id
		LIMIT $4`), before, o.OlderThan.Microseconds(), o.Workflow, limit)
	if err != nil {
		return nil, nil, s.wrap("sample purge", err)
	}
	sample, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PurgeCandidate, error) {
		var c PurgeCandidate
		err := row.Scan((*[16]byte)(&c.RunID), &c.Workflow, &c.Status, &c.FinishedAt, &c.Failures, &c.Reason)
		return c, err
	})
	if err != nil {
		return nil, nil, s.wrap("sample purge", err)
	}
	rows, err = s.pool.Query(ctx, s.sql(`SELECT c.workflow, count(*) FROM `+chosen+` GROUP BY c.workflow ORDER BY count(*) DESC, c.workflow`),
		before, o.OlderThan.Microseconds(), o.Workflow)
	if err != nil {
		return nil, nil, s.wrap("count purge by workflow", err)
	}
	byWorkflow, err := pgx.CollectRows(rows, pgx.RowToStructByPos[PurgeWorkflow])
	return sample, byWorkflow, s.wrap("count purge by workflow", err)
}
