package policy_test

import (
	"fmt"
	"time"

	"github.com/tenurehq/tenure/policy"
)

// Explain prints the delay timeline, the worst case and what does not fit
// the deadline, as the CLI shows it.
func ExampleExplain() {
	r, _ := policy.New(
		policy.MaxAttempts(8),
		policy.Exponential(time.Second, 2, 10*time.Second),
		policy.Jitter(policy.EqualJitter),
		policy.AttemptTimeout(5*time.Second),
		policy.Deadline(time.Minute),
	)
	fmt.Print(policy.Explain(r))
	// Output:
	// policy: max_attempts=8 max_rescues=3 backoff=exponential(1s, x2, max 10s) jitter=equal max_retry_after=1h0m0s attempt_timeout=5s deadline=1m0s
	// after attempt  delay
	// 1              500ms .. 1s
	// 2              1s .. 2s
	// 3              2s .. 4s
	// 4              4s .. 8s
	// 5-7            5s .. 10s
	// worst case: 1m25s
	// warning: worst case 1m25s exceeds deadline 1m0s: the step may give up with deadline_exceeded before its last attempt
}

func ExampleExplanation_String() {
	r, _ := policy.New(policy.MaxAttempts(3), policy.Constant(time.Second), policy.Jitter(policy.NoJitter))
	e := policy.Explain(r)
	fmt.Println(e.WorstCase, len(e.Steps))
	fmt.Print(e)
	// Output:
	// 2s 2
	// policy: max_attempts=3 max_rescues=3 backoff=constant(1s) jitter=none max_retry_after=1h0m0s
	// after attempt  delay
	// 1-2            1s
	// worst case: 2s
}
