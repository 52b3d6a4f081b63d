package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/engine"
	"github.com/tenurehq/tenure/policy"
)

// Workflow is a registered workflow function taking In and returning Out.
// Its calls to activities (through Execute) are durable: each is a step,
// checkpointed in Postgres, and a run that is resumed replays completed steps
// from their records instead of invoking them again.
//
// Workflow code must be deterministic in the order and names of the
// activities it calls, given its input and the results of earlier steps: do
// side effects, clocks and randomness inside activities.
type Workflow[In, Out any] struct {
	name       string
	fn         func(context.Context, In) (Out, error)
	maxRescues int
	errorTypes *errorTypes // nil: none registered
	conc       *Concurrency[In]
	inputCheck InputCheck
	pinned     bool
}

// WorkflowOption configures a workflow at declaration.
type WorkflowOption func(*workflowOptions)

type workflowOptions struct {
	maxRescues  int
	errorTypes  []errorType
	concurrency any // a Concurrency[In]
	inputCheck  InputCheck
	pinned      bool
}

// WithMaxRescues sets the workflow's backstop crash budget: how many times in
// a row its lease may be reclaimed with no attempt started in between (a crash
// in workflow code or the SDK itself, outside any activity) before the run
// fails with reason rescues_exhausted. Default policy.DefaultMaxRescues.
func WithMaxRescues(n int) WorkflowOption {
	return func(o *workflowOptions) { o.maxRescues = n }
}

// NewWorkflow declares a workflow. It panics on an empty name, a nil
// function or a WithErrorType it cannot honour (an error wrapping
// ErrInvalidWorkflow) or a negative rescue budget
// (an error wrapping a *policy.ValidationError), at declaration, not when a
// run executes. The panic's value is an error, for errors.Is and errors.As.
func NewWorkflow[In, Out any](name string, fn func(context.Context, In) (Out, error), opts ...WorkflowOption) *Workflow[In, Out] {
	o := workflowOptions{maxRescues: policy.DefaultMaxRescues, inputCheck: InputCheckFail}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case name == "":
		panic(fmt.Errorf("sdk.NewWorkflow: empty name: %w", ErrInvalidWorkflow))
	case fn == nil:
		panic(fmt.Errorf("sdk.NewWorkflow(%q): nil function: %w", name, ErrInvalidWorkflow))
	case o.maxRescues < 0:
		panic(fmt.Errorf("sdk.NewWorkflow(%q): %w", name,
			&policy.ValidationError{Field: "max_rescues", Value: o.maxRescues, Reason: "must be at least 0"}))
	case o.inputCheck != InputCheckFail && o.inputCheck != InputCheckWarn:
		panic(fmt.Errorf("sdk.NewWorkflow(%q): WithInputCheck(%q): want InputCheckFail or InputCheckWarn: %w", name, o.inputCheck, ErrInvalidWorkflow))
	}
	types, err := newErrorTypes(name, o.errorTypes)
	if err != nil {
		panic(err)
	}
	conc, err := concurrencyOf[In](name, o.concurrency)
	if err != nil {
		panic(err)
	}
	return &Workflow[In, Out]{name: name, fn: fn, maxRescues: o.maxRescues, errorTypes: types, conc: conc, inputCheck: o.inputCheck,
		pinned: o.pinned}
}

// ErrInvalidWorkflow is wrapped by the panic of NewWorkflow given an empty
// name or a nil function.
var ErrInvalidWorkflow = errors.New("invalid workflow declaration")

// Name returns the workflow's registered name.
func (w *Workflow[In, Out]) Name() string { return w.name }

// MaxRescues returns the workflow's backstop crash budget (see WithMaxRescues).
func (w *Workflow[In, Out]) MaxRescues() int { return w.maxRescues }

// Invoke decodes a JSON input, calls the workflow function and encodes its
// output. The runtime calls it; application code calls Start instead. An
// input that does not decode returns an error wrapping activities.ErrBadInput.
func (w *Workflow[In, Out]) Invoke(ctx context.Context, input []byte) ([]byte, error) {
	var in In
	if err := json.Unmarshal(input, &in); err != nil {
		return nil, fmt.Errorf("workflow %q: %w: %w", w.name, activities.ErrBadInput, err)
	}
	if w.errorTypes != nil {
		ctx = engine.WithErrorCodec(ctx, w.errorTypes)
	}
	out, err := w.fn(ctx, in)
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

// Definition is a workflow with its types erased, as a worker registers it.
// *Workflow implements it.
type Definition interface {
	Name() string
	MaxRescues() int
	Invoke(ctx context.Context, input []byte) ([]byte, error)
}

// Execute runs activity act as the next step of the current run and returns
// its output. Options given here override the activity's defaults for this
// call (call option > activity default > worker default > package default).
//
// When the step already completed in an earlier execution of the run, Execute
// returns the recorded output without invoking act. When the step gives up it
// returns an *ActivityError with the reason (errors.Is(err, ErrIndeterminate)
// for a lost at-most-once attempt). An invalid per-call policy is returned as
// a *policy.ValidationError before anything runs.
func Execute[In, Out any](ctx context.Context, act *activities.Activity[In, Out], in In, opts ...policy.Option) (Out, error) {
	var out Out
	ex, ok := engine.ExecutorFrom(ctx)
	if !ok {
		return out, fmt.Errorf("sdk.Execute: %w", ErrNotInWorkflow)
	}
	input, err := json.Marshal(in)
	if err != nil {
		return out, fmt.Errorf("activity %q: encode input: %w", act.Name(), err)
	}
	output, err := ex.Step(ctx, act, input, opts)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(output, &out); err != nil {
		return out, fmt.Errorf("activity %q: decode recorded output: %w", act.Name(), err)
	}
	return out, nil
}
