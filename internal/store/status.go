package store

// The statuses of runs, steps and attempts: one Go type per status column,
// with exactly the values its CHECK constraint allows (a test holds the two
// together). Package sdk re-exports them (sdk.RunStatus, sdk.RunCompleted,
// ...), the names application code uses; failure reasons are policy.Reason.

// RunStatus is a run's status: the status column of the runs table.
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

// StepStatus is a step's status: the status column of the steps table.
type StepStatus string

// Step statuses.
const (
	StepRunning   StepStatus = "running"   // an attempt is running or will be
	StepWaiting   StepStatus = "waiting"   // a sleep, signal or child not yet due, received or ended
	StepCompleted StepStatus = "completed" // its output is recorded and replayed
	StepFailed    StepStatus = "failed"    // it gave up; its error is replayed
)

// StepStatuses lists every step status, in the order of the CHECK constraint.
func StepStatuses() []StepStatus {
	return []StepStatus{StepRunning, StepWaiting, StepCompleted, StepFailed}
}

// AttemptStatus is an attempt's status: the status column of the attempts
// table.
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
)

// AttemptStatuses lists every attempt status, in the order of the CHECK
// constraint.
func AttemptStatuses() []AttemptStatus {
	return []AttemptStatus{AttemptRunning, AttemptSucceeded, AttemptFailed, AttemptTimedOut, AttemptLost, AttemptInterrupted, AttemptCancelled}
}
