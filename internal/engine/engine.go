// Package engine is the private contract between the sdk package, which
// application code imports, and the runtime package, which executes runs.
// Keeping it internal lets both evolve without widening the public API.
package engine

import (
	"context"

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
