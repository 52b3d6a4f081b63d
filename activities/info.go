package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// Info describes the attempt an activity is running in.
type Info struct {
	RunID    uuid.UUID
	Workflow string
	Activity string
	Step     int  // 1, 2, 3 … in the order the workflow calls activities
	Attempt  int  // 1, 2, 3 … per step, counting every attempt
	Rescue   bool // the previous attempt of this step was lost (its outcome is unknown)
	// Errors and Rescues are the budgets already spent before this attempt.
	Errors, Rescues int
	// MaxAttempts and MaxRescues are the effective budgets of this step.
	MaxAttempts, MaxRescues int
	Epoch                   int64  // the lease epoch this attempt runs under
	Worker                  string // the worker's label, for people and traces
}

type infoKey struct{}

// WithInfo returns ctx carrying info. The runtime calls it for every attempt;
// tests of activity functions may call it too.
func WithInfo(ctx context.Context, info Info) context.Context {
	return context.WithValue(ctx, infoKey{}, info)
}

// InfoFrom returns the attempt info in ctx; ok is false outside an attempt.
func InfoFrom(ctx context.Context) (info Info, ok bool) {
	info, ok = ctx.Value(infoKey{}).(Info)
	return info, ok
}

// IdempotencyKey returns the step's stable key, "<run id>/<step>": the same for
// every attempt of the step, different for every other step. Pass it to
// remote systems that deduplicate (payment APIs and the like) so that an
// attempt rerun after a crash cannot act twice. Outside an attempt it
// returns "".
func IdempotencyKey(ctx context.Context) string {
	info, ok := InfoFrom(ctx)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%s/%d", info.RunID, info.Step)
}

// Cancellation causes of an attempt's context, for context.Cause.
var (
	// ErrLeaseLost: the worker lost the run's lease (another worker took the
	// run over, or it was cancelled). Whatever the attempt still does is
	// discarded: its result cannot be recorded.
	ErrLeaseLost = errors.New("tenure: lease lost")
	// ErrWorkerShutdown: the worker is shutting down and its drain time is
	// over. An attempt that returns now is recorded interrupted and run again
	// elsewhere, charged to no budget.
	ErrWorkerShutdown = errors.New("tenure: worker shutting down")
)
