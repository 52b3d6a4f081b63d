// Package runtime is the worker: it claims runs from Postgres under a lease,
// executes their workflows, checkpoints every step and attempt, retries and
// rescues by the step's policy, suspends long backoffs durably, and hands its
// runs over when it shuts down.
//
// # Ownership
//
// A worker owns a run only through its lease: claimant label, epoch and
// expiry, all computed by the database clock. The claim is one statement
// (FOR UPDATE SKIP LOCKED) that takes due queued runs and running runs whose
// lease expired; taking an expired lease is how crash recovery happens, with
// no sweeper and no notion of which worker is alive. Every write the worker
// makes for a run carries the epoch it claimed; a write that finds another
// epoch touches nothing, and the worker stops working on the run, cancels its
// context, logs a warning and counts the lost lease (Stats.LeasesLost).
//
// # Crash versus error
//
// Before invoking an activity the worker commits the attempt row. An attempt
// that returns an error is recorded failed (or timed_out) and charged to
// MaxAttempts; an attempt found still running under an older epoch after a
// reclaim is recorded lost and charged to MaxRescues. A lost attempt of an
// at-most-once activity is never invoked again: the step gives up with
// sdk.ErrIndeterminate. An attempt cut short by a graceful shutdown is
// recorded interrupted and charged to neither budget.
//
// # Delays
//
// A retry delay up to Config.MaxInProcessSleep is slept with the lease held;
// a longer one suspends the run durably (run_after set, lease released) and
// the workflow goroutine unwinds with runtime.Goexit, which workflow code
// cannot recover from. Both record the same history.
package runtime
