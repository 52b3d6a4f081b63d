package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
)

// Run is record.Run, defined there for applications and operators to read.
type Run = record.Run

// GetRun loads one run with its open failure row, if any, in one query.
func (s *Store) GetRun(ctx context.Context, id uuid.UUID) (Run, error) {
	r, err := s.getRun(ctx, `r.id = $1`, uuidArg(id)) // binary, not through driver.Valuer
	if errors.Is(err, ErrNotFound) {
		return Run{}, fmt.Errorf("run %s: %w", id, err)
	}
	return r, err
}

// GetRunByKey loads the run started with key (sdk.WithKey), as GetRun does.
// Keys are unique across workflows: there is at most one.
func (s *Store) GetRunByKey(ctx context.Context, key string) (Run, error) {
	r, err := s.getRun(ctx, `r.run_key = $1`, key)
	if errors.Is(err, ErrNotFound) {
		return Run{}, fmt.Errorf("run with key %q: %w", key, err)
	}
	return r, err
}

// getRun loads the run that cond (a fixed condition on r with one parameter)
// selects, or ErrNotFound.
func (s *Store) getRun(ctx context.Context, cond string, arg any) (Run, error) {
	var r Run
	var f FailureRow
	var failed, found bool
	var after pgtype.Timestamptz
	var parent pgtype.UUID
	err := s.query(ctx, s.pool, planHot, func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{(*[16]byte)(&r.ID), &r.Workflow, &r.Queue, &r.Priority, &r.Key, &r.Status, &r.Input,
			&r.Output, &r.ErrorMessage, &r.Claimant, &r.Epoch, &r.Requeues, &after, &r.CreatedAt,
			&r.FinishedAt, &r.WaitingFor, &parent, &r.ParentStep, &r.CancelRequested, &failed, &f.ID, &f.RunID, &f.Workflow, &f.Reason, &f.Step, &f.Activity, &f.Attempts,
			&f.Errors, &f.Rescues, &f.ErrorMessage, &f.ErrorType, &f.ErrorStack, &f.FailedAt, &f.RequeuedAt,
			&f.RequeueCount, &r.BuildID, &r.PinnedTo}, func() error {
			found = true
			if after.InfinityModifier == pgtype.Finite {
				r.RunAfter = after.Time
			}
			if parent.Valid {
				r.Parent = parent.Bytes
			}
			return nil
		})
		return err
	}, s.sql(`
		SELECT r.id, r.workflow, r.queue, r.priority, coalesce(r.run_key, ''), r.status, r.input, r.output,
		       coalesce(r.error_message, ''), coalesce(r.claimant, ''), r.epoch, r.requeues, r.run_after,
		       r.created_at, r.finished_at, coalesce(r.waiting_for, ''), r.parent_run_id, coalesce(r.parent_step, 0),
		       -- _cancel_asked_at, written out: a SQL function with a
		       -- subquery is never inlined, and was parsed and planned at
		       -- every call (11 % of the machine's CPU in bench L, where
		       -- every caller reads its run's result here).
		       coalesce(r.cancel_requested_at,
		                (SELECT min(w.at) FROM {schema}.wakes w WHERE w.run_id = r.id AND w.kind = 'cancel')),
		       f.id IS NOT NULL, `+failureColumns+`, coalesce(r.build_id, ''), r.pinned_to
		FROM {schema}.runs r
		LEFT JOIN {schema}.failures f ON f.run_id = r.id AND f.requeued_at IS NULL
		WHERE `+cond), arg)
	if err != nil {
		return Run{}, s.wrap("get run", err)
	}
	if !found {
		return Run{}, ErrNotFound
	}
	if failed {
		r.Failure = &f
	}
	return r, nil
}

// ErrFinished is returned by Cancel for a run that already ended.
var ErrFinished = errors.New("run already finished")

// ErrNotFailed is returned by Requeue for a run that is not failed.
var ErrNotFailed = errors.New("run is not failed")

// CancelRun cancels a run: one that has not started ends cancelled now
// (requested false); one that has (running, or queued waiting for a sleep, a
// signal or a child) is marked for cancellation and made due (requested
// true): its worker cancels the running activity with sdk.ErrCancelled, lets
// the workflow clean up, and ends the run cancelled. It is the SQL function
// cancel_run. A run that already ended is ErrFinished, an unknown one
// ErrNotFound.
func (s *Store) CancelRun(ctx context.Context, id uuid.UUID) (requested bool, err error) {
	return s.cancelRun(ctx, `SELECT {schema}.cancel_run($1)`, uuidArg(id))
}

// CancelRunWithNote is CancelRun with an audit_log row (action cancel) with
// the note: a person's cancel (SQL: cancel_run_noted).
func (s *Store) CancelRunWithNote(ctx context.Context, id uuid.UUID, note string) (requested bool, err error) {
	return s.cancelRun(ctx, `SELECT {schema}.cancel_run_noted($1, nullif($2, ''))`, uuidArg(id), note)
}

func (s *Store) cancelRun(ctx context.Context, stmt string, args ...any) (requested bool, err error) {
	id := args[0].(uuidParam).Bytes
	var did *string
	err = s.query(ctx, s.pool, planHot, scanOne(&did), s.sql(stmt), args...)
	if err != nil {
		return false, s.wrap("cancel run", err)
	}
	if did == nil {
		return false, s.explainMiss(ctx, id, ErrFinished)
	}
	return *did == "requested", nil
}

// RequeueRun puts a failed run back in the queue: same run ID, history kept,
// the failed step given a fresh budget (attempts so far no longer count), the
// open failure row marked requeued with the time and count. Idle workers are
// woken. It is the SQL function requeue_run (one implementation for Go, the
// CLI and SQL), so it also writes an audit_log row.
func (s *Store) RequeueRun(ctx context.Context, id uuid.UUID) error {
	return s.RequeueRunWithNote(ctx, id, "")
}

// explainMiss tells "no such run" from "run in the wrong state".
func (s *Store) explainMiss(ctx context.Context, id uuid.UUID, wrongState error) error {
	var status string
	err := s.query(ctx, s.pool, planHot, scanOne(&status), s.sql(`SELECT status FROM {schema}.runs WHERE id = $1`), uuidArg(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return s.wrap("read run status", err)
	}
	return fmt.Errorf("run %s is %s: %w", id, status, wrongState)
}

// Attempt is record.Attempt, defined there for applications and operators to read.
type Attempt = record.Attempt

// Attempts returns every attempt of a run in order (step, then attempt), as
// the attempt_timeline view shows them.
func (s *Store) Attempts(ctx context.Context, runID uuid.UUID) ([]Attempt, error) {
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT t.run_id, t.step, t.attempt, t.activity, t.status, t.started_at, t.ended_at, coalesce(t.error_message, ''),
		       coalesce(t.error_type, ''), coalesce(a.error_stack, ''), t.is_rescue, a.delay_ms,
		       coalesce(t.delay_source, ''), t.epoch, t.worker, coalesce(t.trace_id, ''), coalesce(t.span_id, ''),
		       extract(epoch FROM t.duration)::float8 * 1000, extract(epoch FROM t.waited)::float8 * 1000, t.in_budget
		FROM {schema}.attempt_timeline t
		JOIN {schema}.attempts a USING (run_id, step, attempt)
		WHERE t.run_id = $1
		ORDER BY t.step, t.attempt`), uuidArg(runID))
	if err != nil {
		return nil, s.wrap("load attempts", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		var delay *int64
		var durMS float64
		var waitedMS *float64
		err := row.Scan(&a.RunID, &a.Step, &a.Attempt, &a.Activity, &a.Status, &a.StartedAt, &a.EndedAt,
			&a.ErrorMessage, &a.ErrorType, &a.ErrorStack, &a.Rescue, &delay, &a.DelaySource, &a.Epoch,
			&a.Worker, &a.TraceID, &a.SpanID, &durMS, &waitedMS, &a.InBudget)
		a.Duration = time.Duration(durMS * float64(time.Millisecond))
		if waitedMS != nil {
			w := time.Duration(*waitedMS * float64(time.Millisecond))
			a.Waited = &w
		}
		if delay != nil {
			d := time.Duration(*delay) * time.Millisecond
			a.Delay = &d
		}
		return a, err
	})
	return out, s.wrap("load attempts", err)
}

// FailureRow is record.Failure, defined there for applications and operators to read.
type FailureRow = record.Failure

// failureColumns reads a failure row aliased f in FailureRow's field order.
// Every column is coalesced, so a LEFT JOIN that found no failure scans too.
const failureColumns = `coalesce(f.id, 0), coalesce(f.run_id, '00000000-0000-0000-0000-000000000000'),
	coalesce(f.workflow, ''), coalesce(f.reason, ''), coalesce(f.step, 0), coalesce(f.activity, ''),
	coalesce(f.attempts, 0), coalesce(f.errors, 0), coalesce(f.rescues, 0), coalesce(f.error_message, ''),
	coalesce(f.error_type, ''), coalesce(f.error_stack, ''), coalesce(f.failed_at, 'epoch'), f.requeued_at,
	coalesce(f.requeue_count, 0)`

// FailureFilter selects failure rows; zero fields match everything. By
// default only open failures (not requeued) are returned.
type FailureFilter struct {
	RunID           uuid.UUID
	Workflow        string
	Activity        string
	Reason          policy.Reason
	Since, Until    time.Time
	IncludeRequeued bool
	Limit           int // 0: 1000
	// AfterFailed and AfterID, when AfterID is set, keep the failures that
	// come after that one in the newest-first order (failed_at DESC, id
	// DESC): the next page of a listing whose last row it was (keyset
	// paging, as RunSearch.AfterID for runs).
	AfterFailed time.Time
	AfterID     int64
}

// Failures lists failure rows matching f, newest first.
func (s *Store) Failures(ctx context.Context, f FailureFilter) ([]FailureRow, error) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.RunID != uuid.Nil {
		add("run_id = $%d", f.RunID)
	}
	if f.Workflow != "" {
		add("workflow = $%d", f.Workflow)
	}
	if f.Activity != "" {
		add("activity = $%d", f.Activity)
	}
	if f.Reason != "" {
		add("reason = $%d", string(f.Reason))
	}
	if !f.Since.IsZero() {
		add("failed_at >= $%d", f.Since)
	}
	if !f.Until.IsZero() {
		add("failed_at < $%d", f.Until)
	}
	if !f.IncludeRequeued {
		where = append(where, "requeued_at IS NULL")
	}
	if f.AfterID != 0 {
		args = append(args, f.AfterFailed, f.AfterID)
		where = append(where, fmt.Sprintf("(failed_at, id) < ($%d::timestamptz, $%d::bigint)", len(args)-1, len(args)))
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	args = append(args, limit)
	cond := "true"
	if len(where) > 0 {
		cond = strings.Join(where, " AND ")
	}
	// Only fixed condition strings are joined here; every value is a bind parameter.
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT `+failureColumns+`
		FROM {schema}.failures f
		WHERE `+cond+`
		ORDER BY failed_at DESC, id DESC
		LIMIT $`+fmt.Sprint(len(args))), args...)
	if err != nil {
		return nil, s.wrap("list failures", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[FailureRow])
	return out, s.wrap("list failures", err)
}
