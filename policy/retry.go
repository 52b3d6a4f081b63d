package policy

import (
	"fmt"
	"strings"
	"time"
)

// Package defaults. Resolve starts from these values before it applies the
// worker, activity and call layers, so a field no layer sets keeps the value
// given here.
const (
	// DefaultMaxAttempts is the retry budget: a step fails with
	// retries_exhausted after this many attempts ended in an error.
	DefaultMaxAttempts = 3
	// DefaultMaxRescues is the crash budget: a step is quarantined with
	// rescues_exhausted after more than this many attempts were lost.
	DefaultMaxRescues = 3
	// DefaultInitialInterval is the first delay of the default exponential backoff.
	DefaultInitialInterval = time.Second
	// DefaultBackoffFactor is the growth factor of the default exponential backoff.
	DefaultBackoffFactor = 2.0
	// DefaultMaxInterval caps the default exponential backoff.
	DefaultMaxInterval = time.Minute
	// DefaultJitter is the jitter applied to computed delays.
	DefaultJitter = FullJitter
	// DefaultMaxRetryAfter caps how long a Retry-After hint may make a step wait.
	DefaultMaxRetryAfter = time.Hour
	// DefaultAttemptTimeout is the per-attempt timeout: 0, no limit.
	DefaultAttemptTimeout time.Duration = 0
	// DefaultDeadline is the overall step deadline: 0, no limit.
	DefaultDeadline time.Duration = 0
)

// Retry is a retry policy for one step. It is a value: build it with New or
// Resolve, which apply options over Default and validate the result. The zero
// value is not valid (MaxAttempts is 0 and there is no backoff).
//
// Values returned by New and Resolve are never modified by this package; treat
// them, including their slices, as read-only.
type Retry struct {
	// MaxAttempts bounds the attempts that ended in an error (returned an
	// error or timed out): the retry budget. At least 1; 1 means no retry.
	// Default DefaultMaxAttempts.
	MaxAttempts int
	// MaxRescues bounds the attempts whose outcome is unknown (lost with
	// their lease): the crash budget, counted apart from MaxAttempts. At
	// least 0. Default DefaultMaxRescues.
	MaxRescues int
	// AtMostOnce says the activity must not run again when it is not known
	// whether it ran: the runtime commits the attempt before invoking the
	// function, and a lost attempt fails the step as indeterminate. It
	// forces MaxRescues to 0. Default false.
	AtMostOnce bool
	// Backoff is the shape of the delays between attempts. Default
	// exponential from DefaultInitialInterval by DefaultBackoffFactor up to
	// DefaultMaxInterval.
	Backoff Backoff
	// Jitter randomizes computed delays. Default DefaultJitter.
	Jitter JitterKind
	// MaxRetryAfter caps a Retry-After hint carried by an error; 0 ignores
	// hints. Default DefaultMaxRetryAfter.
	MaxRetryAfter time.Duration
	// AttemptTimeout bounds one attempt (its context deadline); 0 means no
	// limit. Default 0.
	AttemptTimeout time.Duration
	// Deadline bounds the step, measured from the start of its first
	// attempt: no attempt starts at or after it. 0 means no limit. Default 0.
	Deadline time.Duration
	// Rules give errors their own policies; Decide uses the first rule that
	// matches. Build them with On and OnType.
	Rules []Rule

	// retryIf is the RetryIf predicate; nil retries every error.
	retryIf func(error) bool
	// retryIfProblem explains why retryIf is missing although one was
	// asked for (RetryIf(nil), or a predicate lost in JSON).
	retryIfProblem string
	// rescuesSet records that the layer being applied set MaxRescues, so
	// that AtMostOnce can tell an explicit MaxRescues from an inherited one.
	rescuesSet bool
	// rescueConflict is an explicit MaxRescues > 0 combined with AtMostOnce.
	rescueConflict int
}

// String describes the policy on one line, for logs and the CLI.
func (r Retry) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "max_attempts=%d max_rescues=%d", r.MaxAttempts, r.MaxRescues)
	if r.AtMostOnce {
		b.WriteString(" at_most_once")
	}
	fmt.Fprintf(&b, " backoff=%s jitter=%s", r.Backoff, r.Jitter)
	if r.MaxRetryAfter > 0 {
		fmt.Fprintf(&b, " max_retry_after=%s", r.MaxRetryAfter)
	} else {
		b.WriteString(" retry_after=ignored")
	}
	if r.AttemptTimeout > 0 {
		fmt.Fprintf(&b, " attempt_timeout=%s", r.AttemptTimeout)
	}
	if r.Deadline > 0 {
		fmt.Fprintf(&b, " deadline=%s", r.Deadline)
	}
	if r.retryIf != nil || r.retryIfProblem != "" {
		b.WriteString(" retry_if=func")
	}
	if len(r.Rules) > 0 {
		fmt.Fprintf(&b, " rules=%d", len(r.Rules))
	}
	return b.String()
}
