package operator

import (
	"context"

	"github.com/tenurehq/tenure/internal/store"
)

// PurgeOptions selects what a purge deletes: runs that finished more than
// OlderThan ago (not negative; 0: all that qualify), or before the fixed
// time Before (from PurgeCutoff, with OlderThan 0: a count and the purge
// after it select the same runs), of one Workflow or all, with DryRun to
// count without deleting (it locks nothing), and a Note for the audit log.
type PurgeOptions = store.PurgeOptions

// Purged counts what a purge deleted, or would delete in a dry run: Runs
// (with their steps and attempts) and Failures (failure rows).
type Purged = store.Purged

// PurgeCompleted deletes the runs that completed or were cancelled more than
// o.OlderThan ago, through the SQL function purge_completed. Runs with
// failure history are kept: only PurgeFailures deletes failure rows. Unless
// it is a dry run it writes an audit_log row with the count.
func (op *Operator) PurgeCompleted(ctx context.Context, o PurgeOptions) (Purged, error) {
	if err := op.ready(ctx); err != nil {
		return Purged{}, err
	}
	return op.store.PurgeCompleted(ctx, o)
}

// PurgeFailures deletes the runs with failure history (failed runs, and
// runs that failed before a requeue) that finished more than o.OlderThan
// ago, failure rows included, through the SQL function purge_failures.
// Failure rows are never deleted otherwise; unless it is a dry run it writes
// an audit_log row with both counts.
func (op *Operator) PurgeFailures(ctx context.Context, o PurgeOptions) (Purged, error) {
	if err := op.ready(ctx); err != nil {
		return Purged{}, err
	}
	return op.store.PurgeFailures(ctx, o)
}
