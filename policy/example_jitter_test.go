package policy_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/policy"
)

// Each jitter kind bounds the delay differently; Explain shows the bounds.
func ExampleJitter() {
	for _, k := range []policy.JitterKind{policy.NoJitter, policy.FullJitter, policy.EqualJitter, policy.DecorrelatedJitter} {
		r, _ := policy.New(policy.MaxAttempts(4), policy.Exponential(time.Second, 2, 10*time.Second), policy.Jitter(k))
		fmt.Printf("%-13s", k)
		for _, s := range policy.Explain(r).Steps {
			fmt.Printf(" [%s, %s]", s.Min, s.Max)
		}
		fmt.Println()
	}
	// Output:
	// none          [1s, 1s] [2s, 2s] [4s, 4s]
	// full          [0s, 1s] [0s, 2s] [0s, 4s]
	// equal         [500ms, 1s] [1s, 2s] [2s, 4s]
	// decorrelated  [1s, 3s] [1s, 9s] [1s, 10s]
}

// The jitter draw is seeded by run, step and attempt, so a delay can be
// reproduced: the same history always gives the same delay.
func ExampleSeed() {
	r, _ := policy.New(policy.Exponential(time.Second, 2, time.Minute), policy.Jitter(policy.FullJitter))
	h := policy.History{Attempt: 2, Errors: 2, Err: errors.New("boom"), Seed: policy.Seed("run-42", 3, 2)}
	first, again := r.Decide(h), r.Decide(h)
	fmt.Println(first)
	fmt.Println("reproduced:", first.Delay == again.Delay)
	// Output:
	// retry in 899.688612ms (jitter)
	// reproduced: true
}
