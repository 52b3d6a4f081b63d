package policy_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/policy"
)

var errCardDeclined = errors.New("card declined")

// A Permanent error is never retried, even with attempts left.
func ExamplePermanent() {
	r, _ := policy.New(policy.MaxAttempts(5))
	err := fmt.Errorf("charge: %w", policy.Permanent(errCardDeclined))
	fmt.Println(r.Decide(policy.History{Attempt: 1, Errors: 1, Err: err}))
	fmt.Println(errors.Is(err, errCardDeclined), err)
	// Output:
	// give up: non_retryable
	// true charge: card declined
}

// A rule matched with errors.Is changes only what its options set.
func ExampleOn() {
	r, _ := policy.New(
		policy.MaxAttempts(5),
		policy.Constant(time.Second),
		policy.Jitter(policy.NoJitter),
		policy.On(errCardDeclined, policy.MaxAttempts(1)),
	)
	declined := fmt.Errorf("charge: %w", errCardDeclined)
	fmt.Println(r.Decide(policy.History{Attempt: 1, Errors: 1, Err: declined}))
	fmt.Println(r.Decide(policy.History{Attempt: 1, Errors: 1, Err: errors.New("timeout")}))
	// Output:
	// give up: retries_exhausted
	// retry in 1s (policy)
}

// A rule matched with errors.As gives an error type its own policy: rate
// limits get 20 attempts 30s apart, everything else 3 exponential ones.
func ExampleOnType() {
	r, _ := policy.New(
		policy.MaxAttempts(3),
		policy.Exponential(time.Second, 2, time.Minute),
		policy.Jitter(policy.NoJitter),
		policy.OnType[*RateLimitError](policy.MaxAttempts(20), policy.Constant(30*time.Second), policy.MaxRetryAfter(0)),
	)
	limited := &RateLimitError{Wait: 5 * time.Second}
	for _, errs := range []int{3, 19, 20} {
		fmt.Printf("rate limited, %d errors: %v\n", errs, r.Decide(policy.History{Attempt: errs, Errors: errs, Err: limited}))
	}
	fmt.Println("other, 3 errors:", r.Decide(policy.History{Attempt: 3, Errors: 3, Err: errors.New("boom")}))
	// Output:
	// rate limited, 3 errors: retry in 30s (policy)
	// rate limited, 19 errors: retry in 30s (policy)
	// rate limited, 20 errors: give up: retries_exhausted
	// other, 3 errors: give up: retries_exhausted
}

// RetryIf rejects errors no rule matched.
func ExampleRetryIf() {
	var errTimeout = errors.New("timeout")
	r, _ := policy.New(
		policy.Jitter(policy.NoJitter),
		policy.RetryIf(func(err error) bool { return errors.Is(err, errTimeout) }),
	)
	fmt.Println(r.Decide(policy.History{Attempt: 1, Errors: 1, Err: errTimeout}))
	fmt.Println(r.Decide(policy.History{Attempt: 1, Errors: 1, Err: errors.New("bad request")}))
	// Output:
	// retry in 1s (policy)
	// give up: non_retryable
}

func ExampleIsPermanent() {
	fmt.Println(policy.IsPermanent(policy.Permanent(errCardDeclined)), policy.IsPermanent(errCardDeclined))
	// Output:
	// true false
}
