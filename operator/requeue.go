package operator

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
)

// RequeueFilter selects open failures for RequeueFailures by workflow,
// activity, reason and time of failure. Set fields must all match; at least
// one must be set, or All (else ErrNoFilter).
type RequeueFilter struct {
	// Workflow, Activity and Reason, when set, keep the failures of that
	// workflow, activity and reason.
	Workflow string
	Activity string
	Reason   policy.Reason
	// Since keeps the failures at or after it; zero: no lower bound.
	Since time.Time
	// Until keeps the failures before it; zero: no upper bound.
	Until time.Time
	// All matches every open failure when no other field is set. It exists
	// so that "everything" is never the result of a forgotten flag.
	All bool
}

// RequeueOptions says how RequeueFailures runs. The zero value requeues
// everything that matches in one statement with one audit row.
type RequeueOptions struct {
	// DryRun changes nothing and returns what would be requeued.
	DryRun bool
	// Note is recorded in the audit_log row(s); empty for none.
	Note string
	// BatchSize, when positive, requeues at most this many runs per
	// statement (and audit row), oldest failure first, so that a large
	// requeue holds no long locks and can report progress; 0 requeues all
	// in one. Failures that happen while it works are not picked up.
	BatchSize int
	// Progress, if set, is called after each batch with the runs requeued
	// so far and the number that matched at the start.
	Progress func(done, total int)
}

// Requeue puts a failed run back in the queue, through the SQL function
// requeue_run: the run keeps its ID and its history, the step that failed
// gets a fresh budget, the failure row is marked requeued (time and count)
// and stays as history, idle workers are woken, and an audit_log row records
// it with note (an incident number, say; "" for none). It returns an error
// wrapping ErrNotFailed for a run that is not failed, ErrNotFound for one
// that does not exist.
//
// Requeueing a run that failed as indeterminate invokes its at-most-once
// activity again: do it once you know its effect did not happen.
func (op *Operator) Requeue(ctx context.Context, runID uuid.UUID, note string) error {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return err
	}
	return op.store.RequeueRunWithNote(ctx, runID, note)
}

// RequeueFailures requeues, as Requeue does, every run whose open failure f
// selects, oldest failure first, through the SQL function requeue_failures:
// each statement writes an audit_log row with the filter, the count and the
// note. With o.DryRun it changes nothing and returns what it would requeue.
// It returns ErrNoFilter when f sets nothing and All is false.
func (op *Operator) RequeueFailures(ctx context.Context, f RequeueFilter, o RequeueOptions) ([]record.RequeueCandidate, error) {
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.RequeueFailures(ctx, store.RequeueFilter(f), store.RequeueOptions(o))
}

// RequeueFailureIDs requeues the runs whose open failure rows are exactly
// failureIDs (record.Failure.ID, as a preview listed them), with one audit_log row
// carrying note. A run requeued meanwhile, which may have failed again with
// another failure row, is left alone: what is put back is a subset of what
// was previewed. filter, recorded in the audit row beside the IDs, says how
// they were selected (nil for none). It returns the runs it put back.
func (op *Operator) RequeueFailureIDs(ctx context.Context, failureIDs []int64, note string, filter map[string]string) ([]uuid.UUID, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.RequeueFailureIDs(ctx, failureIDs, note, filter)
}
