package sdk

import "github.com/tenurehq/tenure/policy"

// The failure reasons, with the names application code matches errors
// with. The statuses of runs, steps and attempts and the kinds of steps are
// package record's (record.RunStatus, record.RunCompleted, ...), beside the
// records that carry them; failure reasons are package policy's, which
// gives up.

// Reason says why a step or a run gave up (RunError.Reason,
// ActivityError.Reason, record.Failure.Reason).
type Reason = policy.Reason

// Failure reasons, as recorded in the failure table and on failed steps.
const (
	ReasonRetriesExhausted = policy.RetriesExhausted // MaxAttempts attempts ended in an error
	ReasonRescuesExhausted = policy.RescuesExhausted // more attempts were lost than MaxRescues allows
	ReasonNonRetryable     = policy.NonRetryable     // a permanent error, or RetryIf said no
	ReasonIndeterminate    = policy.Indeterminate    // an at-most-once attempt was lost: did it run?
	ReasonDeadline         = policy.DeadlineExceeded // no attempt could start before the step's deadline
	ReasonNondeterminism   = policy.Nondeterminism   // replay called a different activity at a recorded step
	ReasonPanic            = policy.Panic            // an activity or the workflow panicked
	ReasonWorkflowError    = policy.WorkflowError    // the workflow returned an error of its own
	ReasonBadInput         = policy.BadInput         // the run's input does not decode
)
