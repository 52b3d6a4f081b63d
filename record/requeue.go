package record

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/policy"
)

// RequeueCandidate is one open failure chosen by operator's RequeueFailures.
type RequeueCandidate struct {
	// RunID and Workflow are the failed run's.
	RunID    uuid.UUID
	Workflow string
	// Step and Activity are the step that gave up and its activity; 0 and
	// empty when the workflow itself failed.
	Step     int
	Activity string
	// Reason is why the run gave up.
	Reason policy.Reason
	// FailedAt is when it gave up.
	FailedAt time.Time
	// ErrorMessage is the last error's message; empty for none.
	ErrorMessage string
	// Requeued is true when the run was put back; false in a dry run, or
	// when someone else requeued it first.
	Requeued bool
}

// AuditEntry is one row of the audit log: a requeue, a cancel by a person,
// or a retention run.
type AuditEntry struct {
	// ID is the row's ID, increasing.
	ID int64
	// At is when the action was taken.
	At time.Time
	// Actor is the database role that took it.
	Actor string
	// Action is what was done: requeue, purge_completed, purge_failures,
	// cancel, delete.
	Action string
	// Runs counts the runs requeued, cancelled or deleted.
	Runs int64
	// Failures counts the failure rows deleted (purges, delete); 0
	// otherwise.
	Failures int64
	// Filter is how the runs were selected, as recorded (JSON object).
	Filter map[string]any
	// RunIDs are the runs a requeue put back, the run cancelled, or every
	// run a delete removed (the run first, then its child runs); nil for
	// purges.
	RunIDs []uuid.UUID
	// Note is the note given with the action; empty for none.
	Note string
}

// String describes an entry on one line, e.g.
// "requeue 3 runs by postgres (INC-42)".
func (e AuditEntry) String() string {
	s := fmt.Sprintf("%s %d runs", e.Action, e.Runs)
	if e.Failures > 0 {
		s += fmt.Sprintf(" (%d failure rows)", e.Failures)
	}
	s += " by " + e.Actor
	if e.Note != "" {
		s += " (" + e.Note + ")"
	}
	return s
}

// PurgeCandidate is one run a purge of failures would delete.
type PurgeCandidate struct {
	// RunID, Workflow and Status are the run's.
	RunID    uuid.UUID
	Workflow string
	Status   RunStatus
	// FinishedAt is when the run ended.
	FinishedAt time.Time
	// Failures counts its failure rows, requeued ones included.
	Failures int64
	// Reason is its last failure's.
	Reason policy.Reason
}

// PurgeWorkflow counts, for one workflow, the runs a purge would delete.
type PurgeWorkflow struct {
	// Workflow is the workflow's name.
	Workflow string
	// Runs counts its runs the purge would delete.
	Runs int64
}

// Purged counts what a retention run deleted (or would delete, in a dry
// run).
type Purged struct {
	// Runs counts the runs deleted, with their steps and attempts.
	Runs int64
	// Failures counts the failure rows deleted with them.
	Failures int64
}
