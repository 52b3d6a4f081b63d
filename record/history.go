package record

import (
	"encoding/json"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/policy"
)

// HistoryFormat is the format a History names in its Format field.
const HistoryFormat = "tenure.history/1"

// History is what a run recorded, step by step, as tenure runs export
// writes it (one JSON object a line) and tenuretest.Replay replays it
// against new workflow code, before a deploy.
type History struct {
	// Format is HistoryFormat.
	Format string `json:"format"`
	// RunID, Workflow, Status, Input and Output are the run's.
	RunID    uuid.UUID       `json:"run_id"`
	Workflow string          `json:"workflow"`
	Status   RunStatus       `json:"status"`
	Input    json.RawMessage `json:"input"`
	Output   json.RawMessage `json:"output,omitempty"`
	// BuildID is the build that first claimed the run.
	BuildID string `json:"build_id,omitempty"`
	// Steps are its steps, in order.
	Steps []HistoryStep `json:"steps"`
}

// HistoryStep is one step of a History: what a replay answers the
// workflow's call of that step with.
type HistoryStep struct {
	// Step is the step's number, from 1.
	Step int `json:"step"`
	// Kind and Name are what the step is: the activity's name, for another
	// kind the signal's name, the event's key, the child's workflow, the
	// patch's ID, or the kind.
	Kind StepKind `json:"kind"`
	Name string   `json:"name"`
	// Status is where the step is: a step not completed or failed is where
	// the run stands, and a replay stops there.
	Status StepStatus `json:"status"`
	// Output is what a completed step returned (a signal's payload, a
	// recorded value, a child's output).
	Output json.RawMessage `json:"output,omitempty"`
	// Reason, ErrorMessage, ErrorType and ErrorValue are a failed step's
	// error (ErrorValue: of a type its workflow registers).
	Reason       policy.Reason   `json:"reason,omitempty"`
	ErrorMessage string          `json:"error_message,omitempty"`
	ErrorType    string          `json:"error_type,omitempty"`
	ErrorValue   json.RawMessage `json:"error_value,omitempty"`
	// InputHash is the hash of an activity's or a child's input, 16 hex
	// digits; empty when none was recorded.
	InputHash string `json:"input_hash,omitempty"`
	// ChildRunID is a child step's run.
	ChildRunID *uuid.UUID `json:"child_run_id,omitempty"`
}
