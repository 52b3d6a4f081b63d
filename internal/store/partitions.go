package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// HistoryAhead is how many days ahead of today (UTC) the partitions of
// steps and attempts are made (migration 22): runs created on those days
// find theirs attached, whoever made it.
const HistoryAhead = 2

// EnsureHistoryPartitions makes the missing day partitions of steps and
// attempts from today to HistoryAhead days later, through the SQL function
// ensure_history_partitions, and returns the names of those it made. It
// waits at most 100 ms for a lock (the function's lock_timeout): a call
// that times out has made nothing it reports and is to be tried again.
func (s *Store) EnsureHistoryPartitions(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, s.sql(`SELECT {schema}.ensure_history_partitions($1)`), HistoryAhead)
	if err != nil {
		return nil, s.wrap("make history partitions", err)
	}
	made, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return made, s.wrap("make history partitions", err)
}
