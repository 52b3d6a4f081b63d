package record

// RunStatus is a run's status: the status column of the runs table
// (Run.Status, RunSummary.Status).
type RunStatus string

// Run statuses.
const (
	RunQueued    RunStatus = "queued"    // waiting to be claimed, due at run_after
	RunRunning   RunStatus = "running"   // leased by a worker
	RunCompleted RunStatus = "completed" // ended with its output
	RunFailed    RunStatus = "failed"    // ended without success; it has a failure row
	RunCancelled RunStatus = "cancelled" // ended by Cancel
)

// RunStatuses lists every run status, in the order of the CHECK constraint.
func RunStatuses() []RunStatus {
	return []RunStatus{RunQueued, RunRunning, RunCompleted, RunFailed, RunCancelled}
}

// Terminal reports whether a run in status s has ended for good (until a
// requeue, for a failed run).
func (s RunStatus) Terminal() bool {
	return s == RunCompleted || s == RunFailed || s == RunCancelled
}

// StepStatus is a step's status: the status column of the steps table
// (Step.Status).
type StepStatus string

// Step statuses.
const (
	StepRunning   StepStatus = "running"   // an attempt is running or will be
	StepWaiting   StepStatus = "waiting"   // a sleep, signal or child not yet due, received or ended
	StepCompleted StepStatus = "completed" // its output is recorded and replayed
	StepFailed    StepStatus = "failed"    // it gave up; its error is replayed
)

// StepStatuses lists every step status, in the order of the CHECK
// constraint.
func StepStatuses() []StepStatus {
	return []StepStatus{StepRunning, StepWaiting, StepCompleted, StepFailed}
}

// StepKind is what a step is: the kind column of the steps table
// (Step.Kind).
type StepKind string

// Step kinds. Every kind but activity has no attempts.
const (
	KindActivity   StepKind = "activity"    // an activity call (Execute), with its attempts
	KindSleep      StepKind = "sleep"       // a durable sleep (Sleep, SleepUntil), due at Step.DueAt
	KindSignal     StepKind = "signal"      // a signal received, or its timeout (Receive)
	KindEvent      StepKind = "event"       // an event the workflow set (SetEvent)
	KindChild      StepKind = "child"       // a child workflow the run started (Call, StartChild)
	KindNow        StepKind = "now"         // the time Now read, recorded once
	KindSideEffect StepKind = "side_effect" // a value SideEffect made, recorded once
	KindPatch      StepKind = "patch"       // a patch the run took (Patched), named by its ID
)

// StepKinds lists every step kind, in the order of the CHECK constraint.
func StepKinds() []StepKind {
	return []StepKind{KindActivity, KindSleep, KindSignal, KindEvent, KindChild, KindNow, KindSideEffect, KindPatch}
}

// AttemptStatus is an attempt's status: the status column of the attempts
// table (Attempt.Status).
type AttemptStatus string

// Attempt statuses.
const (
	AttemptRunning     AttemptStatus = "running"     // invoked; its outcome is not recorded yet
	AttemptSucceeded   AttemptStatus = "succeeded"   // returned its output
	AttemptFailed      AttemptStatus = "failed"      // returned an error, or panicked
	AttemptTimedOut    AttemptStatus = "timed_out"   // passed its AttemptTimeout
	AttemptLost        AttemptStatus = "lost"        // outcome unknown: its lease expired while it ran
	AttemptInterrupted AttemptStatus = "interrupted" // cancelled by a graceful shutdown; charged to no budget
	AttemptCancelled   AttemptStatus = "cancelled"   // the run was cancelled while it ran; charged to no budget
	AttemptSnoozed     AttemptStatus = "snoozed"     // a River job snoozed for a Retry-After hint (riveradapter); charged to no budget
)

// AttemptStatuses lists every attempt status, in the order of the CHECK
// constraint.
func AttemptStatuses() []AttemptStatus {
	return []AttemptStatus{AttemptRunning, AttemptSucceeded, AttemptFailed, AttemptTimedOut, AttemptLost, AttemptInterrupted, AttemptCancelled, AttemptSnoozed}
}
