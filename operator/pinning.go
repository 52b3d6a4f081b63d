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

// MoveOptions says how MoveRuns runs. The zero value moves everything that
// matches in one statement with one audit row.
type MoveOptions struct {
	// DryRun changes nothing and reports what would move.
	DryRun bool
	// Note is recorded in the audit_log row(s); empty for none.
	Note string
	// BatchSize, when positive, moves at most this many runs per statement
	// (and audit row), so that a large move holds its runs' locks briefly
	// (a running run's lease is not renewed while a move holds its row); 0
	// moves all in one.
	BatchSize int
}

// MoveRuns moves the runs pinned to f.From that can still run (queued,
// running or failed: a failed one requeued later is claimed by its new
// build) to build f.To, through the SQL function move_runs, and wakes the
// idle workers of their queues. Each statement (of o.BatchSize runs, or all)
// writes one audit_log row (action move, the builds and the workflow, the
// runs, o.Note); with o.DryRun it changes nothing and reports what it would
// move. Runs that a claim or a commit in flight holds are passed over by a
// batch and moved by the next. A running run keeps its lease and
// its worker; its next claim is by the new build. Move runs on purpose only:
// the new build replays them under its code, which must take their recorded
// path (check with tenuretest.Replay on their exported histories first).
func (op *Operator) MoveRuns(ctx context.Context, f MoveFilter, o MoveOptions) ([]record.MovedRuns, error) {
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.MoveRuns(ctx, store.MoveFilter(f), store.MoveOptions(o))
}
