package policy_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/policy"
)

func ExampleRetry_MarshalJSON() {
	r, _ := policy.New(policy.MaxAttempts(5), policy.Schedule(time.Second, 30*time.Second), policy.Jitter(policy.NoJitter))
	data, _ := json.Marshal(r)
	fmt.Println(string(data))
	// Output:
	// {"max_attempts":5,"max_rescues":3,"at_most_once":false,"backoff":{"kind":"schedule","delays":["1s","30s"]},"jitter":"none","max_retry_after":"1h0m0s","attempt_timeout":"0s","deadline":"0s"}
}

// Functions are stored by kind only: a restored function policy can be
// explained but not validated.
func ExampleRetry_UnmarshalJSON() {
	var r policy.Retry
	_ = json.Unmarshal([]byte(`{"max_attempts":4,"backoff":{"kind":"linear","initial":"1s","step":"1s","max":"2s"},"jitter":"none"}`), &r)
	fmt.Println(r, r.Validate())

	_ = json.Unmarshal([]byte(`{"backoff":{"kind":"func"}}`), &r)
	fmt.Println(r.Validate())
	// Output:
	// max_attempts=4 max_rescues=3 backoff=linear(1s, +1s, max 2s) jitter=none max_retry_after=1h0m0s <nil>
	// policy: backoff.func = func: a function cannot be restored from JSON; rebuild the policy with BackoffFunc
}

func ExampleJitterKind_MarshalText() {
	data, _ := json.Marshal(map[string]policy.JitterKind{"jitter": policy.DecorrelatedJitter})
	fmt.Println(string(data))
	// Output:
	// {"jitter":"decorrelated"}
}
