package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/record"
)

// where renders q's filters as a condition on runs aliased r, appending
// their values to args; SearchRuns and CountRuns select the same runs with
// it. Only fixed strings are joined; every value is a parameter.
//
// The keyset condition (AfterID set) keeps the runs after (AfterCreated,
// AfterID) in SearchRuns' order, created_at DESC, id DESC: a page of a long
// listing names its last run for the next one, which then starts where the
// last ended through runs_created_idx. Unlike an OFFSET, it reads no row of
// the pages before, and a run started meanwhile neither repeats a row nor
// pushes one out of the listing.
func (q RunSearch) where(args *[]any) string {
	conds := []string{"true"}
	add := func(cond string, v ...any) {
		*args = append(*args, v...)
		n := make([]any, len(v))
		for i := range v {
			n[i] = len(*args) - len(v) + i + 1
		}
		conds = append(conds, fmt.Sprintf(cond, n...))
	}
	if q.Workflow != "" {
		add("r.workflow = $%d", q.Workflow)
	}
	if q.Status != "" {
		add("r.status = $%d", string(q.Status))
	}
	if q.Queue != "" {
		add("r.queue = $%d", q.Queue)
	}
	if q.Key != "" {
		add("r.run_key = $%d", q.Key)
	}
	if !q.CreatedAfter.IsZero() {
		add("r.created_at >= $%d", q.CreatedAfter)
	}
	if !q.CreatedBefore.IsZero() {
		add("r.created_at < $%d", q.CreatedBefore)
	}
	if q.AfterID != uuid.Nil {
		add("(r.created_at, r.id) < ($%d::timestamptz, $%d::uuid)", q.AfterCreated, uuidArg(q.AfterID))
	}
	return strings.Join(conds, " AND ")
}

// CountRuns counts the runs q selects (its Limit aside), as SearchRuns
// would list them all. The count is exact: it reads every run that matches
// (through the index of the filter when there is one), so on a large table
// without a filter it costs a scan.
func (s *Store) CountRuns(ctx context.Context, q RunSearch) (int64, error) {
	var args []any
	cond := q.where(&args)
	var n int64
	err := s.query(ctx, s.pool, planHot, scanOne(&n), s.sql(`SELECT count(*) FROM {schema}.runs r WHERE `+cond), args...)
	return n, s.wrap("count runs", err)
}

// Progress is record.Progress, defined there for applications and operators to read.
type Progress = record.Progress

// RunProgress reads run id's status and end, and with steps how many of
// its steps have ended and when the last did. It returns ErrNotFound for a
// run that does not exist.
func (s *Store) RunProgress(ctx context.Context, id uuid.UUID, steps bool) (Progress, error) {
	var p Progress
	var status string
	sql, dest := sqlRunProgress, []any{&status, &p.FinishedAt}
	if steps {
		sql, dest = sqlRunStepProgress, append(dest, &p.StepsEnded, &p.LastStepEnd)
	}
	err := s.query(ctx, s.pool, planHot, scanOne(dest...), s.sql(sql), uuidArg(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Progress{}, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	p.Status = RunStatus(status)
	return p, s.wrap(fmt.Sprintf("read the progress of run %s", id), err)
}

// sqlRunProgress is a lookup of the run's row by primary key that reads
// none of its input, output or error: a caller that waits for a run's end
// reads it at every poll, so it costs the same whatever the payloads.
const sqlRunProgress = `SELECT r.status, r.finished_at FROM {schema}.runs r WHERE r.id = $1`

// sqlRunStepProgress is sqlRunProgress with, over the run's steps (found
// through their primary key, which starts with run_id), how many have
// ended and the latest end: enough to tell that a step has ended since the
// last read, without reading any step's output or error.
const sqlRunStepProgress = `
	SELECT r.status, r.finished_at, st.ended, st.last
	FROM {schema}.runs r,
	     LATERAL (SELECT count(s.finished_at) AS ended, max(s.finished_at) AS last
	              FROM {schema}.steps s WHERE s.run_id = r.id) st
	WHERE r.id = $1`
