package operator

import (
	"context"
	"time"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/record"
)

// ErrFailuresChanged is returned by RequeueFailureSet when the failures in
// the set's window are no longer the ones previewed (a requeue or a purge
// meanwhile): nothing was requeued.
var ErrFailuresChanged = store.ErrFailuresChanged

// RequeueSet is a requeue of a FailureSet, as its preview counted it.
type RequeueSet struct {
	// Filter is the set's (record.FailureSet.Filter), its window included:
	// the failures are selected again by it, in the statement that
	// requeues them.
	Filter record.FailureGroupFilter
	// Digest is the set's as previewed (record.FailureSet.Digest): the
	// requeue is refused (ErrFailuresChanged) once the set no longer has
	// it.
	Digest string
	// SkipIndeterminate leaves failed the runs that failed indeterminate
	// (their at-most-once activity would run again) and requeues the
	// others.
	SkipIndeterminate bool
	// Note is recorded in the audit_log row; empty for none.
	Note string
	// Audit says how the person selected the set (a page's filter), for the
	// audit row's filter, beside the window, the set's size and its digest;
	// nil for none.
	Audit map[string]string
}

// FailureSet counts, breaks down and names the open failures f selects, of
// any number, fixing the window: with no f.Until, it ends at the database's
// now. The result is a few rows, however many failures: what a preview of a
// requeue by filter shows (with a sample from OpenFailures of its Filter)
// and its confirm hands to RequeueFailureSet. Failures that come after the
// window (an incident still going on) are not in it.
func (op *Operator) FailureSet(ctx context.Context, f record.FailureGroupFilter) (record.FailureSet, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return record.FailureSet{}, err
	}
	return op.store.FailureSet(ctx, f)
}

// RequeueFailureSet requeues the runs of the open failures in q's window
// when they are still the set previewed (q.Digest): one statement with one
// audit_log row (the filter, the window, the set's size and digest, the
// note), whatever their number; the failure IDs never leave the database.
// It returns the runs it put back, or ErrFailuresChanged and changes
// nothing.
func (op *Operator) RequeueFailureSet(ctx context.Context, q RequeueSet) (int64, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return 0, err
	}
	return op.store.RequeueFailureSet(ctx, store.RequeueSet(q))
}

// PurgeCutoff returns now minus olderThan by the database's clock: the
// fixed cutoff (PurgeOptions.Before) that a preview of PurgeFailures
// counts against and its confirm deletes against, so that the runs
// finishing meanwhile do not join the set.
func (op *Operator) PurgeCutoff(ctx context.Context, olderThan time.Duration) (time.Time, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return time.Time{}, err
	}
	return op.store.PurgeCutoff(ctx, olderThan)
}

// PurgeSample returns the oldest limit runs (0: 20) that PurgeFailures with
// o would delete, and how many it would delete of each workflow: the runs
// the SQL function purge_failure_candidates selects for purge_failures
// itself. It locks nothing.
func (op *Operator) PurgeSample(ctx context.Context, o PurgeOptions, limit int) ([]record.PurgeCandidate, []record.PurgeWorkflow, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, nil, err
	}
	return op.store.PurgeSample(ctx, store.PurgeOptions(o), limit)
}
