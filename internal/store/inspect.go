package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tenurehq/tenure/record"
)

// RunFilter selects runs for ListRuns; empty fields match all.
type RunFilter struct {
	Workflow string
	Status   RunStatus // empty: any
	Queue    string
	Key      string // the key the run was started with (sdk.WithKey)
	Limit    int    // 0: 100
}

// RunSummary is record.RunSummary, defined there for applications and operators to read.
type RunSummary = record.RunSummary

// ListRuns lists runs matching f, newest first: SearchRuns, the one run
// listing.
func (s *Store) ListRuns(ctx context.Context, f RunFilter) ([]RunSummary, error) {
	return s.SearchRuns(ctx, RunSearch{Workflow: f.Workflow, Status: f.Status, Queue: f.Queue, Key: f.Key, Limit: f.Limit})
}

// StepRecord is record.Step, defined there for applications and operators to read.
type StepRecord = record.Step

// StepRecords returns a run's steps in order; none for a run that has not
// started a step (or does not exist: see GetRun). The joins are those of
// the step_timeline view: the signal a step consumed, the child it started.
func (s *Store) StepRecords(ctx context.Context, runID uuid.UUID) ([]StepRecord, error) {
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT s.step, s.activity, s.status, coalesce(s.reason, ''), coalesce(s.error_message, ''),
		       coalesce(s.error_type, ''), s.policy, s.budget_from, s.first_started_at, s.finished_at,
		       s.kind, s.due_at, s.child_run_id, coalesce(c.status, ''), coalesce(sg.id, 0),
		       coalesce(s.build_id, ''), coalesce(s.input_hash, 0)
		FROM {schema}.steps s
		LEFT JOIN {schema}.signals sg ON sg.run_id = s.run_id AND sg.consumed_step = s.step
		LEFT JOIN {schema}.runs c ON c.id = s.child_run_id
		WHERE s.run_id = $1
		ORDER BY s.step`), uuidArg(runID))
	if err != nil {
		return nil, s.wrap("load steps", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (StepRecord, error) {
		var r StepRecord
		var child pgtype.UUID
		var hash int64
		err := row.Scan(&r.Step, &r.Activity, &r.Status, &r.Reason, &r.ErrorMessage, &r.ErrorType, &r.Policy,
			&r.BudgetFrom, &r.FirstStartedAt, &r.FinishedAt, &r.Kind, &r.DueAt, &child, &r.ChildStatus, &r.SignalID,
			&r.BuildID, &hash)
		r.InputHash = uint64(hash)
		if child.Valid {
			r.ChildRunID = child.Bytes
		}
		return r, err
	})
	if err != nil {
		return nil, s.wrap("load steps", err)
	}
	return out, nil
}

// FailureCount is record.FailureCount, defined there for applications and operators to read.
type FailureCount = record.FailureCount

// FailureCounts counts failures since since in buckets of width (0: one
// hour), oldest bucket first, the most frequent first within a bucket.
func (s *Store) FailureCounts(ctx context.Context, width time.Duration, since time.Time) ([]FailureCount, error) {
	if width <= 0 {
		width = time.Hour
	}
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT bucket, workflow, coalesce(activity, ''), reason, failures, still_open
		FROM {schema}.failure_buckets($1::bigint * interval '1 microsecond', $2)`),
		width.Microseconds(), since)
	if err != nil {
		return nil, s.wrap("count failures", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[FailureCount])
	if err != nil {
		return nil, s.wrap("count failures", err)
	}
	return out, nil
}

// RunAuditLog returns the audit_log rows that name the run among their
// run_ids (the requeues that put it back: who, when, with what note), oldest
// first, through the GIN index on run_ids (migration 7). Purges name no
// runs. It reads what a run's page shows and no more: RunIDs is left empty
// (the run is among them; Runs counts them) and Filter lacks failure_ids, so
// that the row of a requeue of a million runs costs the page of each of
// them as little as that of one.
func (s *Store) RunAuditLog(ctx context.Context, runID uuid.UUID) ([]AuditEntry, error) {
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT id, at, actor, action, runs, failures, filter - 'failure_ids', '{}'::uuid[], coalesce(note, '')
		FROM {schema}.audit_log
		WHERE run_ids @> ARRAY[$1::uuid]
		ORDER BY id`), uuidArg(runID))
	if err != nil {
		return nil, s.wrap("read the run's audit log", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[AuditEntry])
	return out, s.wrap("read the run's audit log", err)
}

// Schemas lists the schemas of the database that hold Tenure's tables (a
// runs table and the schema_version table migrations write), by name, so
// that a schema-missing error can name the ones that exist. It reads the
// catalog only, whatever the store's own schema holds.
func (s *Store) Schemas(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT n.nspname
		FROM pg_catalog.pg_namespace n
		WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class c
		              WHERE c.relnamespace = n.oid AND c.relname = 'runs' AND c.relkind IN ('r', 'p'))
		  AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c
		              WHERE c.relnamespace = n.oid AND c.relname = 'schema_version' AND c.relkind IN ('r', 'p'))
		ORDER BY n.nspname`)
	if err != nil {
		return nil, fmt.Errorf("list Tenure schemas: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list Tenure schemas: %w", err)
	}
	return out, nil
}
