package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/engine"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
)

// ErrTimeout is matched (errors.Is) by the *TimeoutError that Receive and
// GetEvent return when what they wait for did not come in time.
var ErrTimeout = errors.New("timed out")

// TimeoutError is returned by Receive when no signal of the name came within
// the timeout, and by GetEvent when the event was not set within it.
type TimeoutError struct {
	// What waited: `signal "approval"`, `event "progress" of run ...`.
	What string
	// Timeout is the time waited; 0 when replayed from the step's record.
	Timeout time.Duration
}

// Error says what timed out.
func (e *TimeoutError) Error() string {
	if e.Timeout > 0 {
		return fmt.Sprintf("%s: none within %s: %v", e.What, e.Timeout, ErrTimeout)
	}
	return fmt.Sprintf("%s: none within the timeout: %v", e.What, ErrTimeout)
}

// Is reports whether target is ErrTimeout.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// ReasonCancelled is the reason recorded on a step that the run's
// cancellation stopped (its attempt recorded cancelled). A cancelled run has
// no failure row; a River job cancelled outside its policy (module
// riveradapter) has one, with this reason.
const ReasonCancelled = policy.Cancelled

// Sleep pauses the workflow durably for d. The due time is fixed by the
// database clock when the step first executes: a replay (after a crash, a
// deploy or a suspension) never extends it. A sleep longer than the worker's
// MaxInProcessSleep releases the run's lease: the run waits queued
// (runs.run_after is the due time, runs.waiting_for is 'sleep'), holding no
// worker slot, and any worker resumes it when it is due. The sleep is a step
// of kind sleep in history, with its due time and the time it woke
// (step_timeline). d <= 0 records the step and returns at once.
//
// After the run's Cancel, Sleep returns an error wrapping ErrCancelled at
// once, unless ctx comes from Detached.
func Sleep(ctx context.Context, d time.Duration) error {
	ex, ok := engine.ExecutorFrom(ctx)
	if !ok {
		return fmt.Errorf("sdk.Sleep: %w", ErrNotInWorkflow)
	}
	return ex.Sleep(ctx, max(d, 0), time.Time{})
}

// SleepUntil pauses the workflow durably until t, as Sleep does. A t in the
// past records the step and returns at once.
func SleepUntil(ctx context.Context, t time.Time) error {
	ex, ok := engine.ExecutorFrom(ctx)
	if !ok {
		return fmt.Errorf("sdk.SleepUntil: %w", ErrNotInWorkflow)
	}
	if t.IsZero() {
		return errors.New("sdk.SleepUntil: zero time")
	}
	return ex.Sleep(ctx, 0, t)
}

// Receive returns the payload of the next signal called name sent to this
// run (Client.Send, SendTx, the SQL function send_signal, `tenure runs
// signal`), decoded into T. Signals are consumed once each, in the order
// they were sent, per name; a signal sent before the workflow reaches
// Receive is kept for it. The receipt is a step of kind signal: on replay,
// Receive returns the payload it received then.
//
// When no signal is pending, the run waits without a lease or a worker slot
// (runs.waiting_for is 'signal:<name>') until a send wakes it at once, or
// until timeout after the step first executed, by the database clock; then
// Receive returns a *TimeoutError (errors.Is(err, ErrTimeout)). timeout 0
// waits with no limit; a negative one is an error.
//
// After the run's Cancel, Receive returns an error wrapping ErrCancelled,
// unless ctx comes from Detached.
func Receive[T any](ctx context.Context, name string, timeout time.Duration) (T, error) {
	var v T
	ex, ok := engine.ExecutorFrom(ctx)
	if !ok {
		return v, fmt.Errorf("sdk.Receive: %w", ErrNotInWorkflow)
	}
	if err := checkName("sdk.Receive", "signal name", name); err != nil {
		return v, err
	}
	if timeout < 0 {
		return v, fmt.Errorf("sdk.Receive(%q): negative timeout %s", name, timeout)
	}
	payload, err := ex.Receive(ctx, name, timeout)
	if err != nil {
		var te *TimeoutError
		if errors.As(err, &te) && te.Timeout == 0 {
			te.Timeout = timeout
		}
		return v, err
	}
	if err := json.Unmarshal(payload, &v); err != nil {
		return v, fmt.Errorf("signal %q: decode payload into %T: %w", name, v, err)
	}
	return v, nil
}

// MaxNameLength is the longest signal name or event key, in bytes: they are
// index keys (send_signal refuses a longer name with SQLSTATE 22023).
const MaxNameLength = 200

// checkName refuses an empty name, or one over MaxNameLength bytes; caller
// is the entry point and what the name names, for the error.
func checkName(caller, what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s: empty %s", caller, what)
	case len(name) > MaxNameLength:
		return fmt.Errorf("%s: %s of %d bytes, over the limit of %d (sdk.MaxNameLength)", caller, what, len(name), MaxNameLength)
	}
	return nil
}

// SetEvent sets the run's event key to value (encoded as JSON): progress, or
// an intermediate result, that GetEvent reads outside the workflow (and SQL
// reads in the events table). The latest value per key wins. Setting it is
// a step of kind event, recorded once: a replay does not set it again.
func SetEvent(ctx context.Context, key string, value any) error {
	ex, ok := engine.ExecutorFrom(ctx)
	if !ok {
		return fmt.Errorf("sdk.SetEvent: %w", ErrNotInWorkflow)
	}
	if err := checkName("sdk.SetEvent", "event key", key); err != nil {
		return err
	}
	b, err := json.Marshal(value)
	if err != nil {
		return fmt.Errorf("sdk.SetEvent(%q): encode value: %w", key, err)
	}
	return ex.SetEvent(ctx, key, b)
}

// Now returns the time, recorded once as a step of kind now: the database
// clock at the step's first execution, the same value on every replay.
// Workflow code uses it instead of time.Now, which would differ on replay.
func Now(ctx context.Context) (time.Time, error) {
	ex, ok := engine.ExecutorFrom(ctx)
	if !ok {
		return time.Time{}, fmt.Errorf("sdk.Now: %w", ErrNotInWorkflow)
	}
	b, err := ex.Record(ctx, "now", nil)
	if err != nil {
		return time.Time{}, err
	}
	var t time.Time
	if err := json.Unmarshal(b, &t); err != nil {
		return time.Time{}, fmt.Errorf("sdk.Now: decode recorded time: %w", err)
	}
	return t, nil
}

// SideEffect returns fn's value, recorded once as a step of kind
// side_effect: fn is called at the step's first execution, and every replay
// returns the recorded value without calling it. Workflow code uses it for
// randomness or IDs, which would differ on replay. fn must be quick and
// free of effects that matter: a crash before the record commits calls it
// again (use an activity for real side effects). When fn returns an error,
// nothing is recorded and SideEffect returns it.
func SideEffect[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	var v T
	ex, ok := engine.ExecutorFrom(ctx)
	if !ok {
		return v, fmt.Errorf("sdk.SideEffect: %w", ErrNotInWorkflow)
	}
	b, err := ex.Record(ctx, "side_effect", func() ([]byte, error) {
		x, err := fn()
		if err != nil {
			return nil, err
		}
		return json.Marshal(x)
	})
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("sdk.SideEffect: decode recorded value into %T: %w", v, err)
	}
	return v, nil
}

// Detached returns a context for a workflow's cleanup after its run was
// cancelled: steps (Execute, Sleep, Receive, children) called with it run as
// usual instead of returning ErrCancelled. It keeps ctx's values (the run
// it belongs to) but not its cancellation. A lost lease or a shutdown still
// stops the activities it runs.
//
//	if errors.Is(err, sdk.ErrCancelled) {
//		_, _ = sdk.Execute(sdk.Detached(ctx), releaseStock, order)
//		return Out{}, err
//	}
func Detached(ctx context.Context) context.Context { return engine.Detach(ctx) }

// ChildError is the error Call and Child.Result return for a child run that
// did not complete: it failed (Reason and Message are its failure's) or was
// cancelled (errors.Is(err, ErrCancelled)).
type ChildError struct {
	RunID    uuid.UUID
	Workflow string
	Status   record.RunStatus // failed or cancelled
	Reason   Reason           // the child's failure reason; empty when cancelled
	Message  string
	Type     string
}

// Error says which child ended how.
func (e *ChildError) Error() string {
	if e.Status == record.RunCancelled {
		return fmt.Sprintf("child run %s (%s) was cancelled: %s", e.RunID, e.Workflow, e.Message)
	}
	return fmt.Sprintf("child run %s (%s) failed: %s: %s", e.RunID, e.Workflow, e.Reason, e.Message)
}

// Is reports whether e is ErrCancelled (the child was cancelled) or
// ErrIndeterminate (the child failed as indeterminate).
func (e *ChildError) Is(target error) bool {
	return (target == ErrCancelled && e.Status == record.RunCancelled) ||
		(target == ErrIndeterminate && e.Reason == ReasonIndeterminate)
}

// Child is a child run started by StartChild: its Result waits for it
// inside the workflow.
type Child[Out any] struct {
	id   uuid.UUID
	step int
	name string
}

// ID returns the child's run ID.
func (c *Child[Out]) ID() uuid.UUID { return c.id }

// Result waits for the child to end and returns its output, or a
// *ChildError. While the child runs, the parent waits without a lease or a
// worker slot (runs.waiting_for is 'child:<id>'); the child's end wakes it.
// The result is recorded on the child's step: a replay returns it without
// waiting. After the run's Cancel it returns an error wrapping ErrCancelled,
// unless ctx comes from Detached.
func (c *Child[Out]) Result(ctx context.Context) (Out, error) {
	var out Out
	ex, ok := engine.ExecutorFrom(ctx)
	if !ok {
		return out, fmt.Errorf("sdk.Child.Result: %w", ErrNotInWorkflow)
	}
	b, err := ex.AwaitChild(ctx, c.step)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("child run %s (%s): decode output into %T: %w", c.id, c.name, out, err)
	}
	return out, nil
}

// StartChild starts a run of wf with input in as a child of the current run
// and returns its handle, without waiting for it: start many, then wait for
// each with Result (fan-out). The start is a step of kind child; the child's
// ID is derived from the parent run and the step (its key is
// 'tenure-child:<parent>/<step>'), so a replay never starts a second child.
// The link is in SQL (runs.parent_run_id, parent_step; steps.child_run_id)
// and in `tenure runs show`.
//
// WithQueue and WithPriority apply; WithKey, WithDelay and WithFairness are
// refused.
//
// Cancelling the parent cancels its unfinished children when the parent's
// run ends cancelled; a parent that completes or fails leaves its children
// running (see docs/semantics.md, Child workflows).
func StartChild[In, Out any](ctx context.Context, wf *Workflow[In, Out], in In, opts ...StartOption) (*Child[Out], error) {
	ex, ok := engine.ExecutorFrom(ctx)
	if !ok {
		return nil, fmt.Errorf("sdk.StartChild: %w", ErrNotInWorkflow)
	}
	if wf == nil {
		return nil, errors.New("sdk.StartChild: nil workflow")
	}
	var o startOptions
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case o.key != "":
		return nil, fmt.Errorf("sdk.StartChild(%q): WithKey is not for children: a child's key is derived from its parent and step", wf.name)
	case o.delay != 0:
		return nil, fmt.Errorf("sdk.StartChild(%q): WithDelay is not for children: Sleep in the child instead", wf.name)
	case o.fair:
		return nil, fmt.Errorf("sdk.StartChild(%q): WithFairness is not for children: a child is work its parent started in its turn", wf.name)
	}
	if o.queue == "" {
		o.queue = "default"
	}
	input, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("sdk.StartChild(%q): encode input: %w", wf.name, err)
	}
	id, step, err := ex.StartChild(ctx, wf.name, input, o.queue, o.priority)
	if err != nil {
		return nil, err
	}
	return &Child[Out]{id: id, step: step, name: wf.name}, nil
}

// Call starts a run of wf as a child of the current run and waits for its
// result: StartChild, then Result. It returns the child's output, or a
// *ChildError carrying the child's failure reason.
func Call[In, Out any](ctx context.Context, wf *Workflow[In, Out], in In, opts ...StartOption) (Out, error) {
	c, err := StartChild(ctx, wf, in, opts...)
	if err != nil {
		var out Out
		return out, err
	}
	return c.Result(ctx)
}
