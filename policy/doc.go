// Package policy describes how Tenure retries a step: how many attempts it
// may make, how long it waits between them, which errors are worth another
// attempt, and when it gives up. It is pure Go with no database: the runtime
// asks it questions and records the answers.
//
// # Two budgets: retry and rescue
//
// An attempt can end in two ways that call for different treatment. It can
// return an error: its outcome is known, and another attempt is a retry,
// charged to MaxAttempts. Or its worker can die, freeze or lose its lease
// while it runs: its outcome is unknown, and another attempt is a rescue,
// charged to MaxRescues. The budgets never share a counter, so a flaky
// remote API cannot spend the crash budget, and a poison-pill input that
// kills its worker again and again is quarantined (rescues_exhausted) without
// spending retries. Decide answers after an error; DecideRescue after a loss.
//
// # At most once
//
// AtMostOnce answers "may this function run again when we do not know
// whether it ran?" with no. It forces MaxRescues to 0 and tells the runtime
// to commit the attempt before invoking the function; a lost attempt then
// fails the step as indeterminate instead of running it again. Retries after
// returned errors still follow MaxAttempts: a function that returns an error
// asserts that its effect did not happen or is safe to redo. Asking for
// AtMostOnce and an explicit MaxRescues above 0 is a validation error,
// whatever the order of the options.
//
// # Options and merge order
//
// A policy is built from options. The same options are activity defaults,
// per-call overrides and worker-wide defaults, and Resolve merges them with
// one rule, later layers winning field by field:
//
//	call option > activity default > worker default > package default
//
// The package defaults are the Default* constants. Every policy is validated
// when it is built, so a nonsensical value (a negative interval, a factor
// below 1, MaxAttempts below 1, a max below the initial delay) is a
// *ValidationError at declaration, not a surprise during an outage.
//
// # Where a delay comes from
//
// After the n-th error the backoff shape (Exponential, Constant, Linear,
// Schedule or BackoffFunc) gives a base delay; jitter (none, full, equal or
// decorrelated, as in the AWS article "Exponential Backoff and Jitter")
// randomizes it with a PRNG seeded from the run ID, step and attempt (Seed),
// so the same history always gives the same delay. An error that carries a
// Retry-After hint (RetryAfterer, WithRetryAfter, ParseRetryAfter) replaces
// that delay, clamped by MaxRetryAfter. Finally the deadline: an attempt that
// could not start before it is not made, and the step gives up with
// deadline_exceeded. Each Decision names its delay's Source (policy, jitter,
// retry-after) so the runtime can record why it waited.
//
// # Which errors are retried
//
// Decide classifies an error in order: Permanent errors are never retried;
// then the first rule (On, matched with errors.Is, or OnType, matched with
// errors.As) gives the error its own policy, built over the merged one, so
// a rate-limit error can get 20 constant attempts while everything else gets
// 3 exponential ones; then a RetryIf predicate may reject an error no rule
// matched. Explain shows the resulting timeline, its worst case and where it
// cannot fit its deadline.
package policy
