package policy_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/policy"
)

// The runtime calls Decide after every attempt that ended in an error,
// feeding back the delay it chose.
func ExampleRetry_Decide() {
	r, _ := policy.New(policy.MaxAttempts(4), policy.Exponential(time.Second, 3, time.Minute), policy.Jitter(policy.NoJitter))
	var elapsed, last time.Duration
	for attempt := 1; ; attempt++ {
		d := r.Decide(policy.History{
			Attempt:   attempt,
			Errors:    attempt,
			Elapsed:   elapsed,
			LastDelay: last,
			Err:       errors.New("unavailable"),
			Seed:      policy.Seed("run-1", 1, attempt),
		})
		fmt.Printf("attempt %d failed: %v\n", attempt, d)
		if !d.Retry {
			break
		}
		elapsed, last = elapsed+d.Delay, d.Delay
	}
	// Output:
	// attempt 1 failed: retry in 1s (policy)
	// attempt 2 failed: retry in 3s (policy)
	// attempt 3 failed: retry in 9s (policy)
	// attempt 4 failed: give up: retries_exhausted
}

func ExampleDecision_String() {
	fmt.Println(policy.Decision{Retry: true, Delay: 2 * time.Second, Source: policy.SourceJitter})
	fmt.Println(policy.Decision{Reason: policy.DeadlineExceeded})
	// Output:
	// retry in 2s (jitter)
	// give up: deadline_exceeded
}

func ExampleRetry_TimeoutAt() {
	r, _ := policy.New(policy.AttemptTimeout(time.Minute), policy.Deadline(90*time.Second))
	fmt.Println(r.TimeoutAt(0))
	fmt.Println(r.TimeoutAt(time.Minute))
	fmt.Println(r.TimeoutAt(2 * time.Minute))
	// Output:
	// 1m0s true
	// 30s true
	// 0s false
}
