package flow_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/flow"
)

// Payments is declared once, as a package variable, next to the activities
// that call it (activities.Activity.Calls).
var Payments = flow.New("payments",
	flow.Concurrency(20),
	flow.Rate(50, time.Second, 10),
	flow.Breaker(flow.BreakerPolicy{}))

// A downstream has a name, the key of its row in the database, and the
// limits its code declares. Without an option saying otherwise, it has the
// default retry budget.
func ExampleNew() {
	fmt.Println(Payments.Name())
	fmt.Println(Payments.Limits())
	// Output:
	// payments
	// concurrency 20, rate 50/1s burst 10, retries 20%+10/s, breaker 50% of 10 in 10s, open 5s
}

// Limits that make no sense stop the program where the downstream is
// declared, as a bad retry policy does: the panic's value wraps
// flow.ErrInvalid and names the limit.
func ExampleNew_invalid() {
	defer func() {
		err := recover().(error)
		fmt.Println(err)
		fmt.Println(errors.Is(err, flow.ErrInvalid))
	}()
	flow.New("mail", flow.Rate(100, 0, 1))
	// Output:
	// flow.New("mail"): rate interval (at least 1ms) = 0s: invalid downstream
	// true
}

// Concurrency limits the calls in progress at once, per key: a fifth call
// of one key waits, without an attempt, until one of four ends.
func ExampleConcurrency() {
	search := flow.New("search", flow.Concurrency(4))
	fmt.Println(search.Limits())
	// Output: concurrency 4, retries 20%+10/s
}

// Rate limits the starts, per key: here one a second with no burst, so
// that starts are at least a second apart. With a burst b, b calls may
// start at once, then one per interval/n; in any window of the interval's
// length, at most n+b start.
func ExampleRate() {
	sms := flow.New("sms", flow.Rate(1, time.Second, 1))
	fmt.Println(sms.Limits())
	// Output: rate 1/1s burst 1, retries 20%+10/s
}

// WithRetryBudget replaces the default retry budget: here retries may be
// 10 % of first attempts plus one a second, for the whole downstream. A
// retry beyond it waits, durably, instead of adding to the load of a
// downstream that is failing.
func ExampleWithRetryBudget() {
	ledger := flow.New("ledger", flow.WithRetryBudget(0.1, 1))
	fmt.Println(ledger.Limits())
	// Output: retries 10%+1/s
}

// NoRetryBudget leaves retries to the activities' policies alone. A
// downstream without any limit still counts its calls and can have its
// breaker opened by hand.
func ExampleNoRetryBudget() {
	export := flow.New("batch-export", flow.Concurrency(1), flow.NoRetryBudget())
	fmt.Println(export.Limits())
	fmt.Println(flow.New("audit-sink", flow.NoRetryBudget()).Limits())
	// Output:
	// concurrency 1
	// no limits
}

// Breaker gives a downstream a circuit breaker; the fields left zero take
// their defaults (ErrorRatio 0.5, MinCalls 10, Window 10 s, OpenFor 5 s).
func ExampleBreaker() {
	geo := flow.New("geocoder", flow.Breaker(flow.BreakerPolicy{ErrorRatio: 0.25, OpenFor: 30 * time.Second}))
	b := geo.Limits().Breaker
	fmt.Println(b.ErrorRatio, b.MinCalls, b.Window, b.OpenFor)
	fmt.Println(geo.Limits())
	// Output:
	// 0.25 10 10s 30s
	// retries 20%+10/s, breaker 25% of 10 in 10s, open 30s
}

// String is how tenure limits and logs describe limits, in one line.
func ExampleLimits_String() {
	fmt.Println(flow.Limits{})
	fmt.Println(flow.Limits{Concurrency: 2, Rate: &flow.RateLimit{N: 5, Per: time.Second, Burst: 1}})
	// Output:
	// no limits
	// concurrency 2, rate 5/1s burst 1
}

// Limits encode to JSON as the database's rows hold them: the keys that
// set_downstream takes in SQL, durations in milliseconds, a limit that is
// not set absent.
func ExampleLimits_MarshalJSON() {
	b, err := json.Marshal(Payments.Limits())
	fmt.Println(string(b), err)
	b, err = json.Marshal(flow.New("search", flow.Concurrency(4), flow.NoRetryBudget()).Limits())
	fmt.Println(string(b), err)
	// Output:
	// {"concurrency":20,"rate":50,"rate_interval_ms":1000,"burst":10,"retry_ratio":0.2,"retry_per_s":10,"breaker_error_ratio":0.5,"breaker_min_calls":10,"breaker_window_ms":10000,"breaker_open_ms":5000} <nil>
	// {"concurrency":4} <nil>
}

// A row's JSON (as audit_log's filter holds the limits before and after a
// change) decodes back to Limits. The breaker's settings have defaults in
// every row; without breaker_error_ratio there is no breaker.
func ExampleLimits_UnmarshalJSON() {
	var l flow.Limits
	err := json.Unmarshal([]byte(`{"concurrency": 5, "breaker_min_calls": 10, "breaker_window_ms": 10000, "breaker_open_ms": 5000}`), &l)
	fmt.Println(l, err)
	err = json.Unmarshal([]byte(`{"rate": 10, "rate_interval_ms": 60000, "burst": 2, "breaker_error_ratio": 0.5}`), &l)
	fmt.Println(l, err)
	// Output:
	// concurrency 5 <nil>
	// rate 10/1m0s burst 2, breaker 50% of 10 in 10s, open 5s <nil>
}

// Validate checks limits built by hand (New checks those of its options):
// the error names the first limit that makes no sense.
func ExampleLimits_Validate() {
	fmt.Println(flow.Limits{Concurrency: 3}.Validate())
	fmt.Println(flow.Limits{Concurrency: -1}.Validate())
	// Output:
	// <nil>
	// concurrency = -1: invalid downstream
}
