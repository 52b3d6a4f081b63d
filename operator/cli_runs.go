package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// The actions of a caller that does not link the workflows' Go code (the
// CLI, a script): start a run by the workflow's name, count runs, delete a
// finished run.

// ErrNotFinished is returned by DeleteRun for a run that is queued or
// running: only completed, failed and cancelled runs can be deleted.
var ErrNotFinished = store.ErrNotFinished

// StartOptions says how Start records a run. The zero value starts it due
// now, on the queue "default", at priority 0, without a key.
type StartOptions struct {
	// Key makes the start idempotent, as sdk.WithKey does: when a run of the
	// workflow holds the key with the same input (compared as JSON values),
	// Start returns it (Started.Created false) and starts nothing.
	Key string
	// Queue is the queue the run goes on; "" is "default".
	Queue string
	// Priority orders the runs of a queue, higher first (sdk.WithPriority).
	Priority int
	// Delay makes the run due only after it; it must not be negative.
	Delay time.Duration
	// FairKey, when not empty, shares the queue fairly with the runs of
	// other fairness keys, with weight FairWeight (1 to 1,000,000; 0 is 1),
	// as sdk.WithFairness does; docs/fairness.md says more.
	FairKey    string
	FairWeight int
}

// Started is the run Start recorded, or the one that held its key.
type Started struct {
	ID uuid.UUID
	// Created is false when a run with the same key, workflow and input
	// existed: Start returned it and started nothing.
	Created bool
}

// Start records a run of the workflow named workflow with input (JSON; nil
// is JSON null), as sdk.Start does, and announces it to idle workers. It is
// for callers that do not link the workflow's Go code, so nothing checks
// the input against the workflow's input type: a worker fails a run whose
// input does not decode with reason bad_input.
//
// It returns an error for an empty workflow name, a negative delay, a
// fairness weight out of range or without a key, an over-long fairness key,
// an input that is not JSON or is larger than sdk.DefaultMaxPayload (wrapping
// sdk.ErrPayloadTooLarge), and a key held by a run of another workflow
// (sdk.ErrWorkflowMismatch) or with another input (sdk.ErrKeyConflict):
// the checks of sdk.Start, one implementation, with its words. Unlike
// sdk.Start it does not send the insert again
// when the connection fails while it is in flight: the run may then exist,
// and a Start with a key finds out safely. Served says whether a live
// worker will pick the run up.
func (op *Operator) Start(ctx context.Context, workflow string, input json.RawMessage, o StartOptions) (Started, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return Started{}, err
	}
	if o.Queue == "" {
		o.Queue = "default"
	}
	if input == nil {
		input = json.RawMessage("null")
	}
	switch {
	case workflow == "":
		return Started{}, errors.New("operator.Start: empty workflow name")
	case !json.Valid(input): // sdk.Start encodes the input itself
		return Started{}, fmt.Errorf("start %s: the input is not JSON", workflow)
	}
	if o.FairKey != "" && o.FairWeight == 0 {
		o.FairWeight = 1
	}
	r := store.NewRun{Workflow: workflow, Queue: o.Queue, Priority: o.Priority, Key: o.Key, Input: input, Delay: o.Delay,
		FairKey: o.FairKey, FairWeight: o.FairWeight}
	if err := r.Check(sdk.DefaultMaxPayload); err != nil { // sdk.Start's checks
		return Started{}, fmt.Errorf("start %s: %w", workflow, err)
	}
	var err error
	if r.ID, err = uuid.NewV7(); err != nil {
		return Started{}, fmt.Errorf("start %s: new run ID: %w", workflow, err)
	}
	out, err := op.store.InsertRuns(ctx, op.store.Pool(), []store.NewRun{r})
	if err != nil {
		return Started{}, fmt.Errorf("start %s: %w", workflow, err)
	}
	if err := out[0].Check(workflow, o.Key); err != nil { // sdk.Start's checks
		return Started{}, err
	}
	return Started{ID: out[0].ID, Created: out[0].Created}, nil
}

// Served reports whether a live worker (the registry's live_workers)
// registered workflow and serves queue: a run started there is picked up
// now, or else waits until such a worker starts.
func (op *Operator) Served(ctx context.Context, workflow, queue string) (bool, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return false, err
	}
	return op.store.Served(ctx, workflow, queue)
}

// CountRuns counts the runs q selects, whatever its Limit: what SearchRuns
// would list, page after page. The count is exact, so it reads every run
// that matches; without a filter, that is the whole table.
func (op *Operator) CountRuns(ctx context.Context, q RunSearch) (int64, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return 0, err
	}
	return op.store.CountRuns(ctx, store.RunSearch(q))
}

// DeleteRun deletes one finished run (completed, failed or cancelled) with
// its steps, attempts, signals, events, wakes and failure rows, and its
// child runs with theirs (and so on), through the SQL function delete_run,
// and records it in one audit log row (action delete) with note. It
// returns what it deleted: the runs (the run and its descendants) and
// their failure rows.
//
// The audit row keeps the run's ID, workflow and status, and the ID of
// every run deleted, but not the run's key, nor a hash of it: a key is
// often a business identifier (an e-mail address, an order number), and
// the audit log is kept for good. The note is kept as given, so it should
// say why (a ticket), not whose.
//
// It returns an error wrapping ErrNotFound for a run that does not exist
// and ErrNotFinished for one queued or running, and refuses a child run
// whose parent may still replay it (the parent is queued, running, or
// failed and so may be requeued: delete the parent instead) and a run with
// child runs still queued or running. PurgeCompleted and PurgeFailures
// delete by age.
func (op *Operator) DeleteRun(ctx context.Context, runID uuid.UUID, note string) (record.Purged, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return record.Purged{}, err
	}
	return op.store.DeleteRun(ctx, runID, note)
}
