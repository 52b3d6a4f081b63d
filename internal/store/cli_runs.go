package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
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
