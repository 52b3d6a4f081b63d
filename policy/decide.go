package policy

import (
	"fmt"
	"time"
)

// History is what Decide needs to know about a step after one of its
// attempts ended in an error.
type History struct {
	// Attempt is the number of the attempt that just ended, counting every
	// attempt of the step, rescued ones included (1-based).
	Attempt int
	// Errors counts the attempts that ended in an error so far, this one
	// included. It is charged against MaxAttempts and selects the backoff
	// delay: the delay before the next attempt is Backoff.Delay(Errors).
	Errors int
	// Rescues counts the attempts lost so far. Decide does not use it; see
	// DecideRescue.
	Rescues int
	// Elapsed is the time from the start of the step's first attempt to now.
	Elapsed time.Duration
	// LastDelay is the delay chosen before the attempt that just ended, 0
	// for the first attempt. DecorrelatedJitter grows from it.
	LastDelay time.Duration
	// Err is the error the attempt ended with. nil (for example a timeout
	// recorded without an error value) is retried under the base policy.
	Err error
	// Seed selects the jitter draw; use Seed(runID, step, Attempt).
	Seed uint64
}

// Source says where a delay came from.
type Source string

// Delay sources, recorded with each attempt.
const (
	// SourcePolicy is the backoff shape's delay, unchanged.
	SourcePolicy Source = "policy"
	// SourceJitter is the backoff shape's delay changed by jitter.
	SourceJitter Source = "jitter"
	// SourceRetryAfter is a Retry-After hint carried by the error, clamped
	// by MaxRetryAfter.
	SourceRetryAfter Source = "retry-after"
	// SourceDeadline is a delay cut short by a deadline. Decide never
	// produces it, because it gives up instead of shortening a delay (see
	// Decide); it names waits that a caller shortens to meet a deadline of
	// its own.
	SourceDeadline Source = "deadline"
)

// Sources lists every delay source, in the order of the attempts table's
// CHECK constraint on delay_source.
func Sources() []Source {
	return []Source{SourcePolicy, SourceJitter, SourceRetryAfter, SourceDeadline}
}

// Decision is Decide's answer: retry after Delay, or give up for Reason.
type Decision struct {
	// Retry is true when the step should make another attempt.
	Retry bool
	// Delay is the wait before the next attempt. When the step gives up with
	// DeadlineExceeded it is the delay that did not fit.
	Delay time.Duration
	// Source says where Delay came from.
	Source Source
	// Timeout is the timeout of the next attempt: AttemptTimeout, shortened
	// so the attempt ends by the deadline; 0 means no limit. Set when Retry.
	Timeout time.Duration
	// Reason says why the step gives up. Set when !Retry.
	Reason Reason
	// Effective is the policy that decided: the matching rule's policy, or
	// the policy Decide was called on.
	Effective Retry
}

// String describes the decision, e.g. "retry in 2s (policy)" or
// "give up: retries_exhausted".
func (d Decision) String() string {
	if d.Retry {
		return fmt.Sprintf("retry in %s (%s)", d.Delay, d.Source)
	}
	return "give up: " + string(d.Reason)
}

// Decide answers, for a step whose attempt just ended in an error, whether
// to make another attempt and after which delay. It is a pure function of r
// and h: the same inputs give the same decision. The steps, in order:
//
//  1. An error marked Permanent gives up with NonRetryable.
//  2. The first rule that matches the error gives the effective policy;
//     without a match it is r.
//  3. If the effective policy has a RetryIf predicate that rejects the
//     error, give up with NonRetryable. (A rule has a predicate only if its
//     own options set one; r's predicate applies to unmatched errors.)
//  4. If h.Errors ≥ MaxAttempts, give up with RetriesExhausted.
//  5. The delay is Backoff.Delay(h.Errors) with jitter drawn from h.Seed
//     (source policy, or jitter if jitter changed it).
//  6. A Retry-After hint on the error, if MaxRetryAfter > 0, replaces that
//     delay, clamped to MaxRetryAfter (source retry-after).
//  7. If there is a deadline and h.Elapsed + delay is at or after it, the
//     next attempt could not start before the deadline: give up with
//     DeadlineExceeded. Delays are never shortened to fit, since an attempt
//     made earlier than the policy or the server asked is unlikely to fare
//     better. An attempt that can start before the deadline is made, with
//     its timeout cut to end at the deadline.
//
// Decide does not panic on a policy that fails Validate, but its answer for
// one is unspecified.
func (r Retry) Decide(h History) Decision {
	if IsPermanent(h.Err) {
		return Decision{Reason: NonRetryable, Effective: r}
	}
	eff := r.effective(h.Err)
	if h.Err != nil && eff.retryIf != nil && !eff.retryIf(h.Err) {
		return Decision{Reason: NonRetryable, Effective: eff}
	}
	if h.Errors >= eff.MaxAttempts {
		return Decision{Reason: RetriesExhausted, Effective: eff}
	}
	delay, source := eff.delay(h.Errors, h.LastDelay, h.Seed)
	if hint, ok := RetryAfterOf(h.Err); ok && eff.MaxRetryAfter > 0 {
		delay, source = min(hint, eff.MaxRetryAfter), SourceRetryAfter
	}
	timeout, ok := eff.TimeoutAt(addSat(h.Elapsed, delay))
	if !ok {
		return Decision{Delay: delay, Source: source, Reason: DeadlineExceeded, Effective: eff}
	}
	return Decision{Retry: true, Delay: delay, Source: source, Timeout: timeout, Effective: eff}
}

// delay returns the computed delay after n failed attempts, with jitter, and
// its source.
func (r Retry) delay(n int, prev time.Duration, seed uint64) (time.Duration, Source) {
	base := r.Backoff.Delay(n)
	if d := r.jitter(base, prev, seed); d != base {
		return d, SourceJitter
	}
	return base, SourcePolicy
}

// TimeoutAt returns the timeout of an attempt that starts start after the
// step's first attempt started: AttemptTimeout, shortened so the attempt ends
// by the deadline; 0 means no limit. ok is false when start is at or after
// the deadline, in which case the attempt must not start.
func (r Retry) TimeoutAt(start time.Duration) (timeout time.Duration, ok bool) {
	timeout = max(r.AttemptTimeout, 0)
	if r.Deadline <= 0 {
		return timeout, true
	}
	left := r.Deadline - max(start, 0)
	if left <= 0 {
		return 0, false
	}
	if timeout == 0 || left < timeout {
		timeout = left
	}
	return timeout, true
}

// DecideRescue reports whether a step may run again after one of its
// attempts was lost (outcome unknown). rescues counts the lost attempts so
// far, this one included; the answer is rescues ≤ MaxRescues, so never for an
// AtMostOnce policy. When it is false the runtime fails the step: as
// indeterminate if AtMostOnce, else with RescuesExhausted.
func (r Retry) DecideRescue(rescues int) (ok bool) {
	if r.AtMostOnce {
		return rescues <= 0
	}
	return rescues <= r.MaxRescues
}
