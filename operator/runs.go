package operator

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/record"
)

// RunFilter selects runs for Runs; empty fields match all.
type RunFilter struct {
	// Workflow, when set, keeps the runs of that workflow.
	Workflow string
	// Status, when set, keeps the runs in that status; empty: any.
	Status record.RunStatus
	// Queue, when set, keeps the runs of that queue.
	Queue string
	// Key, when set, keeps the run started with that key (sdk.WithKey).
	Key string
	// Limit is how many runs at most; 0 means 100.
	Limit int
}

// Run returns the run with the given ID, with its open failure row if it
// failed, or an error wrapping ErrNotFound.
func (op *Operator) Run(ctx context.Context, id uuid.UUID) (record.Run, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return record.Run{}, err
	}
	return op.store.GetRun(ctx, id)
}

// RunByKey returns the run started with key (sdk.WithKey), as Run does. Keys
// are unique across workflows, so there is at most one.
func (op *Operator) RunByKey(ctx context.Context, key string) (record.Run, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return record.Run{}, err
	}
	return op.store.GetRunByKey(ctx, key)
}

// Runs lists the runs that f selects, newest first.
func (op *Operator) Runs(ctx context.Context, f RunFilter) ([]record.RunSummary, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.ListRuns(ctx, store.RunFilter(f))
}

// RunAuditLog returns the audit log rows that name the run: the requeues
// that put it back, with who, when and the note, oldest first. It is empty
// for a run never requeued, or one that does not exist (Run tells those
// apart). It reads what a run's page shows: RunIDs is left empty (Runs
// counts them) and Filter lacks failure_ids, so that the row of a requeue
// of a million runs is as cheap to each run's page as that of one.
func (op *Operator) RunAuditLog(ctx context.Context, runID uuid.UUID) ([]record.AuditEntry, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.RunAuditLog(ctx, runID)
}

// Schemas lists the schemas of the database that hold Tenure's tables,
// by name. It does not check the operator's own schema, so that it can
// explain a store.ErrSchemaMissing: the tables may be in another schema
// (WithSchema).
func (op *Operator) Schemas(ctx context.Context) ([]string, error) {
	if op == nil {
		return nil, errors.New("operator: nil *Operator (use operator.New)")
	}
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	return op.store.Schemas(ctx)
}

// Steps returns a run's steps in order: none for a run that has not started
// a step, or that does not exist (Run tells those apart).
func (op *Operator) Steps(ctx context.Context, runID uuid.UUID) ([]record.Step, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.StepRecords(ctx, runID)
}

// History returns the timeline of a run: every attempt of every step, in
// order of step and attempt, requeued ones included.
func (op *Operator) History(ctx context.Context, runID uuid.UUID) ([]record.Attempt, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.Attempts(ctx, runID)
}

// Cancel cancels a run, as sdk.Client.Cancel does, and records it in the
// audit log (action cancel) with note, as a requeue is (the SQL function
// cancel_run_noted): a run that has not started ends cancelled now
// (requested false); one that has is marked for cancellation (requested
// true), and its worker cancels the running activity, lets the workflow
// clean up and ends the run cancelled. It returns an error wrapping
// ErrFinished for a run that already ended, ErrNotFound for one that does
// not exist (and writes no audit row).
func (op *Operator) Cancel(ctx context.Context, runID uuid.UUID, note string) (requested bool, err error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return false, err
	}
	return op.store.CancelRunWithNote(ctx, runID, note)
}

// Signal sends the signal name with a JSON payload to a run, as
// sdk.Client.Send does (the SQL function send_signal), and returns the
// signal's ID. nil payload sends JSON null.
func (op *Operator) Signal(ctx context.Context, runID uuid.UUID, name string, payload []byte) (int64, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return 0, err
	}
	if name == "" {
		return 0, errors.New("operator.Signal: empty signal name")
	}
	if payload == nil {
		payload = []byte("null")
	}
	return op.store.SendSignal(ctx, op.store.Pool(), runID, name, payload)
}

// Workers lists the worker registry, live workers first; with all false,
// only the live ones. Each worker's heartbeat keeps its row, in the same
// statement that renews its leases.
func (op *Operator) Workers(ctx context.Context, all bool) ([]record.Worker, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.Workers(ctx, all)
}

// Orphans lists the queued runs (and the running ones whose lease expired)
// no live worker serves, per workflow, queue and build (the orphaned_runs
// view), most runs first: a run pinned to a build (sdk.WithPinning) is
// served only by a live worker of that build, and MoveRuns moves it.
func (op *Operator) Orphans(ctx context.Context) ([]record.Orphans, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.OrphanedRuns(ctx)
}

// Replication reads how the database server replicates commits: the web
// UI warns on every page while it is asynchronous.
func (op *Operator) Replication(ctx context.Context) (record.Replication, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return record.Replication{}, err
	}
	return op.store.ReadReplication(ctx, op.store.Pool())
}
