package policy_test

import (
	"fmt"
	"time"

	"github.com/tenurehq/tenure/policy"
)

// printDelays prints the delays after each failed attempt, without jitter.
func printDelays(opts ...policy.Option) {
	r, err := policy.New(append(opts, policy.Jitter(policy.NoJitter))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range policy.Explain(r).Steps {
		fmt.Print(s.Max, " ")
	}
	fmt.Println()
}

func ExampleExponential() {
	printDelays(policy.MaxAttempts(8), policy.Exponential(time.Second, 2, 30*time.Second))
	// Output:
	// 1s 2s 4s 8s 16s 30s 30s
}

func ExampleConstant() {
	printDelays(policy.MaxAttempts(4), policy.Constant(5*time.Second))
	// Output:
	// 5s 5s 5s
}

func ExampleLinear() {
	printDelays(policy.MaxAttempts(6), policy.Linear(time.Second, 2*time.Second, 6*time.Second))
	// Output:
	// 1s 3s 5s 6s 6s
}

// The last delay of a schedule repeats.
func ExampleSchedule() {
	printDelays(policy.MaxAttempts(6), policy.Schedule(0, time.Second, 10*time.Second))
	// Output:
	// 0s 1s 10s 10s 10s
}

// n counts the attempts that have failed so far.
func ExampleBackoffFunc() {
	fibonacci := func(n int) time.Duration {
		a, b := 1, 1
		for range n - 1 {
			a, b = b, a+b
		}
		return time.Duration(a) * time.Second
	}
	printDelays(policy.MaxAttempts(7), policy.BackoffFunc(fibonacci))
	// Output:
	// 1s 1s 2s 3s 5s 8s
}

func ExampleBackoff_Delay() {
	b := policy.Backoff{Kind: policy.ExponentialBackoff, Initial: time.Second, Factor: 10, Max: time.Hour}
	fmt.Println(b.Delay(1), b.Delay(3), b.Delay(1_000_000))
	// Output:
	// 1s 1m40s 1h0m0s
}
