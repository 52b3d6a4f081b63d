package sdk

// InputCheck is what a replay does when the workflow calls a recorded
// activity step with another input than the one the step recorded (the
// hash of its encoded input, schema version 18): a changed argument is a
// change of the workflow's code or of its determinism, as a changed
// activity name is.
type InputCheck string

const (
	// InputCheckFail, the default, fails the run with reason
	// nondeterminism, naming the step and both inputs' hashes; nothing of
	// the step runs again. A requeue after a deploy that fixes the code
	// replays it.
	InputCheckFail InputCheck = "fail"
	// InputCheckWarn logs the difference (tenure: replayed step called with
	// another input) and replays the step from its record, as before the
	// check existed (a step that had not completed goes on with its next
	// attempt, called with the new input): for a workflow whose runs in
	// flight were started by code that computed an input differently, on
	// purpose.
	InputCheckWarn InputCheck = "warn"
)

// WithInputCheck sets what a replay does with a recorded step called with
// another input (InputCheckFail by default). Steps recorded before schema
// version 18 have no hash and are not checked.
func WithInputCheck(c InputCheck) WorkflowOption {
	return func(o *workflowOptions) { o.inputCheck = c }
}

// InputChecked is a workflow that says what a replay does with a recorded
// step called with another input. *Workflow implements it; a Definition
// that does not is checked with InputCheckFail.
type InputChecked interface {
	InputCheck() InputCheck
}

// InputCheck returns what a replay of the workflow does with a recorded
// step called with another input (see WithInputCheck).
func (w *Workflow[In, Out]) InputCheck() InputCheck { return w.inputCheck }
