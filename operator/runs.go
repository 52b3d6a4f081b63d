package operator

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
)

// Run is a run's row: its workflow, queue, key, status (sdk.RunStatus),
// input and output as JSON, the worker holding its lease, its lease epoch,
// how often it was requeued, and, when it failed, its open failure row
// (Failure, nil otherwise).
type Run = store.Run

// RunFilter selects runs for Runs: by workflow, status, queue and key (the
// one sdk.WithKey gave); empty fields match all. Limit 0 means 100.
type RunFilter = store.RunFilter

// RunSummary is one run as Runs lists it: its status, the worker holding it
// and the lease time left for a running run, and the reason, step and
// activity of a failed run's open failure.
type RunSummary = store.RunSummary

// Step is one step of a run as recorded: its activity, status
// (sdk.StepStatus), why a failed step gave up, and the effective retry
// policy of its latest attempt (JSON, as policy.Retry marshals it).
type Step = store.StepRecord

// Attempt is one attempt of a step, as the attempts table holds it: status
// (sdk.AttemptStatus), times, error, whether it was a rescue, the delay
// chosen before the next attempt and its source, the lease epoch, the
// worker, and the trace and span IDs.
type Attempt = store.Attempt

// Run returns the run with the given ID, with its open failure row if it
// failed, or an error wrapping ErrNotFound.
func (op *Operator) Run(ctx context.Context, id uuid.UUID) (Run, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return Run{}, err
	}
	return op.store.GetRun(ctx, id)
}

// RunByKey returns the run started with key (sdk.WithKey), as Run does. Keys
// are unique across workflows, so there is at most one.
func (op *Operator) RunByKey(ctx context.Context, key string) (Run, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return Run{}, err
	}
	return op.store.GetRunByKey(ctx, key)
}

// Runs lists the runs that f selects, newest first.
func (op *Operator) Runs(ctx context.Context, f RunFilter) ([]RunSummary, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.ListRuns(ctx, f)
}

// RunAuditLog returns the audit log rows that name the run: the requeues
// that put it back, with who, when and the note, oldest first. It is empty
// for a run never requeued, or one that does not exist (Run tells those
// apart). It reads what a run's page shows: RunIDs is left empty (Runs
// counts them) and Filter lacks failure_ids, so that the row of a requeue
// of a million runs is as cheap to each run's page as that of one.
func (op *Operator) RunAuditLog(ctx context.Context, runID uuid.UUID) ([]AuditEntry, error) {
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
func (op *Operator) Steps(ctx context.Context, runID uuid.UUID) ([]Step, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.StepRecords(ctx, runID)
}

// History returns the timeline of a run: every attempt of every step, in
// order of step and attempt, requeued ones included.
func (op *Operator) History(ctx context.Context, runID uuid.UUID) ([]Attempt, error) {
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

// Worker is a worker's row in the registry: label, host, pid, version, the
// workflows and queues it serves, its concurrency, the runs it holds, and
// its last heartbeat (Live: within three heartbeat intervals, or its lease
// TTL, and not stopped).
type Worker = store.Worker

// Workers lists the worker registry, live workers first; with all false,
// only the live ones. Each worker's heartbeat keeps its row, in the same
// statement that renews its leases.
func (op *Operator) Workers(ctx context.Context, all bool) ([]Worker, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.Workers(ctx, all)
}

// Orphans is, for one workflow and queue, the queued runs that no live
// worker serves: they wait until a worker that registers the workflow and
// serves the queue starts.
type Orphans = store.Orphans

// Orphans lists the queued runs no live worker serves, per workflow and
// queue (the orphaned_runs view), most runs first.
func (op *Operator) Orphans(ctx context.Context) ([]Orphans, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.OrphanedRuns(ctx)
}

// Replication is how the database server replicates commits, as a session
// of the operator's pool sees it (docs/guarantees.md, "Replication and
// failover").
type Replication struct {
	// Mode is "none" (no standby), "synchronous" (every commit waits for a
	// standby), "asynchronous" (standbys that commits do not wait for: a
	// failover can lose acknowledged runs) or "standby" (the server is one).
	Mode string `json:"mode"`
	// Standbys is how many physical standbys stream from the server.
	Standbys int `json:"standbys"`
	// SynchronousStandbyNames and SynchronousCommit are the server's
	// settings as the session sees them.
	SynchronousStandbyNames string `json:"synchronous_standby_names"`
	SynchronousCommit       string `json:"synchronous_commit"`
	// Description says what the mode means, in a sentence.
	Description string `json:"description"`
}

// Replication reads how the database server replicates commits: the web
// UI warns on every page while it is asynchronous.
func (op *Operator) Replication(ctx context.Context) (Replication, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return Replication{}, err
	}
	r, err := op.store.ReadReplication(ctx, op.store.Pool())
	if err != nil {
		return Replication{}, err
	}
	return Replication{Mode: string(r.Mode), Standbys: r.Standbys, SynchronousStandbyNames: r.SynchronousStandbyNames,
		SynchronousCommit: r.SynchronousCommit, Description: r.Describe()}, nil
}
