package record

import (
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/policy"
)

// Step is one step of a run as recorded, as the step_timeline view shows
// it: an activity call with the effective policy of its latest attempt, or
// a step of another kind (StepKind) with what it waited for.
type Step struct {
	// Step is the step's number in the run, from 1, in the order the
	// workflow reached its steps.
	Step int
	// Activity is the activity's name; for another kind: the signal's
	// name, the event's key, the child's workflow, or the kind.
	Activity string
	// Status is where the step is.
	Status StepStatus
	// Reason is why a failed step gave up; empty otherwise.
	Reason policy.Reason
	// ErrorMessage and ErrorType are the error a failed step gave up with
	// (the Go type of its error); empty otherwise.
	ErrorMessage string
	ErrorType    string
	// Policy is the effective retry policy of the latest attempt, as JSON
	// (as policy.Retry marshals it); {} for a step of another kind than
	// activity.
	Policy []byte
	// BudgetFrom is the number of the last attempt made before a requeue:
	// attempts up to it no longer count against the step's budgets; 0 when
	// the step was never requeued.
	BudgetFrom int
	// FirstStartedAt is when the step was first reached.
	FirstStartedAt time.Time
	// FinishedAt is when the step ended; for a sleep or a signal, when it
	// woke; nil while it has not.
	FinishedAt *time.Time
	// Kind is what the step is.
	Kind StepKind
	// DueAt is a sleep's due time, or a signal's timeout (nil: none).
	DueAt *time.Time
	// ChildRunID and ChildStatus are a child step's run (uuid.Nil for none)
	// and its status now (empty for none).
	ChildRunID  uuid.UUID
	ChildStatus RunStatus
	// SignalID is the signal a signal step consumed; 0 until it did.
	SignalID int64
	// BuildID is the build of the worker that wrote the step first
	// (runtime.Config.BuildID); "" for a step written before schema 18.
	BuildID string
	// InputHash is, for an activity or a child step, the hash of its
	// encoded input that a replay checks; 0 when none was recorded.
	InputHash uint64
}

// Attempt is one attempt of an activity step, as the attempt_timeline view
// shows it.
type Attempt struct {
	// RunID and Step are the run and the step the attempt belongs to.
	RunID uuid.UUID
	Step  int
	// Attempt is the attempt's number in its step, from 1.
	Attempt int
	// Activity is the name of the activity attempted.
	Activity string
	// Status is how the attempt ended, or AttemptRunning.
	Status AttemptStatus
	// StartedAt is when the attempt was invoked.
	StartedAt time.Time
	// EndedAt is when its outcome was recorded; nil while it runs.
	EndedAt *time.Time
	// ErrorMessage, ErrorType and ErrorStack are the error it returned (its
	// message, its Go type, and the stack of a panic); empty for none.
	ErrorMessage string
	ErrorType    string
	ErrorStack   string
	// Rescue is true for an attempt made after the previous one was lost
	// (its worker's lease expired while it ran).
	Rescue bool
	// Delay is the delay chosen before the next attempt; nil when none
	// follows.
	Delay *time.Duration
	// DelaySource says where Delay came from: policy, jitter, retry-after
	// or deadline; empty for none.
	DelaySource string
	// Epoch is the run's lease epoch the attempt ran under (Run.Epoch).
	Epoch int64
	// Worker is the label of the worker that ran it.
	Worker string
	// TraceID and SpanID name the attempt's span in hex; empty when it was
	// not traced.
	TraceID string
	SpanID  string
	// Duration is how long it ran (until now, while it runs).
	Duration time.Duration
	// Waited is the time between its end and the next attempt's start; nil
	// for the last.
	Waited *time.Duration
	// InBudget is whether it counts against the step's budgets: false for
	// an attempt made before a requeue.
	InBudget bool
}
