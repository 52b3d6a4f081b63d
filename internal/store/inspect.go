package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/policy"
)

// RunFilter selects runs for ListRuns; empty fields match all.
type RunFilter struct {
	Workflow string
	Status   RunStatus // empty: any
	Queue    string
	Limit    int // 0: 100
}

// RunSummary is one run as an operator lists it.
type RunSummary struct {
	ID         uuid.UUID
	Workflow   string
	Queue      string
	Status     RunStatus
	Claimant   string // the worker holding the lease (running runs)
	Epoch      int64
	Requeues   int
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt *time.Time
	// LeaseLeft is the lease time left by the database clock, negative when
	// it expired (the run awaits rescue); nil unless running.
	LeaseLeft *time.Duration
	// Reason, Step and Activity come from the open failure of a failed run.
	Reason   policy.Reason
	Step     int
	Activity string
}

// ListRuns lists runs matching f, newest first.
func (s *Store) ListRuns(ctx context.Context, f RunFilter) ([]RunSummary, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT r.id, r.workflow, r.queue, r.status, coalesce(r.claimant, ''), r.epoch, r.requeues,
		       r.created_at, r.updated_at, r.finished_at,
		       (extract(epoch FROM r.lease_expires_at - now()) * 1000)::bigint,
		       coalesce(f.reason, ''), coalesce(f.step, 0), coalesce(f.activity, '')
		FROM {schema}.runs r
		LEFT JOIN {schema}.failures f ON f.run_id = r.id AND f.requeued_at IS NULL
		WHERE ($1 = '' OR r.workflow = $1) AND ($2 = '' OR r.status = $2) AND ($3 = '' OR r.queue = $3)
		ORDER BY r.created_at DESC, r.id DESC
		LIMIT $4`), f.Workflow, string(f.Status), f.Queue, f.Limit)
	if err != nil {
		return nil, s.wrap("list runs", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunSummary, error) {
		var r RunSummary
		var leftMS *int64
		err := row.Scan(&r.ID, &r.Workflow, &r.Queue, &r.Status, &r.Claimant, &r.Epoch, &r.Requeues,
			&r.CreatedAt, &r.UpdatedAt, &r.FinishedAt, &leftMS, &r.Reason, &r.Step, &r.Activity)
		if leftMS != nil {
			d := time.Duration(*leftMS) * time.Millisecond
			r.LeaseLeft = &d
		}
		return r, err
	})
	if err != nil {
		return nil, s.wrap("list runs", err)
	}
	return out, nil
}

// StepRecord is one step of a run as recorded, with the effective policy of
// its latest attempt (JSON, as policy.Retry marshals it).
type StepRecord struct {
	Step           int
	Activity       string
	Status         StepStatus
	Reason         policy.Reason // why a failed step gave up
	ErrorMessage   string
	ErrorType      string
	Policy         []byte
	BudgetFrom     int // attempts up to this number were made before a requeue
	FirstStartedAt time.Time
	FinishedAt     *time.Time
}

// StepRecords returns a run's steps in order; none for a run that has not
// started a step (or does not exist: see GetRun).
func (s *Store) StepRecords(ctx context.Context, runID uuid.UUID) ([]StepRecord, error) {
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT step, activity, status, coalesce(reason, ''), coalesce(error_message, ''),
		       coalesce(error_type, ''), policy, budget_from, first_started_at, finished_at
		FROM {schema}.steps
		WHERE run_id = $1
		ORDER BY step`), runID)
	if err != nil {
		return nil, s.wrap("load steps", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[StepRecord])
	if err != nil {
		return nil, s.wrap("load steps", err)
	}
	return out, nil
}

// FailureCount is one bucket of the failure_buckets function: failures of
// one workflow, activity and reason in one time bucket.
type FailureCount struct {
	Bucket    time.Time
	Workflow  string
	Activity  string // empty when the workflow itself failed
	Reason    policy.Reason
	Failures  int64
	StillOpen int64 // not requeued
}

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
