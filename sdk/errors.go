package sdk

import (
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
)

// ErrIndeterminate means an attempt of an at-most-once activity was lost: the
// worker died, froze or was cut off while it ran, so nobody knows whether its
// effect happened. Tenure never invokes it again; the workflow may reconcile
// with the remote system. Match with errors.Is.
var ErrIndeterminate = errors.New("indeterminate: an at-most-once attempt was lost and is not rerun")

// ErrCancelled is returned by Result for a run that was cancelled. Inside a
// cancelled run's workflow, the steps called after the cancellation return
// errors wrapping it (unless their context comes from Detached), and the
// running activity's context is cancelled with it as its cause
// (context.Cause). Match with errors.Is.
var ErrCancelled = errors.New("run cancelled")

// ErrNotFound is returned by Lookup and Cancel for a run that does not
// exist. Match with errors.Is.
var ErrNotFound = store.ErrNotFound

// ErrFinished is returned by Cancel for a run that already ended. Match with
// errors.Is.
var ErrFinished = store.ErrFinished

// ErrNotInWorkflow is returned by Execute and the other calls of a workflow
// (Sleep, Receive, Now, StartChild, …) made outside a workflow run, wrapped
// with the name of the call. Match with errors.Is.
var ErrNotInWorkflow = errors.New("called outside a workflow run")

// ErrOutcomeUnknown means the client does not know whether the database
// recorded a write: the connection failed, or a deadline passed, after the
// statement may have reached the database, and no retry settled it (see
// Start). Start's error then names the run's ID, which Lookup finds if the run
// exists; with WithKey, calling Start again with the key is the safe way to
// find out. Match with errors.Is.
var ErrOutcomeUnknown = errors.New("outcome unknown: the database may have recorded it")

// ErrPayloadTooLarge is returned when an input or output exceeds the payload
// limit (DefaultMaxPayload unless configured).
var ErrPayloadTooLarge = store.ErrPayloadTooLarge

// ErrWorkflowMismatch is returned when a run ID (Lookup) or a run key (Start
// with WithKey) names a run of another workflow than the caller's.
var ErrWorkflowMismatch = store.ErrWorkflowMismatch

// ErrKeyConflict is returned when Start (WithKey) finds its key held by a run
// that was started with another input: the run was not started, and the
// error names the key and the run that holds it. The same key with the same
// input, compared as JSON values, returns the existing run instead (Created
// false). Match with errors.Is.
var ErrKeyConflict = store.ErrKeyConflict

// DefaultMaxPayload is the largest input or output, in bytes of JSON, that
// Tenure stores: 1 MiB. Larger payloads belong in object storage, with their
// key in the payload.
const DefaultMaxPayload = 1 << 20

// ActivityError is the error Execute returns when a step gave up, the same
// when the step gives up as when it is replayed from its record, with one
// exception: Err. When the workflow registered the type of an error in the
// last attempt's chain (WithErrorType), Err is that error, decoded from its
// recorded JSON, both times, so errors.As on it takes the same branch on
// replay. Otherwise Err is the last attempt's error when the step gave up in
// this execution, and nil on replay, where only its message and type
// survive (Message, Type).
type ActivityError struct {
	Activity string
	Step     int
	Reason   Reason
	Message  string // the last error's message
	Type     string // the last error's Go type (the registered one's, when there is one)
	Err      error
}

// Error says which step gave up, why, and its last error.
func (e *ActivityError) Error() string {
	return fmt.Sprintf("activity %q (step %d) gave up: %s: %s", e.Activity, e.Step, e.Reason, e.Message)
}

// Unwrap returns the last attempt's error, when known.
func (e *ActivityError) Unwrap() error { return e.Err }

// Is reports whether e is ErrIndeterminate (reason indeterminate) or
// ErrCancelled (the run's cancellation stopped the step: reason cancelled).
func (e *ActivityError) Is(target error) bool {
	return (target == ErrIndeterminate && e.Reason == ReasonIndeterminate) ||
		(target == ErrCancelled && e.Reason == ReasonCancelled)
}

// RunError is the error Result returns for a failed run: the failure row's
// reason, step and last error.
type RunError struct {
	RunID    uuid.UUID
	Workflow string
	Reason   Reason
	Step     int // 0 when the workflow itself failed
	Activity string
	Message  string
	Type     string
}

// Error says which run failed, why, and where.
func (e *RunError) Error() string {
	if e.Step > 0 {
		return fmt.Sprintf("run %s (%s) failed: %s at step %d (%s): %s", e.RunID, e.Workflow, e.Reason, e.Step, e.Activity, e.Message)
	}
	return fmt.Sprintf("run %s (%s) failed: %s: %s", e.RunID, e.Workflow, e.Reason, e.Message)
}

// Is reports whether e is ErrIndeterminate (reason indeterminate).
func (e *RunError) Is(target error) bool {
	return target == ErrIndeterminate && e.Reason == ReasonIndeterminate
}
