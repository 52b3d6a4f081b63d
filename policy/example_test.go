package policy_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/policy"
)

// A policy is declared once from options; a nonsensical one is an error at
// declaration time.
func ExampleNew() {
	charge, err := policy.New(
		policy.MaxAttempts(5),
		policy.Exponential(time.Second, 2, time.Minute),
		policy.Jitter(policy.FullJitter),
		policy.AtMostOnce(),
	)
	fmt.Println(charge, err)

	_, err = policy.New(policy.Exponential(time.Second, 0.5, time.Minute))
	fmt.Println(err)
	// Output:
	// max_attempts=5 max_rescues=0 at_most_once backoff=exponential(1s, x2, max 1m0s) jitter=full max_retry_after=1h0m0s <nil>
	// policy: backoff.factor = 0.5: must be at least 1
}

func ExampleDefault() {
	fmt.Println(policy.Default())
	// Output:
	// max_attempts=3 max_rescues=3 backoff=exponential(1s, x2, max 1m0s) jitter=full max_retry_after=1h0m0s
}

// Resolve merges layers in increasing precedence: call option > activity
// default > worker default > package default.
func ExampleResolve() {
	worker := []policy.Option{policy.MaxAttempts(10), policy.AttemptTimeout(time.Minute)}
	activity := []policy.Option{policy.MaxAttempts(5), policy.Constant(2 * time.Second)}
	call := []policy.Option{policy.MaxAttempts(2)}

	r, err := policy.Resolve(worker, activity, call)
	if err != nil {
		panic(err)
	}
	fmt.Println("max attempts:", r.MaxAttempts)       // from the call
	fmt.Println("backoff:", r.Backoff)                // from the activity
	fmt.Println("attempt timeout:", r.AttemptTimeout) // from the worker
	fmt.Println("max rescues:", r.MaxRescues)         // package default
	// Output:
	// max attempts: 2
	// backoff: constant(2s)
	// attempt timeout: 1m0s
	// max rescues: 3
}

// MaxAttempts counts attempts that ended in an error.
func ExampleMaxAttempts() {
	r, _ := policy.New(policy.MaxAttempts(3), policy.Constant(time.Second), policy.Jitter(policy.NoJitter))
	for errs := 1; errs <= 3; errs++ {
		fmt.Printf("after %d errors: %v\n", errs, r.Decide(policy.History{Attempt: errs, Errors: errs, Err: errors.New("boom")}))
	}
	// Output:
	// after 1 errors: retry in 1s (policy)
	// after 2 errors: retry in 1s (policy)
	// after 3 errors: give up: retries_exhausted
}

// MaxRescues counts attempts whose outcome is unknown, apart from retries.
func ExampleMaxRescues() {
	r, _ := policy.New(policy.MaxAttempts(1), policy.MaxRescues(2))
	for lost := 1; lost <= 3; lost++ {
		fmt.Printf("lost attempt %d: rerun %t\n", lost, r.DecideRescue(lost))
	}
	// Output:
	// lost attempt 1: rerun true
	// lost attempt 2: rerun true
	// lost attempt 3: rerun false
}

// AtMostOnce forbids rerunning an attempt whose outcome is unknown; returned
// errors are still retried.
func ExampleAtMostOnce() {
	r, _ := policy.New(policy.AtMostOnce(), policy.MaxAttempts(3), policy.Jitter(policy.NoJitter))
	fmt.Println("max rescues:", r.MaxRescues)
	fmt.Println("rerun a lost attempt:", r.DecideRescue(1))
	fmt.Println("after an error:", r.Decide(policy.History{Attempt: 1, Errors: 1, Err: errors.New("declined")}))

	// Asking for rescues too is a contradiction, whatever the order.
	_, err := policy.New(policy.MaxRescues(2), policy.AtMostOnce())
	fmt.Println(err)
	// Output:
	// max rescues: 0
	// rerun a lost attempt: false
	// after an error: retry in 1s (policy)
	// policy: max_rescues = 2: must be 0 with at_most_once, which forbids rerunning a lost attempt
}

func ExampleRetry_DecideRescue() {
	r, _ := policy.New(policy.MaxRescues(1))
	fmt.Println(r.DecideRescue(1), r.DecideRescue(2))
	// Output:
	// true false
}

// Validation errors name the field, rules included.
func ExampleValidationError() {
	_, err := policy.New(policy.OnType[*RateLimitError](policy.MaxAttempts(0)))
	var ve *policy.ValidationError
	if errors.As(err, &ve) {
		fmt.Println(ve.Field, "-", ve.Reason)
	}
	// Output:
	// rules[0].max_attempts - must be at least 1
}

func ExampleRetry_Validate() {
	r := policy.Default()
	r.Deadline = -time.Second
	fmt.Println(r.Validate())
	// Output:
	// policy: deadline = -1s: must be at least 0 (0 means no limit)
}

func ExampleAttemptTimeout() {
	r, _ := policy.New(policy.AttemptTimeout(10*time.Second), policy.Deadline(time.Minute))
	for _, start := range []time.Duration{0, 55 * time.Second, time.Minute} {
		timeout, ok := r.TimeoutAt(start)
		fmt.Printf("attempt starting at %s: timeout %s, may start %t\n", start, timeout, ok)
	}
	// Output:
	// attempt starting at 0s: timeout 10s, may start true
	// attempt starting at 55s: timeout 5s, may start true
	// attempt starting at 1m0s: timeout 0s, may start false
}

// No attempt starts at or after the deadline; Decide gives up instead of
// shortening the delay.
func ExampleDeadline() {
	r, _ := policy.New(policy.Constant(10*time.Second), policy.Jitter(policy.NoJitter), policy.Deadline(time.Minute))
	for _, elapsed := range []time.Duration{30 * time.Second, 50 * time.Second} {
		d := r.Decide(policy.History{Attempt: 1, Errors: 1, Elapsed: elapsed, Err: errors.New("timeout")})
		fmt.Printf("at %s: %v\n", elapsed, d)
	}
	// Output:
	// at 30s: retry in 10s (policy)
	// at 50s: give up: deadline_exceeded
}
