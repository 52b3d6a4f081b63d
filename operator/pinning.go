package operator

import (
	"context"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/record"
)

// MoveFilter selects the runs MoveRuns moves: those pinned to build From
// (sdk.WithPinning), of Workflow when it is set.
type MoveFilter struct {
	// From is the build the runs are pinned to; required.
	From string
	// To is the build they are pinned to after the move; "" unpins them,
	// so that any worker of their workflow claims them.
	To string
	// Workflow, when set, moves the runs of that workflow only.
	Workflow string
}

// ErrSameBuild is returned by MoveRuns asked to move runs to the build
// they are pinned to.
var ErrSameBuild = store.ErrSameBuild

// MoveRuns moves the runs pinned to f.From that can still run (queued,
// running or failed: a failed one requeued later is claimed by its new
// build) to build f.To, through the SQL function move_runs, and wakes the
// idle workers of their queues. It writes one audit_log row (action move,
// the builds and the workflow, the runs, note); with dryRun it changes
// nothing and reports what it would move. A running run keeps its lease and
// its worker; its next claim is by the new build. Move runs on purpose only:
// the new build replays them under its code, which must take their recorded
// path (check with tenuretest.Replay on their exported histories first).
func (op *Operator) MoveRuns(ctx context.Context, f MoveFilter, dryRun bool, note string) ([]record.MovedRuns, error) {
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.MoveRuns(ctx, store.MoveFilter(f), dryRun, note)
}
