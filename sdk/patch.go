package sdk

import (
	"context"
	"fmt"

	"github.com/tenurehq/tenure/internal/engine"
)

// Patched says whether the run takes the new branch of the patch named id,
// at this point of the workflow: a code change made while runs are in
// flight, that old runs must not take.
//
//	if sdk.Patched(ctx, "fee-before-charge") {
//		// the new code
//	} else {
//		// the code the runs in flight started with
//	}
//
// A run that reaches this point for the first time takes the new branch and
// records the patch as a step of kind patch (with the run's next write: no
// write of its own). A run that recorded the patch here takes the new
// branch again on every replay. A run that recorded another step here,
// before the patch existed, takes the old branch. Keep each patch's ID
// unique within its workflow. The view patch_status counts, per workflow
// and patch, the open runs that may still take the old branch: once none
// is left, the old branch can go (see DeprecatePatch).
//
// Patched panics outside a workflow (ErrNotInWorkflow) and with an empty
// id.
func Patched(ctx context.Context, id string) bool {
	return patched(ctx, "Patched", id, false)
}

// DeprecatePatch marks the point where patch id was, once no run can take
// its old branch (patch_status's open_without is 0) and the old branch is
// gone: a run that recorded the patch here replays past its record, and a
// new run records nothing. A run that recorded another step here takes the
// only branch left and fails with reason nondeterminism at its first step
// that differs. The call can be removed once no open run recorded the patch
// (a record no call asks about is passed over as well).
func DeprecatePatch(ctx context.Context, id string) {
	patched(ctx, "DeprecatePatch", id, true)
}

func patched(ctx context.Context, fn, id string, deprecated bool) bool {
	if id == "" {
		panic(fmt.Errorf("sdk.%s: empty patch ID", fn))
	}
	ex, ok := engine.ExecutorFrom(ctx)
	if !ok {
		panic(fmt.Errorf("sdk.%s(%q): %w", fn, id, ErrNotInWorkflow))
	}
	return ex.Patched(ctx, id, deprecated)
}
