package store

import (
	"context"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/record"
)

// PurgeOptions selects what a retention run deletes.
type PurgeOptions struct {
	// OlderThan keeps runs that finished less than this long ago. It must
	// not be negative; 0 deletes every finished run that qualifies.
	OlderThan time.Duration
	// Before, when set, is the cutoff itself instead of an age: the runs
	// that finished before it (a time by the database's clock, such as
	// PurgeCutoff returns), so that a count and the purge that follows it
	// minutes later select the same runs. OlderThan must then be 0. The
	// audit row records it.
	Before time.Time
	// Workflow limits the purge to one workflow; empty: all.
	Workflow string
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
	// Note is recorded in the audit_log row.
	Note string
}

// Purged is record.Purged, defined there for applications and operators to read.
type Purged = record.Purged

// PurgeCompleted deletes runs that completed or were cancelled more than
// o.OlderThan ago, through the SQL function purge_completed. Runs with
// failure history are kept: only PurgeFailures deletes failure rows. Unless
// it is a dry run it writes an audit_log row with the count.
func (s *Store) PurgeCompleted(ctx context.Context, o PurgeOptions) (Purged, error) {
	return s.purge(ctx, "purge_completed", o)
}

// PurgeFailures deletes runs with failure history (failed runs, and runs
// that failed before a requeue) that finished more than o.OlderThan ago,
// failure rows included, through the SQL function purge_failures. Failure
// rows are never deleted otherwise: this is the explicit operator action the
// design asks for, and unless it is a dry run it writes an audit_log row with
// both counts.
func (s *Store) PurgeFailures(ctx context.Context, o PurgeOptions) (Purged, error) {
	return s.purge(ctx, "purge_failures", o)
}

// purge calls one of the two retention functions (fn, a constant), or with
// o.Before its _before variant (migration 13).
func (s *Store) purge(ctx context.Context, fn string, o PurgeOptions) (Purged, error) {
	if o.OlderThan < 0 {
		return Purged{}, fmt.Errorf("%s: negative age %s", fn, o.OlderThan)
	}
	var p Purged
	var err error
	if o.Before.IsZero() {
		err = s.pool.QueryRow(ctx, s.sql(`
			SELECT runs_deleted, failures_deleted
			FROM {schema}.`+fn+`($1::bigint * interval '1 microsecond', nullif($2, ''), $3, nullif($4, ''))`),
			o.OlderThan.Microseconds(), o.Workflow, o.DryRun, o.Note).Scan(&p.Runs, &p.Failures)
	} else {
		if o.OlderThan != 0 {
			return Purged{}, fmt.Errorf("%s: an age (%s) and a cutoff (%s): give one", fn, o.OlderThan, o.Before.Format(time.RFC3339))
		}
		err = s.pool.QueryRow(ctx, s.sql(`
			SELECT runs_deleted, failures_deleted
			FROM {schema}.`+fn+`_before($1, nullif($2, ''), $3, nullif($4, ''))`),
			o.Before, o.Workflow, o.DryRun, o.Note).Scan(&p.Runs, &p.Failures)
	}
	return p, s.wrap(fn, err)
}
