package operator

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
)

// FailureFilter selects failure rows for Failures; zero fields match
// everything. Only open failures (not requeued) match unless
// IncludeRequeued is set.
type FailureFilter struct {
	// RunID, when set, keeps the failures of that run.
	RunID uuid.UUID
	// Workflow, Activity and Reason, when set, keep the failures of that
	// workflow, activity and reason.
	Workflow string
	Activity string
	Reason   policy.Reason
	// Since and Until, when set, keep the failures at or after Since and
	// before Until.
	Since, Until time.Time
	// IncludeRequeued keeps the failures closed by a requeue too.
	IncludeRequeued bool
	// Limit is how many failures at most; 0 means 1000.
	Limit int
	// AfterFailed and AfterID, when AfterID is set, keep the failures that
	// come after that one in the newest-first order (failed_at DESC, id
	// DESC): with the FailedAt and ID of a page's last row, the next page
	// (keyset paging, as RunSearch.AfterID for runs).
	AfterFailed time.Time
	AfterID     int64
}

// Failures lists the failure rows that f selects, newest first.
func (op *Operator) Failures(ctx context.Context, f FailureFilter) ([]record.Failure, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.Failures(ctx, store.FailureFilter(f))
}

// FailureCounts counts the failures since the given time in buckets of
// width (0: one hour), oldest bucket first and the most frequent first
// within a bucket: which activities fail most, why, and since when. It is
// the SQL function failure_buckets.
func (op *Operator) FailureCounts(ctx context.Context, width time.Duration, since time.Time) ([]record.FailureCount, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.FailureCounts(ctx, width, since)
}
