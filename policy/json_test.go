package policy_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/policy"
)

func TestJSON_RoundTrip(t *testing.T) {
	tests := []struct {
		name string
		opts []policy.Option
	}{
		{"defaults", nil},
		{"exponential", []policy.Option{policy.Exponential(250*time.Millisecond, 1.5, 90*time.Second), policy.Jitter(policy.DecorrelatedJitter)}},
		{"constant", []policy.Option{policy.Constant(0), policy.Jitter(policy.NoJitter), policy.MaxRetryAfter(0)}},
		{"linear", []policy.Option{policy.Linear(0, time.Second, time.Minute), policy.Jitter(policy.EqualJitter)}},
		{"schedule", []policy.Option{policy.Schedule(time.Second, 10*time.Second, time.Minute)}},
		{"budgets and time", []policy.Option{policy.MaxAttempts(9), policy.AtMostOnce(), policy.AttemptTimeout(3 * time.Second), policy.Deadline(time.Hour)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := policy.New(tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			data, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			var back policy.Retry
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatalf("Unmarshal(%s): %v", data, err)
			}
			if err := back.Validate(); err != nil {
				t.Errorf("restored policy invalid: %v", err)
			}
			if back.String() != r.String() {
				t.Errorf("round trip of %s\ngave %v\nwant %v", data, back, r)
			}
			again, _ := json.Marshal(back)
			if string(again) != string(data) {
				t.Errorf("second encoding differs:\n%s\n%s", again, data)
			}
		})
	}
}

func TestJSON_Format(t *testing.T) {
	r, err := policy.New(policy.MaxAttempts(3), policy.On(errNotFound, policy.Constant(time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"max_attempts":3,"max_rescues":3,"at_most_once":false,` +
		`"backoff":{"kind":"exponential","initial":"1s","factor":2,"max":"1m0s"},` +
		`"jitter":"full","max_retry_after":"1h0m0s","attempt_timeout":"0s","deadline":"0s",` +
		`"rules":[{"match":"not found","policy":{"max_attempts":3,"max_rescues":3,"at_most_once":false,` +
		`"backoff":{"kind":"constant","delay":"1s"},` +
		`"jitter":"full","max_retry_after":"1h0m0s","attempt_timeout":"0s","deadline":"0s"}}]}`
	if string(data) != want {
		t.Errorf("Marshal =\n%s\nwant\n%s", data, want)
	}
}

// TestJSON_Functions checks that functions are written as markers and come
// back as policies that explain themselves but do not validate.
func TestJSON_Functions(t *testing.T) {
	tests := []struct {
		name   string
		opt    policy.Option
		marker string
		field  string
	}{
		{"backoff func", policy.BackoffFunc(func(int) time.Duration { return time.Second }), `"backoff":{"kind":"func"}`, "backoff.func"},
		{"retry predicate", policy.RetryIf(func(error) bool { return true }), `"retry_if":"func"`, "retry_if"},
		{"rule matcher", policy.OnType[*RateLimitError](policy.MaxAttempts(20)), `"match":"*policy_test.RateLimitError"`, "rules[0].match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := policy.New(tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			data, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), tt.marker) {
				t.Errorf("Marshal = %s, want it to contain %s", data, tt.marker)
			}
			var back policy.Retry
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			var ve *policy.ValidationError
			if err := back.Validate(); !errors.As(err, &ve) || ve.Field != tt.field || !strings.Contains(ve.Reason, "JSON") {
				t.Errorf("Validate = %v, want a *ValidationError on %s saying it cannot be restored from JSON", err, tt.field)
			}
			_ = policy.Explain(back).String()
			_ = back.Decide(policy.History{Attempt: 1, Errors: 1, Err: errTransient})
		})
	}
}

func TestJSON_Unmarshal(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		check   func(policy.Retry) bool
		wantErr bool
	}{
		{"missing fields keep defaults", `{"max_attempts":7}`, func(r policy.Retry) bool {
			return r.MaxAttempts == 7 && r.MaxRescues == policy.DefaultMaxRescues && r.Backoff.Initial == policy.DefaultInitialInterval
		}, false},
		{"zero durations are kept", `{"max_retry_after":"0s"}`, func(r policy.Retry) bool { return r.MaxRetryAfter == 0 }, false},
		{"invalid values load, Validate reports them", `{"max_attempts":0}`, func(r policy.Retry) bool { return r.Validate() != nil }, false},
		{"bad duration", `{"deadline":"soon"}`, nil, true},
		{"numeric duration", `{"deadline":5}`, nil, true},
		{"unknown backoff kind", `{"backoff":{"kind":"fibonacci"}}`, nil, true},
		{"unknown jitter", `{"jitter":"some"}`, nil, true},
		{"not an object", `[1]`, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r policy.Retry
			err := json.Unmarshal([]byte(tt.in), &r)
			if tt.wantErr {
				if err == nil {
					t.Errorf("Unmarshal(%s) = nil error, want one", tt.in)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(r) {
				t.Errorf("Unmarshal(%s) = %v", tt.in, r)
			}
		})
	}
}

func TestJitterKind_Text(t *testing.T) {
	for k := policy.NoJitter; k <= policy.DecorrelatedJitter; k++ {
		text, err := k.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back policy.JitterKind
		if err := back.UnmarshalText(text); err != nil || back != k {
			t.Errorf("%s: round trip gave %v, %v", k, back, err)
		}
	}
	if _, err := policy.JitterKind(9).MarshalText(); err == nil {
		t.Error("MarshalText of an unknown kind: no error")
	}
}
