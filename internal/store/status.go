package store

import "github.com/tenurehq/tenure/record"

// The statuses of runs, steps and attempts, and the kinds of steps, are
// package record's (record.RunStatus, record.RunCompleted, ...): one Go type
// per column, with exactly the values its CHECK constraint allows (a test
// holds the two together). These names let the statements of this package
// read as before; failure reasons are policy.Reason.

// RunStatus is record.RunStatus: the status column of the runs table.
type RunStatus = record.RunStatus

// Run statuses.
const (
	RunQueued    = record.RunQueued
	RunRunning   = record.RunRunning
	RunCompleted = record.RunCompleted
	RunFailed    = record.RunFailed
	RunCancelled = record.RunCancelled
)

// RunStatuses lists every run status, in the order of the CHECK constraint.
func RunStatuses() []RunStatus { return record.RunStatuses() }

// StepStatus is record.StepStatus: the status column of the steps table.
type StepStatus = record.StepStatus

// Step statuses.
const (
	StepRunning   = record.StepRunning
	StepWaiting   = record.StepWaiting
	StepCompleted = record.StepCompleted
	StepFailed    = record.StepFailed
)

// StepStatuses lists every step status, in the order of the CHECK constraint.
func StepStatuses() []StepStatus { return record.StepStatuses() }

// StepKind is record.StepKind: the kind column of the steps table.
type StepKind = record.StepKind

// Step kinds. Every kind but activity has no attempts.
const (
	KindActivity   = record.KindActivity
	KindSleep      = record.KindSleep
	KindSignal     = record.KindSignal
	KindEvent      = record.KindEvent
	KindChild      = record.KindChild
	KindNow        = record.KindNow
	KindSideEffect = record.KindSideEffect
	KindPatch      = record.KindPatch
)

// StepKinds lists every step kind, in the order of the CHECK constraint.
func StepKinds() []StepKind { return record.StepKinds() }

// AttemptStatus is record.AttemptStatus: the status column of the attempts
// table.
type AttemptStatus = record.AttemptStatus

// Attempt statuses.
const (
	AttemptRunning     = record.AttemptRunning
	AttemptSucceeded   = record.AttemptSucceeded
	AttemptFailed      = record.AttemptFailed
	AttemptTimedOut    = record.AttemptTimedOut
	AttemptLost        = record.AttemptLost
	AttemptInterrupted = record.AttemptInterrupted
	AttemptCancelled   = record.AttemptCancelled
	AttemptSnoozed     = record.AttemptSnoozed
)

// AttemptStatuses lists every attempt status, in the order of the CHECK
// constraint.
func AttemptStatuses() []AttemptStatus { return record.AttemptStatuses() }
