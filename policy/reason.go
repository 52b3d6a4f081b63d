package policy

// Reason says why a step or a run gave up: the reason column of the failure
// table and of failed steps. Decide gives up with RetriesExhausted,
// NonRetryable or DeadlineExceeded, DecideRescue's caller with
// RescuesExhausted; the runtime records the others. Package sdk re-exports
// the type and its values (sdk.Reason, sdk.ReasonRetriesExhausted, ...),
// the names application code uses.
type Reason string

// The failure reasons: every value the failure table's CHECK constraint
// allows, and no other.
const (
	// RetriesExhausted: MaxAttempts attempts ended in an error.
	RetriesExhausted Reason = "retries_exhausted"
	// RescuesExhausted: more than MaxRescues attempts were lost, or the
	// workflow's backstop crash budget ran out.
	RescuesExhausted Reason = "rescues_exhausted"
	// NonRetryable: the error is Permanent or RetryIf rejected it.
	NonRetryable Reason = "non_retryable"
	// Indeterminate: an at-most-once attempt was lost, so nobody knows
	// whether its effect happened.
	Indeterminate Reason = "indeterminate"
	// DeadlineExceeded: the next attempt could not start before the deadline.
	DeadlineExceeded Reason = "deadline_exceeded"
	// Nondeterminism: replay called another activity at a recorded step.
	Nondeterminism Reason = "nondeterminism"
	// Panic: an activity or the workflow panicked.
	Panic Reason = "panic"
	// WorkflowError: the workflow returned an error of its own.
	WorkflowError Reason = "workflow_error"
	// BadInput: the run's input does not decode into the workflow's type.
	BadInput Reason = "bad_input"
	// Cancelled: the step was stopped by its run's cancellation (steps
	// only), or a River job was cancelled outside its policy (River's
	// Client.JobCancel; riveradapter records a failure row).
	Cancelled Reason = "cancelled"
)

// Reasons lists every failure reason, in the order of the failure table's
// CHECK constraint.
func Reasons() []Reason {
	return []Reason{RetriesExhausted, RescuesExhausted, NonRetryable, Indeterminate,
		DeadlineExceeded, Nondeterminism, Panic, WorkflowError, BadInput, Cancelled}
}
