package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/record"
)

// The statements of the web UI's bulk actions: the whole set of open
// failures a requeue by filter touches, however large, counted and
// requeued in SQL, and the runs a purge
// of failures deletes, counted, sampled and deleted against one cutoff
// (PurgeOptions.Before).

// FailureSet is record.FailureSet, defined there for applications and operators to read.
type FailureSet = record.FailureSet

// FailureSetGroup is record.FailureSetGroup, defined there for applications and operators to read.
type FailureSetGroup = record.FailureSetGroup

// FailureSet counts, breaks down and names the open failures f selects,
// in one read-only snapshot, fixing f's window: with no f.Until, the set
// ends at the database's now(). It reads the failures through the index
// f's filters select (a group's are one range of
// failures_open_fingerprint_idx) and returns one row per (workflow,
// activity, reason): a set of 1,000,000 failures costs the database about
// a second and the client nothing more than a set of ten (see
// BenchmarkFailureSet_OneMillionFailures in package ui).
func (s *Store) FailureSet(ctx context.Context, f FailureGroupFilter) (FailureSet, error) {
	var out FailureSet
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if f.Until.IsZero() {
			if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&f.Until); err != nil {
				return err
			}
		}
		out.Filter = f
		var args []any
		cond := failureGroupWhere(f, &args, nil)
		rows, err := tx.Query(ctx, s.sql(`
			SELECT f.workflow, coalesce(f.activity, ''), f.reason, count(*), min(f.failed_at), max(f.failed_at)
			FROM {schema}.failures f
			WHERE `+cond+`
			GROUP BY 1, 2, 3
			ORDER BY 4 DESC, 1, 2, 3`), args...)
		if err != nil {
			return err
		}
		var g FailureSetGroup
		var first, last time.Time
		_, err = pgx.ForEachRow(rows, []any{&g.Workflow, &g.Activity, &g.Reason, &g.Failures, &first, &last}, func() error {
			out.Breakdown = append(out.Breakdown, g)
			out.Count += g.Failures
			if out.Oldest.IsZero() || first.Before(out.Oldest) {
				out.Oldest = first
			}
			if last.After(out.Newest) {
				out.Newest = last
			}
			return nil
		})
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, s.sql(`
			SELECT {schema}.failure_set_digest(ARRAY(SELECT f.id FROM {schema}.failures f WHERE `+cond+`))`), args...).Scan(&out.Digest)
	})
	return out, s.wrap("count open failures", err)
}

// ErrFailuresChanged is returned by RequeueFailureSet when the set of
// failures in the window is no longer the one previewed: nothing was
// requeued.
var ErrFailuresChanged = errors.New("the failures changed since the preview")

// RequeueSet is a requeue of a FailureSet, as its preview counted it.
type RequeueSet struct {
	// Filter is the set's (FailureSet.Filter), its window included: the
	// failures are selected again by it, in the statement that requeues
	// them.
	Filter FailureGroupFilter
	// Digest is the set's as previewed (FailureSet.Digest).
	Digest string
	// SkipIndeterminate leaves failed the runs that failed indeterminate
	// (their at-most-once activity would run again) and requeues the
	// others.
	SkipIndeterminate bool
	// Note is recorded in the audit_log row.
	Note string
	// Audit says how the person selected the set (a page's filter), for the
	// audit row's filter, beside the window, the set's size and its digest.
	Audit map[string]string
}

// RequeueFailureSet requeues the runs of the open failures q.Filter selects
// in its window, when they are still the set previewed (q.Digest): one
// statement, one audit_log row, whatever their number, through the SQL
// function requeue_failure_set, to which the statement itself passes the
// failure IDs it selects (none travels to the client). It returns how many
// runs it put back, or ErrFailuresChanged and puts none back.
func (s *Store) RequeueFailureSet(ctx context.Context, q RequeueSet) (int64, error) {
	if q.Filter.Until.IsZero() {
		return 0, errors.New("requeue failures: the set has no window (FailureSet.Filter has one)")
	}
	audit := map[string]string{}
	for k, v := range q.Audit {
		audit[k] = v
	}
	audit["until"] = q.Filter.Until.UTC().Format(time.RFC3339Nano)
	if !q.Filter.Since.IsZero() {
		audit["since"] = q.Filter.Since.UTC().Format(time.RFC3339Nano)
	}
	filter, err := json.Marshal(audit)
	if err != nil {
		return 0, fmt.Errorf("requeue failures: encode filter: %w", err)
	}
	var args []any
	cond := failureGroupWhere(q.Filter, &args, nil)
	n := len(args)
	args = append(args, q.Digest, q.SkipIndeterminate, q.Note, string(filter))
	var requeued int64
	var changed bool
	err = s.pool.QueryRow(ctx, s.sql(fmt.Sprintf(`
		SELECT requeued, changed
		FROM {schema}.requeue_failure_set(ARRAY(SELECT f.id FROM {schema}.failures f WHERE %s), $%d, $%d, nullif($%d, ''), $%d::text::jsonb)`,
		cond, n+1, n+2, n+3, n+4)), args...).Scan(&requeued, &changed)
	if err != nil {
		return 0, s.wrap("requeue failures", err)
	}
	if changed {
		return 0, ErrFailuresChanged
	}
	return requeued, nil
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

// PurgeCandidate is record.PurgeCandidate, defined there for applications and operators to read.
type PurgeCandidate = record.PurgeCandidate

// PurgeWorkflow is record.PurgeWorkflow, defined there for applications and operators to read.
type PurgeWorkflow = record.PurgeWorkflow

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
