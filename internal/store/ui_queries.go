package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/record"
)

// The read-only statements of the web UI (package ui): failure groups, run
// search, runs in flight and child runs. Each reads through an index, so
// that a page costs the same with 100,000 open failures as with ten.

// Fingerprint is record.Fingerprint, defined there for applications and operators to read.
type Fingerprint = record.Fingerprint

// FailureGroupFilter is record.FailureGroupFilter, defined there for applications and operators to read.
type FailureGroupFilter = record.FailureGroupFilter

// failureGroupWhere renders f as a condition on failures aliased f, appending its
// values to args. Only fixed strings are joined; every value is a
// parameter. A nil activity or error type is matched as NULL, so that a
// group's condition stays a range of failures_open_fingerprint_idx. run,
// when not nil, is the run f.Key names, already looked up.
func failureGroupWhere(f FailureGroupFilter, args *[]any, run *uuid.UUID) string {
	conds := []string{"f.requeued_at IS NULL"}
	add := func(cond string, v any) {
		*args = append(*args, v)
		conds = append(conds, fmt.Sprintf(cond, len(*args)))
	}
	if f.Workflow != "" {
		add("f.workflow = $%d", f.Workflow)
	}
	if f.Activity != "" {
		add("f.activity = $%d", f.Activity)
	}
	if f.Reason != "" {
		add("f.reason = $%d", string(f.Reason))
	}
	if !f.Since.IsZero() {
		add("f.failed_at >= $%d", f.Since)
	}
	if !f.Until.IsZero() {
		add("f.failed_at < $%d", f.Until)
	}
	switch {
	case run != nil:
		add("f.run_id = $%d", uuidArg(*run))
	case f.Key != "":
		add("f.run_id = (SELECT r.id FROM {schema}.runs r WHERE r.run_key = $%d)", f.Key)
	}
	if fp := f.Fingerprint; fp != nil {
		add("f.workflow = $%d", fp.Workflow)
		if fp.Activity == "" {
			conds = append(conds, "f.activity IS NULL")
		} else {
			add("f.activity = $%d", fp.Activity)
		}
		add("f.reason = $%d", string(fp.Reason))
		if fp.ErrorType == "" {
			conds = append(conds, "f.error_type IS NULL")
		} else {
			add("f.error_type = $%d", fp.ErrorType)
		}
		if fp.Message == "" {
			conds = append(conds, "coalesce(f.error_message, '') = ''")
		} else {
			add("f.fingerprint = $%d", fp.Message)
		}
	}
	return strings.Join(conds, " AND ")
}

// FailureGroup is record.FailureGroup, defined there for applications and operators to read.
type FailureGroup = record.FailureGroup

// FailureGroups is record.FailureGroups, defined there for applications and operators to read.
type FailureGroups = record.FailureGroups

// FailureGroups groups the open failures f selects by fingerprint, most
// failures first, at most limit groups (0: 100), each with its failures in
// buckets equal slices of time from the oldest failure selected (or
// f.Since) to now.
//
// The grouping reads failures_open_fingerprint_idx alone, an index-only scan
// in the order of the groups that never evaluates failure_fingerprint. The
// planner cannot know that: it prices the three regular expressions per row
// at almost nothing and prefers a sequential scan or another index, which
// evaluates them for every row (30 times slower at 100,000 failures), and
// the inflated cost of the alternative sets off JIT compilation (half a
// second). So the statement runs in a transaction of its own with every
// plan but the index-only scan disabled, and without JIT.
func (s *Store) FailureGroups(ctx context.Context, f FailureGroupFilter, buckets, limit int) (FailureGroups, error) {
	if buckets <= 0 {
		buckets = 24
	}
	if limit <= 0 {
		limit = 100
	}
	var out FailureGroups
	var run *uuid.UUID
	if f.Key != "" {
		id, err := s.runIDByKey(ctx, f.Key)
		if err != nil || id == nil {
			return out, err
		}
		run = id
	}
	var args []any
	cond := failureGroupWhere(f, &args, run)
	// min alone is answered from the end of an index on failed_at.
	var oldest *time.Time
	var now time.Time
	err := s.pool.QueryRow(ctx, s.sql(`SELECT min(f.failed_at), now() FROM {schema}.failures f WHERE `+cond), args...).Scan(&oldest, &now)
	if err != nil {
		return out, s.wrap("group failures", err)
	}
	if oldest == nil {
		out.From, out.Width = now.Add(-time.Hour), time.Hour/time.Duration(buckets)
		return out, nil
	}
	from := now.Add(-time.Hour)
	if !f.Since.IsZero() {
		from = f.Since
	} else if oldest.Before(from) {
		from = *oldest
	}
	out.From = from
	out.Width = max(now.Sub(from)/time.Duration(buckets), time.Second)
	args = append(args, bucketBounds(from, out.Width, buckets), limit)
	stmt := s.sql(failureGroupsSQL(cond, len(args)-1, len(args), buckets))
	if err := s.readFailureGroups(ctx, stmt, args, &out); err != nil {
		return out, s.wrap("group failures", err)
	}
	if len(out.Groups) == 0 {
		return out, nil
	}
	return out, s.sampleFailureMessages(ctx, out.Groups)
}

// runIDByKey is the id of the run of key, nil if there is none.
func (s *Store) runIDByKey(ctx context.Context, key string) (*uuid.UUID, error) {
	var id uuid.UUID
	err := s.pool.QueryRow(ctx, s.sql(`SELECT id FROM {schema}.runs WHERE run_key = $1`), key).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, s.wrap("find run by key", err)
	}
	return &id, nil
}

// bucketBounds are the buckets-1 inner bounds of buckets slices of time
// width long from from. Bucket i holds failed_at in [from + i·width,
// from + (i+1)·width), the first and last open-ended.
func bucketBounds(from time.Time, width time.Duration, buckets int) []time.Time {
	bounds := make([]time.Time, buckets-1)
	for i := range bounds {
		bounds[i] = from.Add(time.Duration(i+1) * width)
	}
	return bounds
}

// failureGroupsSQL is the statement of FailureGroups over the failures cond
// selects, with the bucket bounds in parameter b and the limit in n. Each
// bucket's filter compares failed_at with its bounds, a parameter: no
// per-row arithmetic.
func failureGroupsSQL(cond string, b, n, buckets int) string {
	counts := make([]string, buckets)
	for i := range counts {
		switch {
		case i == 0:
			counts[i] = fmt.Sprintf("count(*) FILTER (WHERE x.failed_at < ($%d::timestamptz[])[1])", b)
		case i == buckets-1:
			counts[i] = fmt.Sprintf("count(*) FILTER (WHERE x.failed_at >= ($%d::timestamptz[])[%d])", b, i)
		default:
			counts[i] = fmt.Sprintf("count(*) FILTER (WHERE x.failed_at >= ($%[1]d::timestamptz[])[%[2]d] AND x.failed_at < ($%[1]d::timestamptz[])[%[3]d])", b, i, i+1)
		}
	}
	return fmt.Sprintf(`
		SELECT x.workflow, coalesce(x.activity, ''), x.reason, coalesce(x.error_type, ''), coalesce(x.message, ''),
		       count(*), min(x.failed_at), max(x.failed_at), min(x.run_id::text)::uuid,
		       ARRAY[%s], sum(count(*)) OVER ()
		FROM (
			SELECT f.workflow, f.activity, f.reason, f.error_type, f.fingerprint AS message,
			       f.failed_at, f.run_id
			FROM {schema}.failures f
			WHERE %s) x
		GROUP BY x.workflow, x.activity, x.reason, x.error_type, x.message
		ORDER BY 6 DESC, 8 DESC
		LIMIT $%d`, strings.Join(counts, ",\n\t\t\t       "), cond, n)
}

// readFailureGroups runs stmt, the grouping, in a read-only transaction of
// its own with every plan but the index-only scan disabled and without JIT
// (see FailureGroups), into out's Groups and Total.
func (s *Store) readFailureGroups(ctx context.Context, stmt string, args []any, out *FailureGroups) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_indexscan = off; SET LOCAL jit = off`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, stmt, args...)
		if err != nil {
			return err
		}
		out.Groups, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (FailureGroup, error) {
			var g FailureGroup
			err := row.Scan(&g.Workflow, &g.Activity, &g.Reason, &g.ErrorType, &g.Message, &g.Count,
				&g.FirstSeen, &g.LastSeen, &g.SampleRunID, &g.Buckets, &out.Total)
			return g, err
		})
		return err
	})
}

// sampleFailureMessages sets each group's SampleMessage: one raw message per
// group shown, read by the sample's open failure.
func (s *Store) sampleFailureMessages(ctx context.Context, groups []FailureGroup) error {
	ids := make([]uuidParam, len(groups))
	for i, g := range groups {
		ids[i] = uuidArg(g.SampleRunID)
	}
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT f.run_id, coalesce(f.error_message, '') FROM {schema}.failures f
		WHERE f.run_id = ANY ($1::uuid[]) AND f.requeued_at IS NULL`), ids)
	if err != nil {
		return s.wrap("sample failure messages", err)
	}
	msgs := map[uuid.UUID]string{}
	var id uuid.UUID
	var msg string
	if _, err := pgx.ForEachRow(rows, []any{&id, &msg}, func() error { msgs[id] = msg; return nil }); err != nil {
		return s.wrap("sample failure messages", err)
	}
	for i := range groups {
		groups[i].SampleMessage = msgs[groups[i].SampleRunID]
	}
	return nil
}

// OpenFailures lists the open failures f selects, oldest first, at most
// limit of them (0: 1000): the rows a bulk requeue from the UI previews and
// then touches.
func (s *Store) OpenFailures(ctx context.Context, f FailureGroupFilter, limit int) ([]FailureRow, error) {
	if limit <= 0 {
		limit = 1000
	}
	var args []any
	cond := failureGroupWhere(f, &args, nil)
	args = append(args, limit)
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT `+failureColumns+`
		FROM {schema}.failures f
		WHERE `+cond+`
		ORDER BY f.failed_at, f.id
		LIMIT $`+fmt.Sprint(len(args))), args...)
	if err != nil {
		return nil, s.wrap("list open failures", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[FailureRow])
	return out, s.wrap("list open failures", err)
}

// RunSearch selects runs for SearchRuns; zero fields match all.
type RunSearch struct {
	Workflow      string
	Status        RunStatus
	Queue         string
	Key           string
	CreatedAfter  time.Time // created at or after
	CreatedBefore time.Time // created before
	Limit         int       // 0: 100
	// AfterCreated and AfterID, when AfterID is set, keep the runs that
	// come after that one in the newest-first order (see RunSearch.where).
	AfterCreated time.Time
	AfterID      uuid.UUID
}

// SearchRuns lists the runs q selects, newest first, as ListRuns does,
// reading runs_created_idx backwards (or the key's index) and stopping at
// the limit.
func (s *Store) SearchRuns(ctx context.Context, q RunSearch) ([]RunSummary, error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	var args []any
	cond := q.where(&args)
	args = append(args, q.Limit)
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT r.id, r.workflow, r.queue, coalesce(r.run_key, ''), r.status, coalesce(r.claimant, ''), r.epoch, r.requeues,
		       r.created_at, r.updated_at, r.finished_at,
		       (extract(epoch FROM r.lease_expires_at - now()) * 1000)::bigint,
		       coalesce(f.reason, ''), coalesce(f.step, 0), coalesce(f.activity, '')
		FROM {schema}.runs r
		LEFT JOIN {schema}.failures f ON f.run_id = r.id AND f.requeued_at IS NULL
		WHERE `+cond+`
		ORDER BY r.created_at DESC, r.id DESC
		LIMIT $`+fmt.Sprint(len(args))), args...)
	if err != nil {
		return nil, s.wrap("search runs", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunSummary, error) {
		var r RunSummary
		var leftMS *int64
		err := row.Scan(&r.ID, &r.Workflow, &r.Queue, &r.Key, &r.Status, &r.Claimant, &r.Epoch, &r.Requeues,
			&r.CreatedAt, &r.UpdatedAt, &r.FinishedAt, &leftMS, &r.Reason, &r.Step, &r.Activity)
		if leftMS != nil {
			d := time.Duration(*leftMS) * time.Millisecond
			r.LeaseLeft = &d
		}
		return r, err
	})
	return out, s.wrap("search runs", err)
}

// InFlight is record.InFlight, defined there for applications and operators to read.
type InFlight = record.InFlight

// InFlightRuns lists the runs workers hold (the in_flight view), by worker
// and then oldest first, at most limit (0: 500). It reads the running runs
// through runs_lease_idx and each one's last attempt through the attempts'
// primary key (schema 8).
func (s *Store) InFlightRuns(ctx context.Context, limit int) ([]InFlight, error) {
	if limit <= 0 {
		limit = 500
	}
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT run_id, workflow, queue, coalesce(claimant, ''), epoch,
		       (extract(epoch FROM lease_left) * 1000)::bigint, started_at,
		       coalesce(step, 0), coalesce(activity, ''), coalesce(attempt, 0), attempt_started_at
		FROM {schema}.in_flight
		ORDER BY claimant, started_at, run_id
		LIMIT $1`), limit)
	if err != nil {
		return nil, s.wrap("list runs in flight", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (InFlight, error) {
		var r InFlight
		var leftMS int64
		err := row.Scan(&r.RunID, &r.Workflow, &r.Queue, &r.Claimant, &r.Epoch, &leftMS, &r.StartedAt,
			&r.Step, &r.Activity, &r.Attempt, &r.AttemptStartedAt)
		r.LeaseLeft = time.Duration(leftMS) * time.Millisecond
		return r, err
	})
	return out, s.wrap("list runs in flight", err)
}

// ChildRun is record.ChildRun, defined there for applications and operators to read.
type ChildRun = record.ChildRun

// ChildRuns lists the runs that the run parent started, in order of the
// parent's steps, at most limit (0: 100), through runs_parent_idx.
func (s *Store) ChildRuns(ctx context.Context, parent uuid.UUID, limit int) ([]ChildRun, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT r.id, r.workflow, r.status, coalesce(r.parent_step, 0), r.created_at
		FROM {schema}.runs r
		WHERE r.parent_run_id = $1
		ORDER BY r.parent_step, r.created_at
		LIMIT $2`), uuidArg(parent), limit)
	if err != nil {
		return nil, s.wrap("list child runs", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ChildRun])
	return out, s.wrap("list child runs", err)
}
