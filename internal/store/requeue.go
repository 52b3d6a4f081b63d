package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
)

// ErrNoFilter is returned by RequeueFailures for a filter that sets nothing:
// requeueing every open failure must be asked for with RequeueFilter.All.
var ErrNoFilter = errors.New("requeue: give at least one filter (workflow, activity, reason, since, until) or ask for all")

// RequeueRunWithNote is RequeueRun with a note (an incident number, say)
// recorded in the audit_log row. It calls the SQL function requeue_run and
// returns ErrNotFound for an unknown run and ErrNotFailed for a run that is
// not failed.
func (s *Store) RequeueRunWithNote(ctx context.Context, id uuid.UUID, note string) error {
	err := s.pool.QueryRow(ctx, s.sql(`SELECT {schema}.requeue_run($1, nullif($2, ''))`), id, note).Scan(new(int))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "P0002" || pgErr.Code == "55000") {
		// requeue_run raised no_data_found or object_not_in_prerequisite_state.
		return s.explainMiss(ctx, id, ErrNotFailed)
	}
	return s.wrap("requeue run", err)
}

// RequeueFilter selects open failures to requeue. Set fields must all match;
// at least one must be set, or All.
type RequeueFilter struct {
	Workflow string
	Activity string
	Reason   policy.Reason
	Since    time.Time // failed at or after; zero: no lower bound
	Until    time.Time // failed before; zero: no upper bound
	// All matches every open failure when no other field is set. It exists
	// so that "everything" is never the result of a forgotten flag.
	All bool
}

func (f RequeueFilter) empty() bool {
	return f.Workflow == "" && f.Activity == "" && f.Reason == "" && f.Since.IsZero() && f.Until.IsZero()
}

// RequeueOptions says how RequeueFailures runs. The zero value requeues
// everything that matches in one statement with one audit row.
type RequeueOptions struct {
	// DryRun changes nothing and returns what would be requeued.
	DryRun bool
	// Note is recorded in the audit_log row(s).
	Note string
	// BatchSize, when positive, requeues at most this many runs per
	// statement (and audit row), oldest failure first, so that a large
	// requeue holds no long locks and can report progress. Failures that
	// happen while it works are not picked up.
	BatchSize int
	// Progress, if set, is called after each batch with the runs requeued
	// so far and the number that matched at the start.
	Progress func(done, total int)
}

// RequeueCandidate is record.RequeueCandidate, defined there for applications and operators to read.
type RequeueCandidate = record.RequeueCandidate

// RequeueFailures requeues, like RequeueRun, every run whose open failure
// matches f, oldest failure first, through the SQL function
// requeue_failures: each statement writes an audit_log row with the filter,
// the count and the note. With o.DryRun it changes nothing and returns what
// it would requeue. It returns ErrNoFilter when f sets nothing and All is
// false.
func (s *Store) RequeueFailures(ctx context.Context, f RequeueFilter, o RequeueOptions) ([]RequeueCandidate, error) {
	if f.empty() && !f.All {
		return nil, ErrNoFilter
	}
	if o.DryRun || o.BatchSize <= 0 {
		out, err := s.requeueFailures(ctx, f, o.DryRun, o.Note, 0)
		if err == nil && !o.DryRun && o.Progress != nil {
			o.Progress(countRequeued(out), len(out))
		}
		return out, err
	}
	plan, err := s.requeueFailures(ctx, f, true, "", 0)
	if err != nil || len(plan) == 0 {
		return plan, err
	}
	// Pin the upper bound past the newest failure planned: a run requeued
	// here that fails again gets a later failure row, which a later batch
	// must not pick up (it would loop for as long as the run keeps failing).
	var until time.Time
	for _, c := range plan {
		if next := c.FailedAt.Add(time.Microsecond); next.After(until) {
			until = next
		}
	}
	if f.Until.IsZero() || until.Before(f.Until) {
		f.Until = until
	}
	var out []RequeueCandidate
	done := 0
	for range len(plan)/o.BatchSize + 2 { // bounded: each batch requeues or ends the loop
		batch, err := s.requeueFailures(ctx, f, false, o.Note, o.BatchSize)
		if err != nil {
			return out, err
		}
		out = append(out, batch...)
		done += countRequeued(batch)
		if o.Progress != nil {
			o.Progress(done, len(plan))
		}
		if len(batch) < o.BatchSize || len(out) >= len(plan) {
			break
		}
	}
	return out, nil
}

func countRequeued(cs []RequeueCandidate) int {
	n := 0
	for _, c := range cs {
		if c.Requeued {
			n++
		}
	}
	return n
}

// requeueFailures is one call of the SQL function requeue_failures.
func (s *Store) requeueFailures(ctx context.Context, f RequeueFilter, dryRun bool, note string, maxRuns int) ([]RequeueCandidate, error) {
	var limit *int
	if maxRuns > 0 {
		limit = &maxRuns
	}
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT run_id, workflow, coalesce(step, 0), coalesce(activity, ''), reason, failed_at,
		       coalesce(error_message, ''), requeued
		FROM {schema}.requeue_failures(
			workflow => nullif($1, ''), activity => nullif($2, ''), reason => nullif($3, ''),
			since => CASE WHEN $9 THEN '-infinity'::timestamptz ELSE $4::timestamptz END,
			until => $5::timestamptz, dry_run => $6, note => nullif($7, ''), max_runs => $8::integer)`),
		f.Workflow, f.Activity, string(f.Reason), nullTime(f.Since), nullTime(f.Until), dryRun, note, limit,
		f.All && f.Since.IsZero())
	if err != nil {
		return nil, s.wrap("requeue failures", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[RequeueCandidate])
	if err != nil {
		return nil, s.wrap("requeue failures", err)
	}
	return out, nil
}

// nullTime is nil for the zero time, so that SQL sees NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// AuditEntry is record.AuditEntry, defined there for applications and operators to read.
type AuditEntry = record.AuditEntry

// AuditLog returns the newest audit_log rows, newest first (limit 0: 100).
func (s *Store) AuditLog(ctx context.Context, limit int) ([]AuditEntry, error) {
	if limit <= 0 {
		limit = 100
	}
	return s.auditLog(ctx, `ORDER BY id DESC LIMIT $1`, limit)
}

// auditLog reads the audit_log rows that rest (a fixed WHERE, ORDER BY and
// LIMIT with bind parameters) selects.
func (s *Store) auditLog(ctx context.Context, rest string, args ...any) ([]AuditEntry, error) {
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT id, at, actor, action, runs, failures, filter, coalesce(run_ids, '{}'), coalesce(note, '')
		FROM {schema}.audit_log `+rest), args...)
	if err != nil {
		return nil, s.wrap("read audit log", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[AuditEntry])
	return out, s.wrap("read audit log", err)
}

// RequeueFailureIDs requeues the runs whose open failure rows are exactly
// failureIDs (a preview's), with one audit_log row carrying note; a run
// requeued meanwhile is left alone. It returns the runs it put back (the SQL
// function requeue_failure_ids).
//
// filter, recorded in the audit row beside the IDs, says how the failures
// were selected (nil for none).
func (s *Store) RequeueFailureIDs(ctx context.Context, failureIDs []int64, note string, filter map[string]string) ([]uuid.UUID, error) {
	f, err := json.Marshal(filter)
	if err != nil {
		return nil, fmt.Errorf("requeue failures: encode filter: %w", err)
	}
	rows, err := s.pool.Query(ctx, s.sql(`SELECT {schema}.requeue_failure_ids($1, nullif($2, ''), $3::text::jsonb)`),
		failureIDs, note, string(f))
	if err != nil {
		return nil, s.wrap("requeue failures", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (uuid.UUID, error) {
		var id [16]byte
		err := row.Scan(&id)
		return uuid.UUID(id), err
	})
	return out, s.wrap("requeue failures", err)
}
