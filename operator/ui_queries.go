package operator

import (
	"context"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
)

// Fingerprint names a group of open failures: workflow, activity, reason,
// error type and the error message with its numbers, UUIDs and hex IDs
// replaced by placeholders (the SQL function failure_fingerprint).
type Fingerprint = store.Fingerprint

// FailureGroupFilter selects open failures for FailureGroups and
// OpenFailures by workflow, activity, reason, time of failure (at or after
// Since, before Until), the run's key and, with Fingerprint, one group;
// zero fields match everything.
type FailureGroupFilter = store.FailureGroupFilter

// FailureGroup is one group of open failures: its fingerprint, count, first
// and last seen, a sample run and message, and its failures per bucket.
type FailureGroup = store.FailureGroup

// FailureGroups is what FailureGroups returns: the groups, the number of
// open failures selected, and the buckets' time axis (From, Width).
type FailureGroups = store.FailureGroups

// FailureGroups groups the open failures f selects by fingerprint, most
// failures first, at most limit groups (0: 100), with their failures in
// buckets equal slices of time (0: 24) from the oldest failure selected (or
// f.Since) to now. It reads one index (failures_open_fingerprint_idx), so
// its cost grows with the open failures selected, not with history.
func (op *Operator) FailureGroups(ctx context.Context, f FailureGroupFilter, buckets, limit int) (FailureGroups, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return FailureGroups{}, err
	}
	return op.store.FailureGroups(ctx, f, buckets, limit)
}

// OpenFailures lists the open failures f selects, oldest first, at most
// limit (0: 1000): what a bulk requeue of a group would touch.
func (op *Operator) OpenFailures(ctx context.Context, f FailureGroupFilter, limit int) ([]Failure, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.OpenFailures(ctx, f, limit)
}

// RunSearch selects runs for SearchRuns by workflow, status, queue, key and
// creation time; zero fields match all. Limit 0 means 100. AfterCreated and
// AfterID, the CreatedAt and ID of a page's last run, start the next page
// after it (keyset paging: no run is listed twice or skipped).
type RunSearch = store.RunSearch

// SearchRuns lists the runs q selects, newest first, as Runs does, with a
// creation time range.
func (op *Operator) SearchRuns(ctx context.Context, q RunSearch) ([]RunSummary, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.SearchRuns(ctx, q)
}

// InFlight is one run a worker holds now (the in_flight view): the worker,
// the epoch, the lease time left (negative: expired, awaiting rescue) and the
// attempt running, if any.
type InFlight = store.InFlight

// InFlight lists the runs workers hold now, by worker, oldest first, at
// most limit (0: 500).
func (op *Operator) InFlight(ctx context.Context, limit int) ([]InFlight, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.InFlightRuns(ctx, limit)
}

// ChildRun is a run started by another run's workflow, at the parent's step
// ParentStep.
type ChildRun = store.ChildRun

// Children lists the runs that the run parent started, in order of its
// steps, at most limit (0: 100).
func (op *Operator) Children(ctx context.Context, parent uuid.UUID, limit int) ([]ChildRun, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.ChildRuns(ctx, parent, limit)
}
