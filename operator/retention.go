package operator

import (
	"context"
	"time"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/record"
)

// PurgeOptions selects what a purge (PurgeCompleted, PurgeFailures,
// PurgeSample) deletes.
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
	// DryRun counts what would be deleted and deletes nothing (it locks
	// nothing).
	DryRun bool
	// Note is recorded in the audit_log row; empty for none.
	Note string
}

// PurgeCompleted deletes the runs that completed or were cancelled more than
// o.OlderThan ago, through the SQL function purge_completed. Runs with
// failure history are kept: only PurgeFailures deletes failure rows. Unless
// it is a dry run it writes an audit_log row with the count.
func (op *Operator) PurgeCompleted(ctx context.Context, o PurgeOptions) (record.Purged, error) {
	if err := op.ready(ctx); err != nil {
		return record.Purged{}, err
	}
	return op.store.PurgeCompleted(ctx, store.PurgeOptions(o))
}

// PurgeFailures deletes the runs with failure history (failed runs, and
// runs that failed before a requeue) that finished more than o.OlderThan
// ago, failure rows included, through the SQL function purge_failures.
// Failure rows are never deleted otherwise; unless it is a dry run it writes
// an audit_log row with both counts.
func (op *Operator) PurgeFailures(ctx context.Context, o PurgeOptions) (record.Purged, error) {
	if err := op.ready(ctx); err != nil {
		return record.Purged{}, err
	}
	return op.store.PurgeFailures(ctx, store.PurgeOptions(o))
}

// Retention reads the retention configured (the SQL table
// history_retention): the ages after which retention drops the histories
// of completed, cancelled and failed runs. A new schema keeps everything.
func (op *Operator) Retention(ctx context.Context) (record.HistoryRetention, error) {
	if err := op.ready(ctx); err != nil {
		return record.HistoryRetention{}, err
	}
	return op.store.RetentionConfigured(ctx)
}

// SetRetention sets the retention (set_history_retention): r's ages (each
// at least an hour, or 0 to keep that kind of run for good), Archive and
// Note. Workers carry it out within ten minutes; RetainHistory does at
// once. One audit row.
func (op *Operator) SetRetention(ctx context.Context, r record.HistoryRetention) error {
	if err := op.ready(ctx); err != nil {
		return err
	}
	return op.store.SetRetention(ctx, r)
}

// RetainHistory carries out the retention configured now (the procedure
// retain_history), as the workers do every ten minutes: each day's
// partitions of steps and attempts of which some run may go are dropped,
// the histories the retention keeps moved to the day's new partitions
// first. It returns at once when another process is at it. by names who
// did it in the ledger (HistoryDrops) and the audit log.
func (op *Operator) RetainHistory(ctx context.Context, by, note string) error {
	if err := op.ready(ctx); err != nil {
		return err
	}
	return op.store.RetainHistory(ctx, by, note)
}

// HistoryDrops lists retention's drops, newest first, up to limit.
func (op *Operator) HistoryDrops(ctx context.Context, limit int) ([]record.HistoryDrop, error) {
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.HistoryDrops(ctx, limit)
}
