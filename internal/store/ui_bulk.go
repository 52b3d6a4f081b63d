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
// of failures deletes, counted, sampled and deleted against one cutoff.

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

// FailurePurge selects what PurgeFailuresBefore deletes: the runs with
// failure history that finished before Before (a time by the database's
// clock, from PurgeCutoff), of one Workflow or all.
type FailurePurge struct {
	Before   time.Time
	Workflow string // empty: all
	DryRun   bool   // count, delete nothing
	Note     string // recorded in the audit_log row
}

// PurgeCutoff is now minus olderThan by the database's clock: the cutoff a
// purge preview counts against and its confirm deletes against, so that
// runs finishing meanwhile do not change the set.
func (s *Store) PurgeCutoff(ctx context.Context, olderThan time.Duration) (time.Time, error) {
	if olderThan < 0 {
		return time.Time{}, fmt.Errorf("purge_failures: negative age %s", olderThan)
	}
	var t time.Time
	err := s.pool.QueryRow(ctx, `SELECT now() - $1::bigint * interval '1 microsecond'`, olderThan.Microseconds()).Scan(&t)
	return t, s.wrap("purge cutoff", err)
}

// PurgeFailuresBefore is PurgeFailures against a fixed cutoff: the SQL
// function purge_failures with older_than the time from p.Before to the
// statement's now(), so that it selects the runs that finished before
// p.Before, however long after the preview the confirm comes. One statement,
// one audit_log row (unless a dry run), whatever the number of runs.
func (s *Store) PurgeFailuresBefore(ctx context.Context, p FailurePurge) (Purged, error) {
	var out Purged
	err := s.pool.QueryRow(ctx, s.sql(`
		SELECT runs_deleted, failures_deleted
		FROM {schema}.purge_failures(greatest(now() - $1::timestamptz, interval '0'), nullif($2, ''), $3, nullif($4, ''))`),
		p.Before, p.Workflow, p.DryRun, p.Note).Scan(&out.Runs, &out.Failures)
	return out, s.wrap("purge_failures", err)
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

// PurgeSample returns the oldest limit runs (0: 20) that PurgeFailuresBefore
// with p would delete, and how many of them each workflow has: what the
// purge preview shows beside the counts. It selects the runs as
// purge_failures does (failed, completed or cancelled, finished before the
// cutoff, with failure history).
func (s *Store) PurgeSample(ctx context.Context, p FailurePurge, limit int) ([]PurgeCandidate, []PurgeWorkflow, error) {
	if limit <= 0 {
		limit = 20
	}
	const chosen = `
		FROM {schema}.runs r
		WHERE r.status IN ('failed', 'completed', 'cancelled')
		  AND r.finished_at < $1
		  AND ($2 = '' OR r.workflow = $2)
		  AND EXISTS (SELECT 1 FROM {schema}.failures f WHERE f.run_id = r.id)`
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT r.id, r.workflow, r.status, r.finished_at,
		       (SELECT count(*) FROM {schema}.failures f WHERE f.run_id = r.id),
		       (SELECT f.reason FROM {schema}.failures f WHERE f.run_id = r.id ORDER BY f.failed_at DESC, f.id DESC LIMIT 1)
		`+chosen+`
		ORDER BY r.finished_at, r.id
		LIMIT $3`), p.Before, p.Workflow, limit)
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
	rows, err = s.pool.Query(ctx, s.sql(`SELECT r.workflow, count(*) `+chosen+` GROUP BY r.workflow ORDER BY count(*) DESC, r.workflow`),
		p.Before, p.Workflow)
	if err != nil {
		return nil, nil, s.wrap("count purge by workflow", err)
	}
	byWorkflow, err := pgx.CollectRows(rows, pgx.RowToStructByPos[PurgeWorkflow])
	return sample, byWorkflow, s.wrap("count purge by workflow", err)
}
