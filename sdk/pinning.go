package sdk

// WithPinning pins the workflow's runs to builds: a run is pinned, when a
// worker first claims it, to that worker's build (runtime.Config.BuildID),
// and from then on only workers of that build claim it, through every
// sleep, signal wait, retry, crash and requeue. A deploy of another build
// leaves the runs in flight to the old build's workers, which drain them,
// while the new build's workers take the new runs: a change of the workflow
// needs no patch (Patched) for runs it would replay differently, as long as
// old workers run until the old runs end.
//
// A run pinned to a build that no live worker runs waits: the orphaned_runs
// view, tenure workers and the web UI name its build, and every worker of
// the workflow logs it once a minute. tenure runs move --build X --to Y
// (operator.MoveRuns, the SQL function move_runs) moves such runs to
// another build, on purpose and audited. Runs started before the workflow
// was pinned, which ran already unpinned, stay unpinned. It costs nothing
// per step; a worker's claim reads two index ranges more per workflow and
// queue (schema version 19).
func WithPinning() WorkflowOption {
	return func(o *workflowOptions) { o.pinned = true }
}

// PinnedToBuild is a workflow whose runs may be pinned to builds.
// *Workflow implements it; a Definition that does not is not pinned.
type PinnedToBuild interface {
	PinnedToBuild() bool
}

// PinnedToBuild reports whether the workflow's runs are pinned to the build
// of the worker that first claims them (see WithPinning).
func (w *Workflow[In, Out]) PinnedToBuild() bool { return w.pinned }
