package record

import (
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/policy"
)

// Run is a run's row, with its open failure: what sdk's Result and
// operator's Run and RunByKey return.
type Run struct {
	// ID is the run's ID, chosen when it was started.
	ID uuid.UUID
	// Workflow is the name of the workflow the run runs.
	Workflow string
	// Queue is the queue the run waits in for a worker that serves it.
	Queue string
	// Priority orders the due runs of a queue: higher is claimed first;
	// 0 unless the run was started with a priority.
	Priority int
	// Key is the idempotency key the run was started with (sdk.WithKey);
	// empty for none.
	Key string
	// Status is where the run is in its life.
	Status RunStatus
	// Input is the run's input as started, JSON-encoded.
	Input []byte
	// Output is the workflow's JSON-encoded result; nil until the run
	// completed.
	Output []byte
	// ErrorMessage is the error a failed run ended with; empty otherwise.
	ErrorMessage string
	// Claimant is the label of the worker holding the run's lease (a
	// running run, its lease possibly expired); empty otherwise: an end, a
	// release or a suspension clears it.
	Claimant string
	// Epoch is the run's fencing token: 0 before its first claim, one more
	// at each claim. A worker's writes are accepted only at the epoch it
	// claimed.
	Epoch int64
	// Requeues counts how many times the run was put back in the queue
	// after it failed.
	Requeues int
	// RunAfter is when a queued run is due; zero when it waits for a
	// signal or a child with no timeout, or for a release of a
	// downstream's limits (run_after is 'infinity').
	RunAfter time.Time
	// CreatedAt is when the run was started.
	CreatedAt time.Time
	// FinishedAt is when the run ended; nil while it has not (or since it
	// was requeued).
	FinishedAt *time.Time
	// WaitingFor says what a queued run that has started waits for:
	// "sleep", "signal:<name>", "child:<id>", "limit:<downstream>" (the
	// downstream's limits denied its step), or "" for its turn.
	WaitingFor string
	// Parent is the run that started this one as a child (uuid.Nil for
	// none), at its step ParentStep (0 for none).
	Parent     uuid.UUID
	ParentStep int
	// CancelRequested is when Cancel was asked of the run, if it was
	// (recorded on the run, or still a wake no worker has applied); nil
	// otherwise.
	CancelRequested *time.Time
	// Failure is the run's open failure row when Status is RunFailed; nil
	// otherwise.
	Failure *Failure
	// BuildID is the build of the worker that first claimed the run
	// (runtime.Config.BuildID); "" before its first claim, or for a run
	// first claimed before schema 18.
	BuildID string
	// PinnedTo is the build the run is pinned to (sdk.WithPinning): only
	// workers of that build claim it. "" for a run that is not pinned.
	PinnedTo string
}

// RunSummary is one run as an operator lists it: a Run without its
// payloads, with its lease and the gist of its open failure.
type RunSummary struct {
	// ID is the run's ID.
	ID uuid.UUID
	// Workflow is the name of the workflow the run runs.
	Workflow string
	// Queue is the queue the run waits in.
	Queue string
	// Key is the key it was started with (sdk.WithKey); empty for none.
	Key string
	// Status is where the run is in its life.
	Status RunStatus
	// Claimant is the label of the worker holding the run's lease (a
	// running run); empty otherwise (Run.Claimant).
	Claimant string
	// Epoch is the run's fencing token (Run.Epoch).
	Epoch int64
	// Requeues counts the times the run was requeued.
	Requeues int
	// CreatedAt is when the run was started.
	CreatedAt time.Time
	// UpdatedAt is when the run's row last changed.
	UpdatedAt time.Time
	// FinishedAt is when the run ended; nil while it has not.
	FinishedAt *time.Time
	// LeaseLeft is the lease time left by the database clock, negative when
	// it expired (the run awaits rescue); nil unless running.
	LeaseLeft *time.Duration
	// Reason, Step and Activity come from the open failure of a failed run:
	// why it gave up, at which step (0 when the workflow itself failed) and
	// in which activity (empty then); zero for a run that is not failed.
	Reason   policy.Reason
	Step     int
	Activity string
}

// Progress is how far a run has got, without its payloads: what a caller
// waiting for the run's end reads again and again (operator's RunProgress).
type Progress struct {
	// Status is the run's status now.
	Status RunStatus
	// FinishedAt is when the run ended; nil while it has not.
	FinishedAt *time.Time
	// StepsEnded counts the run's steps that have ended (completed or
	// failed), and LastStepEnd is the latest of their ends (nil for none);
	// both are read only when asked for (RunProgress's steps), else 0 and
	// nil.
	StepsEnded  int
	LastStepEnd *time.Time
}

// ChildRun is a run started by another run's workflow (Call, StartChild).
type ChildRun struct {
	// ID is the child run's ID.
	ID uuid.UUID
	// Workflow is the child's workflow.
	Workflow string
	// Status is the child's status now.
	Status RunStatus
	// ParentStep is the parent's step that started the child.
	ParentStep int
	// CreatedAt is when the child was started.
	CreatedAt time.Time
}

// InFlight is one run a worker holds now, as the in_flight view shows it.
type InFlight struct {
	// RunID is the run's ID.
	RunID uuid.UUID
	// Workflow and Queue are the run's.
	Workflow string
	Queue    string
	// Claimant is the label of the worker holding the lease.
	Claimant string
	// Epoch is the lease's fencing token (Run.Epoch).
	Epoch int64
	// LeaseLeft is the lease time left by the database clock; negative:
	// expired, the run awaits rescue.
	LeaseLeft time.Duration
	// StartedAt is when a worker first claimed the run.
	StartedAt *time.Time
	// Step, Activity and Attempt are the attempt running now; 0 and "" for
	// none (the workflow runs between steps).
	Step     int
	Activity string
	Attempt  int
	// AttemptStartedAt is when that attempt started; nil for none.
	AttemptStartedAt *time.Time
}
