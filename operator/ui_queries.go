package operator

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/record"
)

// FailureGroups groups the open failures f selects by fingerprint, most
// failures first, at most limit groups (0: 100), with their failures in
// buckets equal slices of time (0: 24) from the oldest failure selected (or
// f.Since) to now. It reads one index (failures_open_fingerprint_idx), so
// its cost grows with the open failures selected, not with history.
func (op *Operator) FailureGroups(ctx context.Context, f record.FailureGroupFilter, buckets, limit int) (record.FailureGroups, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return record.FailureGroups{}, err
	}
	return op.store.FailureGroups(ctx, f, buckets, limit)
}

// OpenFailures lists the open failures f selects, oldest first, at most
// limit (0: 1000): what a bulk requeue of a group would touch.
func (op *Operator) OpenFailures(ctx context.Context, f record.FailureGroupFilter, limit int) ([]record.Failure, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.OpenFailures(ctx, f, limit)
}

// RunSearch selects runs for SearchRuns and CountRuns; zero fields match
// all.
type RunSearch struct {
	// Workflow, Status, Queue and Key, when set, keep the runs of that
	// workflow, in that status, of that queue, or started with that key
	// (sdk.WithKey).
	Workflow string
	Status   record.RunStatus
	Queue    string
	Key      string
	// CreatedAfter and CreatedBefore, when set, keep the runs created at or
	// after the one and before the other.
	CreatedAfter  time.Time
	CreatedBefore time.Time
	// Limit is how many runs at most; 0 means 100 (SearchRuns only).
	Limit int
	// AfterCreated and AfterID, when AfterID is set, keep the runs that
	// come after that one in the newest-first order: with the CreatedAt and
	// ID of a page's last run, the next page (keyset paging: no run is
	// listed twice or skipped).
	AfterCreated time.Time
	AfterID      uuid.UUID
}

// SearchRuns lists the runs q selects, newest first, as Runs does, with a
// creation time range.
func (op *Operator) SearchRuns(ctx context.Context, q RunSearch) ([]record.RunSummary, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.SearchRuns(ctx, store.RunSearch(q))
}

// InFlight lists the runs workers hold now, by worker, oldest first, at
// most limit (0: 500).
func (op *Operator) InFlight(ctx context.Context, limit int) ([]record.InFlight, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.InFlightRuns(ctx, limit)
}

// Children lists the runs that the run parent started, in order of its
// steps, at most limit (0: 100).
func (op *Operator) Children(ctx context.Context, parent uuid.UUID, limit int) ([]record.ChildRun, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.ChildRuns(ctx, parent, limit)
}
