package sdk

import (
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
)

// The vocabulary of runs, steps, attempts and failures, as recorded in the
// tables and seen in Result and in package operator's rows. Each type is
// defined once, beside what decides its values (statuses with the tables'
// statements, failure reasons in package policy, which gives up); these are
// the names application and operator code uses. A test checks every list
// against the tables' CHECK constraints.

// RunStatus is a run's status (operator.Run.Status, operator.RunFilter).
type RunStatus = store.RunStatus

// Run statuses.
const (
	RunQueued    = store.RunQueued    // waiting to be claimed, due at run_after
	RunRunning   = store.RunRunning   // leased by a worker
	RunCompleted = store.RunCompleted // ended with its output
	RunFailed    = store.RunFailed    // ended without success; it has a failure row
	RunCancelled = store.RunCancelled // ended by Cancel
)

// RunStatuses lists every run status, in the order of the runs table's
// CHECK constraint.
func RunStatuses() []RunStatus { return store.RunStatuses() }

// StepStatus is a step's status (operator.Step.Status).
type StepStatus = store.StepStatus

// Step statuses.
const (
	StepRunning   = store.StepRunning   // an attempt is running or will be
	StepWaiting   = store.StepWaiting   // a sleep, signal or child not yet due, received or ended
	StepCompleted = store.StepCompleted // its output is recorded and replayed
	StepFailed    = store.StepFailed    // it gave up; its error is replayed
)

// StepKind is what a step is (operator.Step.Kind): an activity call, or one
// of the durable primitives, which have no attempts.
type StepKind = store.StepKind

// Step kinds.
const (
	KindActivity   = store.KindActivity   // an activity call (Execute), with its attempts
	KindSleep      = store.KindSleep      // a durable sleep (Sleep, SleepUntil)
	KindSignal     = store.KindSignal     // a signal received, or its timeout (Receive)
	KindEvent      = store.KindEvent      // an event set (SetEvent)
	KindChild      = store.KindChild      // a child workflow started (Call, StartChild)
	KindNow        = store.KindNow        // the time Now read, recorded once
	KindSideEffect = store.KindSideEffect // a value SideEffect made, recorded once
)

// AttemptStatus is an attempt's status (operator.Attempt.Status).
type AttemptStatus = store.AttemptStatus

// Attempt statuses.
const (
	AttemptRunning     = store.AttemptRunning     // invoked; its outcome is not recorded yet
	AttemptSucceeded   = store.AttemptSucceeded   // returned its output
	AttemptFailed      = store.AttemptFailed      // returned an error, or panicked
	AttemptTimedOut    = store.AttemptTimedOut    // passed its AttemptTimeout
	AttemptLost        = store.AttemptLost        // outcome unknown: its lease expired while it ran
	AttemptInterrupted = store.AttemptInterrupted // cancelled by a graceful shutdown; charged to no budget
	AttemptCancelled   = store.AttemptCancelled   // the run was cancelled while it ran; charged to no budget
)

// Reason says why a step or a run gave up (RunError.Reason,
// ActivityError.Reason, operator.Failure.Reason).
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
