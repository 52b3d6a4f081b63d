// Package engine is the private contract between the sdk package, which
// application code imports, and the runtime package, which executes runs.
// Keeping it internal lets both evolve without widening the public API.
package engine

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/policy"
)

// Executor runs the steps of one run. The runtime puts one in the context it
// passes to a workflow function; sdk.Execute takes it out.
type Executor interface {
	// Step runs (or replays) the next step: act called with the JSON input,
	// under the policy resolved from opts over act's defaults. It returns the
	// step's JSON output or its error. It may not return at all: when the run
	// must unwind (suspension, lost lease, shutdown) it ends the calling
	// goroutine with runtime.Goexit, which workflow code cannot swallow.
	Step(ctx context.Context, act activities.Definition, input []byte, opts []policy.Option) ([]byte, error)

	// The durable primitives. Each is a step of the run, recorded once and
	// replayed from its record; like Step, each may end the calling
	// goroutine when the run must unwind (it suspends to wait).

	// Sleep returns once the step's due time has passed: d after its first
	// execution by the database clock, or until when that is not zero.
	Sleep(ctx context.Context, d time.Duration, until time.Time) error
	// Receive returns the payload of the next signal called name, waiting
	// up to timeout after the step's first execution (0: no limit).
	Receive(ctx context.Context, name string, timeout time.Duration) ([]byte, error)
	// SetEvent sets the run's event key to the JSON value.
	SetEvent(ctx context.Context, key string, value []byte) error
	// Record returns the value recorded by the step, or, on its first
	// execution, records and returns fn's (kind "now" with a nil fn: the
	// database clock, as JSON).
	Record(ctx context.Context, kind string, fn func() ([]byte, error)) ([]byte, error)
	// StartChild starts a run of workflow as the next step and returns its
	// ID and the step.
	StartChild(ctx context.Context, workflow string, input []byte, queue string, priority int) (uuid.UUID, int, error)
	// AwaitChild returns the output of the child started at step, once it
	// ended, or its error.
	AwaitChild(ctx context.Context, step int) ([]byte, error)
	// Patched says whether the run takes patch id's new branch: a run that
	// recorded the patch, or reaches this point first, does (and records
	// it, unless deprecated); one that recorded another step here before
	// the patch existed does not.
	Patched(ctx context.Context, id string, deprecated bool) bool
	// RunKey is the key the run was started with ("" for none): a
	// schedule's tick's run has the key 'schedule:<name>@<nominal time>'.
	RunKey() string
}

type executorKey struct{}

// WithExecutor returns ctx carrying e.
func WithExecutor(ctx context.Context, e Executor) context.Context {
	return context.WithValue(ctx, executorKey{}, e)
}

// ExecutorFrom returns the executor ctx carries, if any.
func ExecutorFrom(ctx context.Context) (Executor, bool) {
	e, ok := ctx.Value(executorKey{}).(Executor)
	return e, ok
}

// ErrorCodec encodes and decodes the error types a workflow registered
// (sdk.WithErrorType), so that the error a step gave up with is the same
// value when the step is replayed from its record. The workflow puts it in
// the context of its run; the runtime takes it out at each step.
type ErrorCodec interface {
	// EncodeError finds the first error in err's tree (in the order of
	// errors.As) whose type is registered and returns its type name and its
	// JSON. ok is false when no error of the tree has a registered type;
	// encErr is set when one has but does not encode.
	EncodeError(err error) (typ string, value []byte, ok bool, encErr error)
	// DecodeError rebuilds an error of the registered type named typ from
	// its JSON.
	DecodeError(typ string, value []byte) (error, error)
}

type codecKey struct{}

// WithErrorCodec returns ctx carrying c.
func WithErrorCodec(ctx context.Context, c ErrorCodec) context.Context {
	return context.WithValue(ctx, codecKey{}, c)
}

// ErrorCodecFrom returns the error codec ctx carries, if any.
func ErrorCodecFrom(ctx context.Context) (ErrorCodec, bool) {
	c, ok := ctx.Value(codecKey{}).(ErrorCodec)
	return c, ok
}

type detachedKey struct{}

// Detach returns ctx marked as detached from the run's cancellation: steps
// run under it even after Cancel (for a workflow's cleanup).
func Detach(ctx context.Context) context.Context {
	return context.WithValue(context.WithoutCancel(ctx), detachedKey{}, true)
}

// Detached reports whether ctx was marked by Detach.
func Detached(ctx context.Context) bool {
	d, _ := ctx.Value(detachedKey{}).(bool)
	return d
}
