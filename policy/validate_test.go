package policy_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/policy"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		opts  []policy.Option
		field string // "" for a valid policy
	}{
		{"defaults", nil, ""},
		{"one attempt", []policy.Option{policy.MaxAttempts(1)}, ""},
		{"zero attempts", []policy.Option{policy.MaxAttempts(0)}, "max_attempts"},
		{"negative attempts", []policy.Option{policy.MaxAttempts(-1)}, "max_attempts"},
		{"zero rescues", []policy.Option{policy.MaxRescues(0)}, ""},
		{"negative rescues", []policy.Option{policy.MaxRescues(-1)}, "max_rescues"},
		{"at-most-once with rescues", []policy.Option{policy.AtMostOnce(), policy.MaxRescues(1)}, "max_rescues"},
		{"exponential zero initial", []policy.Option{policy.Exponential(0, 2, time.Second)}, "backoff.initial"},
		{"exponential negative initial", []policy.Option{policy.Exponential(-time.Second, 2, time.Second)}, "backoff.initial"},
		{"exponential factor below 1", []policy.Option{policy.Exponential(time.Second, 0.5, time.Minute)}, "backoff.factor"},
		{"exponential factor NaN", []policy.Option{policy.Exponential(time.Second, math.NaN(), time.Minute)}, "backoff.factor"},
		{"exponential factor infinite", []policy.Option{policy.Exponential(time.Second, math.Inf(1), time.Minute)}, "backoff.factor"},
		{"exponential max below initial", []policy.Option{policy.Exponential(time.Minute, 2, time.Second)}, "backoff.max"},
		{"exponential factor 1", []policy.Option{policy.Exponential(time.Second, 1, time.Second)}, ""},
		{"constant zero", []policy.Option{policy.Constant(0)}, ""},
		{"constant negative", []policy.Option{policy.Constant(-time.Second)}, "backoff.delay"},
		{"linear zero initial", []policy.Option{policy.Linear(0, time.Second, time.Minute)}, ""},
		{"linear negative initial", []policy.Option{policy.Linear(-time.Second, time.Second, time.Minute)}, "backoff.initial"},
		{"linear zero step", []policy.Option{policy.Linear(time.Second, 0, time.Minute)}, "backoff.step"},
		{"linear negative step", []policy.Option{policy.Linear(time.Second, -time.Second, time.Minute)}, "backoff.step"},
		{"linear zero max", []policy.Option{policy.Linear(0, time.Second, 0)}, "backoff.max"},
		{"linear max below initial", []policy.Option{policy.Linear(time.Minute, time.Second, time.Second)}, "backoff.max"},
		{"empty schedule", []policy.Option{policy.Schedule()}, "backoff.delays"},
		{"negative scheduled delay", []policy.Option{policy.Schedule(time.Second, -time.Second)}, "backoff.delays[1]"},
		{"nil backoff func", []policy.Option{policy.BackoffFunc(nil)}, "backoff.func"},
		{"unknown jitter", []policy.Option{policy.Jitter(42)}, "jitter"},
		{"negative jitter", []policy.Option{policy.Jitter(-1)}, "jitter"},
		{"decorrelated with func", []policy.Option{policy.BackoffFunc(func(int) time.Duration { return 0 }), policy.Jitter(policy.DecorrelatedJitter)}, "jitter"},
		{"decorrelated from zero", []policy.Option{policy.Schedule(0, time.Second), policy.Jitter(policy.DecorrelatedJitter)}, "jitter"},
		{"decorrelated linear", []policy.Option{policy.Linear(time.Second, time.Second, time.Minute), policy.Jitter(policy.DecorrelatedJitter)}, ""},
		{"zero max retry-after ignores hints", []policy.Option{policy.MaxRetryAfter(0)}, ""},
		{"negative max retry-after", []policy.Option{policy.MaxRetryAfter(-time.Second)}, "max_retry_after"},
		{"negative attempt timeout", []policy.Option{policy.AttemptTimeout(-time.Second)}, "attempt_timeout"},
		{"negative deadline", []policy.Option{policy.Deadline(-time.Second)}, "deadline"},
		{"nil retry predicate", []policy.Option{policy.RetryIf(nil)}, "retry_if"},
		{"nil predicate replaced", []policy.Option{policy.RetryIf(nil), policy.RetryIf(func(error) bool { return true })}, ""},
		{"rule with nil target", []policy.Option{policy.On(nil)}, "rules[0].match"},
		{"rule policy invalid", []policy.Option{policy.On(errNotFound), policy.OnType[*RateLimitError](policy.MaxAttempts(0))}, "rules[1].max_attempts"},
		{"rule backoff invalid", []policy.Option{policy.On(errNotFound, policy.Constant(-1))}, "rules[0].backoff.delay"},
		{"rule invalid through the base", []policy.Option{policy.On(errNotFound), policy.Deadline(-1)}, "deadline"},
		{"rule with rules", []policy.Option{policy.On(errNotFound, policy.On(errTransient))}, "rules[0].rules"},
		{"rule with rescues", []policy.Option{policy.On(errNotFound, policy.MaxRescues(9))}, "rules[0].max_rescues"},
		{"rule with at-most-once", []policy.Option{policy.On(errNotFound, policy.AtMostOnce())}, "rules[0].at_most_once"},
		{"rule with explicit rescues under at-most-once", []policy.Option{policy.AtMostOnce(), policy.On(errNotFound, policy.MaxRescues(2))}, "rules[0].max_rescues"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := policy.New(tt.opts...)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("New = %v, want valid", err)
				}
				if err := r.Validate(); err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			var ve *policy.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("New error = %v (%T), want *policy.ValidationError", err, err)
			}
			if ve.Field != tt.field {
				t.Errorf("Field = %q, want %q (%v)", ve.Field, tt.field, err)
			}
			if !strings.Contains(err.Error(), tt.field) || ve.Reason == "" {
				t.Errorf("Error() = %q, want it to name %q and give a reason", err, tt.field)
			}
			// Validate on the returned policy reports the same problem.
			if err2 := r.Validate(); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("Validate = %v, want %v", err2, err)
			}
		})
	}
}

func TestValidate_Literals(t *testing.T) {
	tests := []struct {
		name  string
		r     policy.Retry
		field string
	}{
		{"zero value", policy.Retry{}, "max_attempts"},
		{"no backoff kind", policy.Retry{MaxAttempts: 1}, "backoff.kind"},
		{"at-most-once with rescues", policy.Retry{MaxAttempts: 1, MaxRescues: 2, AtMostOnce: true, Backoff: policy.Backoff{Kind: policy.ConstantBackoff}}, "max_rescues"},
		{"rule without matcher", policy.Retry{MaxAttempts: 1, Backoff: policy.Backoff{Kind: policy.ConstantBackoff}, Rules: []policy.Rule{{Match: "x"}}}, "rules[0].match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ve *policy.ValidationError
			if err := tt.r.Validate(); !errors.As(err, &ve) || ve.Field != tt.field {
				t.Errorf("Validate = %v, want a *ValidationError on %s", err, tt.field)
			}
		})
	}
}

func TestValidationError_Error(t *testing.T) {
	_, err := policy.New(policy.MaxAttempts(0))
	if got, want := err.Error(), "policy: max_attempts = 0: must be at least 1"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
