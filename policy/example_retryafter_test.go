package policy_test

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tenurehq/tenure/policy"
)

// A hint replaces the computed delay, clamped by MaxRetryAfter.
func ExampleWithRetryAfter() {
	r, _ := policy.New(policy.Jitter(policy.NoJitter), policy.MaxRetryAfter(time.Minute))
	for _, hint := range []time.Duration{10 * time.Second, time.Hour} {
		err := policy.WithRetryAfter(errors.New("503 Service Unavailable"), hint)
		fmt.Println(r.Decide(policy.History{Attempt: 1, Errors: 1, Err: err}))
	}
	// Output:
	// retry in 10s (retry-after)
	// retry in 1m0s (retry-after)
}

// MaxRetryAfter(0) ignores hints.
func ExampleMaxRetryAfter() {
	r, _ := policy.New(policy.Jitter(policy.NoJitter), policy.MaxRetryAfter(0))
	err := policy.WithRetryAfter(errors.New("429 Too Many Requests"), time.Minute)
	fmt.Println(r.Decide(policy.History{Attempt: 1, Errors: 1, Err: err}))
	// Output:
	// retry in 1s (policy)
}

func ExampleRetryAfterOf() {
	err := fmt.Errorf("fetch: %w", &RateLimitError{Wait: 7 * time.Second})
	fmt.Println(policy.RetryAfterOf(err))
	// Output:
	// 7s true
}

// Both forms of the header parse; garbage does not; huge values saturate.
func ExampleParseRetryAfter() {
	now := time.Date(2025, time.March, 1, 12, 0, 0, 0, time.UTC)
	for _, h := range []string{"120", "Sat, 01 Mar 2025 12:05:00 GMT", "-1", "soon", "99999999999999999999"} {
		d, ok := policy.ParseRetryAfter(h, now)
		fmt.Printf("%q: %s %t\n", h, d, ok)
	}
	// Output:
	// "120": 2m0s true
	// "Sat, 01 Mar 2025 12:05:00 GMT": 5m0s true
	// "-1": 0s false
	// "soon": 0s false
	// "99999999999999999999": 8760h0m0s true
}

// An HTTP client turns a 429 into an error that carries the server's hint.
func ExampleRetryAfterFromResponse() {
	resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"30"}}}
	err := fmt.Errorf("status %d", resp.StatusCode)
	if d, ok := policy.RetryAfterFromResponse(resp, time.Now()); ok {
		err = policy.WithRetryAfter(err, d)
	}
	r, _ := policy.New()
	fmt.Println(r.Decide(policy.History{Attempt: 1, Errors: 1, Err: err}))
	// Output:
	// retry in 30s (retry-after)
}
