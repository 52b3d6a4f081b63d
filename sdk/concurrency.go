package sdk

import (
	"encoding/json"
	"fmt"
)

// ConcurrencyPolicy is what a run does when its workflow's concurrency key
// has no room: Limit runs of the key are in progress (started and not
// ended, suspended ones included).
type ConcurrencyPolicy string

// Concurrency policies.
const (
	// ConcurrencyQueue: the run waits, without a lease and charged
	// nothing, until a run of its key ends; the oldest waiter goes first.
	ConcurrencyQueue ConcurrencyPolicy = "queue"
	// CancelInProgress: the oldest runs in progress of the key are asked
	// to cancel (as Client.Cancel does), as many as make room, and the run
	// waits for their ends.
	CancelInProgress ConcurrencyPolicy = "cancel-in-progress"
	// CancelNewest: the run ends cancelled at once, before its workflow
	// runs; the runs in progress go on.
	CancelNewest ConcurrencyPolicy = "cancel-newest"
)

// Concurrency limits the runs of a workflow in progress at once with one
// key, taken from the run's input (an account, a document): at most Limit
// (default 1), with Policy (default ConcurrencyQueue) for a run that finds
// no room. A run takes its key's slot when it first executes and holds it
// through suspensions and rescues until it ends. The slot is a row of the
// downstream "workflow:<workflow name>" (see package flow): its limit can
// be changed at run time like any downstream's, audited.
type Concurrency[In any] struct {
	Key    func(In) string
	Limit  int
	Policy ConcurrencyPolicy
}

// WithConcurrency gives the workflow a concurrency key (see Concurrency).
// Its In must be the workflow's: NewWorkflow panics otherwise. Each
// execution of a run of such a workflow writes one commit more than
// another's, to take its slot.
func WithConcurrency[In any](c Concurrency[In]) WorkflowOption {
	return func(o *workflowOptions) { o.concurrency = c }
}

// concurrencyOf checks a workflow's Concurrency option, if any.
func concurrencyOf[In any](workflow string, opt any) (*Concurrency[In], error) {
	if opt == nil {
		return nil, nil
	}
	c, ok := opt.(Concurrency[In])
	if !ok {
		return nil, fmt.Errorf("sdk.NewWorkflow(%q): WithConcurrency takes a %T, not the workflow's input type: %w", workflow, opt, ErrInvalidWorkflow)
	}
	if c.Key == nil {
		return nil, fmt.Errorf("sdk.NewWorkflow(%q): WithConcurrency without a Key function: %w", workflow, ErrInvalidWorkflow)
	}
	if c.Limit < 0 {
		return nil, fmt.Errorf("sdk.NewWorkflow(%q): WithConcurrency limit %d: %w", workflow, c.Limit, ErrInvalidWorkflow)
	}
	if c.Limit == 0 {
		c.Limit = 1
	}
	switch c.Policy {
	case "":
		c.Policy = ConcurrencyQueue
	case ConcurrencyQueue, CancelInProgress, CancelNewest:
	default:
		return nil, fmt.Errorf("sdk.NewWorkflow(%q): unknown concurrency policy %q: %w", workflow, c.Policy, ErrInvalidWorkflow)
	}
	return &c, nil
}

// ConcurrencyLimited is implemented by a workflow declared WithConcurrency:
// the runtime admits each execution of its runs under its key. *Workflow
// implements it; application code has no need to.
type ConcurrencyLimited interface {
	// ConcurrencyLimit is the workflow's limit and policy; ok is false
	// when it has no concurrency key.
	ConcurrencyLimit() (limit int, policy ConcurrencyPolicy, ok bool)
	// ConcurrencyKey is the key of a run with this JSON input.
	ConcurrencyKey(input []byte) (string, error)
}

// ConcurrencyLimit returns the workflow's concurrency limit and policy, and
// whether it has a concurrency key (WithConcurrency).
func (w *Workflow[In, Out]) ConcurrencyLimit() (limit int, policy ConcurrencyPolicy, ok bool) {
	if w.conc == nil {
		return 0, "", false
	}
	return w.conc.Limit, w.conc.Policy, true
}

// MaxConcurrencyKey is the longest concurrency key, in bytes, a Key
// function may return: a longer one fails the run (reason bad_input).
const MaxConcurrencyKey = 200

// ConcurrencyKey decodes a run's JSON input and returns its concurrency
// key. An input that does not decode, or a key longer than
// MaxConcurrencyKey, is an error.
func (w *Workflow[In, Out]) ConcurrencyKey(input []byte) (string, error) {
	if w.conc == nil {
		return "", nil
	}
	var in In
	if err := json.Unmarshal(input, &in); err != nil {
		return "", fmt.Errorf("workflow %q: input does not decode for its concurrency key: %w", w.name, err)
	}
	k := w.conc.Key(in)
	if len(k) > MaxConcurrencyKey {
		return "", fmt.Errorf("workflow %q: concurrency key is %d bytes, at most %d", w.name, len(k), MaxConcurrencyKey)
	}
	return k, nil
}
