package store

import (
	"errors"
	"fmt"
)

// The checks of a start, one implementation for the two ways to start a
// run: sdk.Start (and StartTx, StartMany), with the workflow's Go code, and
// operator.Operator.Start (tenure runs start), by the workflow's name. What
// a run must be before it is sent (Check), and what the run that holds its
// key must be for the start to return it (Inserted.Check), with the same
// errors and the same words.

// ErrPayloadTooLarge is returned when an input or output exceeds the
// payload limit (sdk.ErrPayloadTooLarge).
var ErrPayloadTooLarge = errors.New("payload too large")

// ErrWorkflowMismatch is returned when a run ID or a run key names a run of
// another workflow than the caller's (sdk.ErrWorkflowMismatch).
var ErrWorkflowMismatch = errors.New("run belongs to another workflow")

// ErrKeyConflict is returned when a start's key is held by a run that was
// started with another input (sdk.ErrKeyConflict).
var ErrKeyConflict = errors.New("run key already names a run with another input")

// Check returns why r cannot be recorded, or nil: a queue without a name, a
// negative delay, an input longer than maxPayload bytes (wrapping
// ErrPayloadTooLarge), a fairness weight without a key or out of 1 to
// MaxFairWeight, or a fairness key longer than MaxFairKey bytes. Its errors name neither the caller nor the workflow,
// which the caller adds.
func (r NewRun) Check(maxPayload int) error {
	switch {
	case r.Queue == "":
		return errors.New("empty queue name")
	case r.Delay < 0:
		return fmt.Errorf("negative delay %s", r.Delay)
	case len(r.Input) > maxPayload:
		return fmt.Errorf("input is %d bytes, limit %d: %w", len(r.Input), maxPayload, ErrPayloadTooLarge)
	case r.FairKey == "" && r.FairWeight != 0:
		return fmt.Errorf("fairness weight %d without a fairness key", r.FairWeight)
	case r.FairKey != "" && (r.FairWeight < 1 || r.FairWeight > MaxFairWeight):
		return fmt.Errorf("fairness key %q: weight %d, want 1 to %d", r.FairKey, r.FairWeight, MaxFairWeight)
	case len(r.FairKey) > MaxFairKey:
		return fmt.Errorf("fairness key is %d bytes, limit %d", len(r.FairKey), MaxFairKey)
	}
	return nil
}

// Check returns nil when ins, the outcome of a start of workflow with key,
// is the run started or one that the start returns (the key's run, of the
// same workflow and with the same input); else an error that names the key
// and the run holding it, wrapping ErrWorkflowMismatch for a run of another
// workflow or ErrKeyConflict for one started with another input.
func (ins Inserted) Check(workflow, key string) error {
	switch {
	case ins.Workflow != workflow:
		return fmt.Errorf("start %s: key %q already names run %s of workflow %q: %w", workflow, key, ins.ID, ins.Workflow, ErrWorkflowMismatch)
	case ins.OtherInput:
		return fmt.Errorf("start %s: key %q already names run %s, started with another input: %w", workflow, key, ins.ID, ErrKeyConflict)
	}
	return nil
}
