package operator

import (
	"context"
	"time"

	"github.com/tenurehq/tenure/internal/store"
)

// FailureMember is one open failure of a set selected by filter: its row ID
// (what RequeueFailureIDs takes), run, workflow, activity, reason and time.
type FailureMember = store.FailureMember

// OpenFailureMembers lists every open failure f selects, oldest first,
// however many: the set a requeue by filter previews (its count, breakdown
// and a sample) and then requeues by ID with RequeueFailureIDs, in one
// statement with one audit row.
func (op *Operator) OpenFailureMembers(ctx context.Context, f FailureGroupFilter) ([]FailureMember, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.OpenFailureMembers(ctx, f)
}

// PurgeCandidate is one run a purge of failures would delete: its workflow,
// status, end, failure rows and last failure's reason.
type PurgeCandidate = store.PurgeCandidate

// PurgeWorkflow is how many of the runs a purge would delete belong to one
// workflow.
type PurgeWorkflow = store.PurgeWorkflow

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
func (op *Operator) PurgeSample(ctx context.Context, o PurgeOptions, limit int) ([]PurgeCandidate, []PurgeWorkflow, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, nil, err
	}
	return op.store.PurgeSample(ctx, o, limit)
}
