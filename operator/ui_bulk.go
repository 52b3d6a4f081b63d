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

// FailurePurge selects the runs PurgeFailuresBefore deletes: those with
// failure history that finished before Before (from PurgeCutoff), of one
// Workflow or all, with DryRun to count only and a Note for the audit log.
type FailurePurge = store.FailurePurge

// PurgeCandidate is one run a purge of failures would delete: its workflow,
// status, end, failure rows and last failure's reason.
type PurgeCandidate = store.PurgeCandidate

// PurgeWorkflow is how many of the runs a purge would delete belong to one
// workflow.
type PurgeWorkflow = store.PurgeWorkflow

// PurgeCutoff returns now minus olderThan by the database's clock: the
// fixed cutoff that a preview of PurgeFailuresBefore counts against and its
// confirm deletes against.
func (op *Operator) PurgeCutoff(ctx context.Context, olderThan time.Duration) (time.Time, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return time.Time{}, err
	}
	return op.store.PurgeCutoff(ctx, olderThan)
}

// PurgeFailuresBefore is PurgeFailures for the runs that finished before a
// fixed time, p.Before, rather than before an age from now: a purge
// previewed and then confirmed deletes the runs the preview counted, not
// also those that finished meanwhile. It is one call of the SQL function
// purge_failures, with one audit_log row unless p.DryRun.
func (op *Operator) PurgeFailuresBefore(ctx context.Context, p FailurePurge) (Purged, error) {
	if err := op.ready(ctx); err != nil {
		return Purged{}, err
	}
	return op.store.PurgeFailuresBefore(ctx, p)
}

// PurgeSample returns the oldest limit runs (0: 20) that PurgeFailuresBefore
// with p would delete, and how many it would delete of each workflow.
func (op *Operator) PurgeSample(ctx context.Context, p FailurePurge, limit int) ([]PurgeCandidate, []PurgeWorkflow, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, nil, err
	}
	return op.store.PurgeSample(ctx, p, limit)
}
