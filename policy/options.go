package policy

import "time"

// Option sets fields of a policy under construction. The same options serve
// as worker defaults, activity defaults and per-call overrides; Resolve
// applies them in that order. Options never fail: New and Resolve validate
// the result and report a bad value as a *ValidationError.
type Option func(*Retry)

// MaxAttempts sets the retry budget: the number of attempts that may end in
// an error before the step fails with retries_exhausted. n must be at least 1.
func MaxAttempts(n int) Option {
	return func(r *Retry) { r.MaxAttempts = n }
}

// MaxRescues sets the crash budget: the number of lost attempts (outcome
// unknown) that may be rerun. n must be at least 0. An explicit n > 0 in the
// same layer as AtMostOnce, or in a layer above it, is a validation error.
func MaxRescues(n int) Option {
	return func(r *Retry) {
		r.MaxRescues = n
		r.rescuesSet = true
	}
}

// AtMostOnce marks the activity as one that must not run again when it is
// not known whether it ran: the runtime commits the attempt before invoking
// the function, and a lost attempt fails the step as indeterminate. It forces
// MaxRescues to 0 whatever the order of options; MaxRescues(n > 0) with it is
// a validation error. Retries after returned errors still follow MaxAttempts.
func AtMostOnce() Option {
	return func(r *Retry) { r.AtMostOnce = true }
}

// AttemptTimeout bounds one attempt: the attempt's context is cancelled
// after d and the attempt counts as an error. d must be at least 0; 0 means
// no limit.
func AttemptTimeout(d time.Duration) Option {
	return func(r *Retry) { r.AttemptTimeout = d }
}

// Deadline bounds the whole step, measured from the start of its first
// attempt: no attempt starts at or after it, and Decide gives up with
// deadline_exceeded when the next attempt could not start before it. d must
// be at least 0; 0 means no limit.
func Deadline(d time.Duration) Option {
	return func(r *Retry) { r.Deadline = d }
}
