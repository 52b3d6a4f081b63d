package operator

import (
	"context"
	"time"

	"github.com/tenurehq/tenure/internal/store"
)

// Failure is one row of the failure table: why a run gave up (an
// sdk.Reason), at which step and activity, after how many attempts, errors
// and rescues, its last error, and whether and how often it was requeued.
type Failure = store.FailureRow

// FailureFilter selects failure rows; zero fields match everything. Only
// open failures (not requeued) match unless IncludeRequeued is set. Limit 0
// means 1000. AfterFailed and AfterID, the FailedAt and ID of a page's last
// row, start the next page after it.
type FailureFilter = store.FailureFilter

// FailureCount is one bucket of FailureCounts: the failures of one
// workflow, activity and reason in one time bucket, and how many of them
// are still open (not requeued).
type FailureCount = store.FailureCount

// Failures lists the failure rows that f selects, newest first.
func (op *Operator) Failures(ctx context.Context, f FailureFilter) ([]Failure, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.Failures(ctx, f)
}

// FailureCounts counts the failures since the given time in buckets of
// width (0: one hour), oldest bucket first and the most frequent first
// within a bucket: which activities fail most, why, and since when. It is
// the SQL function failure_buckets.
func (op *Operator) FailureCounts(ctx context.Context, width time.Duration, since time.Time) ([]FailureCount, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.FailureCounts(ctx, width, since)
}
