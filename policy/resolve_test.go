package policy_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tenurehq/tenure/policy"
)

func TestDefault(t *testing.T) {
	d := policy.Default()
	if err := d.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	want := policy.Backoff{Kind: policy.ExponentialBackoff, Initial: policy.DefaultInitialInterval, Factor: policy.DefaultBackoffFactor, Max: policy.DefaultMaxInterval}
	if d.MaxAttempts != policy.DefaultMaxAttempts || d.MaxRescues != policy.DefaultMaxRescues || d.AtMostOnce ||
		d.Backoff.Kind != want.Kind || d.Backoff.Initial != want.Initial || d.Backoff.Factor != want.Factor || d.Backoff.Max != want.Max ||
		d.Jitter != policy.DefaultJitter || d.MaxRetryAfter != policy.DefaultMaxRetryAfter ||
		d.AttemptTimeout != policy.DefaultAttemptTimeout || d.Deadline != policy.DefaultDeadline || len(d.Rules) != 0 {
		t.Errorf("Default() = %v, want the Default* constants", d)
	}
	n, err := policy.New()
	if err != nil || n.String() != d.String() {
		t.Errorf("New() = %v, %v; want Default()", n, err)
	}
}

// TestResolve_MergeOrder checks call option > activity default > worker
// default > package default, field by field.
func TestResolve_MergeOrder(t *testing.T) {
	worker := []policy.Option{policy.MaxAttempts(10), policy.MaxRescues(7), policy.AttemptTimeout(time.Minute), policy.Jitter(policy.EqualJitter)}
	activity := []policy.Option{policy.MaxAttempts(5), policy.Constant(time.Second), policy.Jitter(policy.NoJitter)}
	call := []policy.Option{policy.MaxAttempts(2)}
	tests := []struct {
		name   string
		layers [][]policy.Option
		check  func(policy.Retry) bool
		want   string
	}{
		{"package default", nil, func(r policy.Retry) bool { return r.MaxAttempts == policy.DefaultMaxAttempts }, "max_attempts=3"},
		{"worker over package", [][]policy.Option{worker}, func(r policy.Retry) bool { return r.MaxAttempts == 10 && r.Backoff.Kind == policy.ExponentialBackoff }, "worker's 10, default backoff"},
		{"activity over worker", [][]policy.Option{worker, activity}, func(r policy.Retry) bool { return r.MaxAttempts == 5 && r.Jitter == policy.NoJitter }, "activity's 5 and no jitter"},
		{"call over activity", [][]policy.Option{worker, activity, call}, func(r policy.Retry) bool { return r.MaxAttempts == 2 }, "call's 2"},
		{"unset fields fall through", [][]policy.Option{worker, activity, call}, func(r policy.Retry) bool {
			return r.MaxRescues == 7 && r.AttemptTimeout == time.Minute && r.Backoff.Kind == policy.ConstantBackoff && r.MaxRetryAfter == policy.DefaultMaxRetryAfter
		}, "rescues and timeout from worker, backoff from activity, max_retry_after from package"},
		{"later option wins within a layer", [][]policy.Option{{policy.MaxAttempts(4), policy.MaxAttempts(6)}}, func(r policy.Retry) bool { return r.MaxAttempts == 6 }, "6"},
		{"empty layers change nothing", [][]policy.Option{{}, nil, {}}, func(r policy.Retry) bool { return r.String() == policy.Default().String() }, "defaults"},
		{"nil option is ignored", [][]policy.Option{{nil, policy.MaxAttempts(4)}}, func(r policy.Retry) bool { return r.MaxAttempts == 4 }, "4"},
		{"later backoff replaces the whole shape", [][]policy.Option{{policy.Linear(time.Second, time.Second, time.Minute)}, {policy.Schedule(time.Second)}}, func(r policy.Retry) bool {
			return r.Backoff.Kind == policy.ScheduleBackoff && r.Backoff.Step == 0 && r.Backoff.Max == 0
		}, "schedule without linear's fields"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := policy.Resolve(tt.layers...)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(r) {
				t.Errorf("Resolve = %v, want %s", r, tt.want)
			}
		})
	}
}

func TestResolve_DoesNotAliasLayers(t *testing.T) {
	activity := []policy.Option{policy.On(errNotFound, policy.MaxAttempts(1))}
	a, err := policy.Resolve(activity, []policy.Option{policy.On(errTransient, policy.MaxAttempts(9))})
	if err != nil {
		t.Fatal(err)
	}
	b, err := policy.Resolve(activity)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Rules) != 2 || len(b.Rules) != 1 {
		t.Errorf("rules: %d and %d, want 2 and 1", len(a.Rules), len(b.Rules))
	}
}

// TestResolve_AtMostOnce covers the AtMostOnce/MaxRescues conflict: within a
// layer the order of options does not matter; across layers an explicit
// MaxRescues > 0 above AtMostOnce is an error, one below it is overridden.
func TestResolve_AtMostOnce(t *testing.T) {
	tests := []struct {
		name    string
		layers  [][]policy.Option
		wantErr bool
	}{
		{"alone forces 0 rescues", [][]policy.Option{{policy.AtMostOnce()}}, false},
		{"with explicit 0", [][]policy.Option{{policy.MaxRescues(0), policy.AtMostOnce()}}, false},
		{"rescues then at-most-once", [][]policy.Option{{policy.MaxRescues(2), policy.AtMostOnce()}}, true},
		{"at-most-once then rescues", [][]policy.Option{{policy.AtMostOnce(), policy.MaxRescues(2)}}, true},
		{"worker rescues under activity at-most-once", [][]policy.Option{{policy.MaxRescues(5)}, {policy.AtMostOnce()}}, false},
		{"call rescues over activity at-most-once", [][]policy.Option{{policy.AtMostOnce()}, {policy.MaxRescues(2)}}, true},
		{"call explicit 0 over activity at-most-once", [][]policy.Option{{policy.AtMostOnce()}, {policy.MaxRescues(0)}}, false},
		{"conflict in a lower layer is still reported", [][]policy.Option{{policy.AtMostOnce(), policy.MaxRescues(1)}, {policy.MaxAttempts(2)}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := policy.Resolve(tt.layers...)
			if tt.wantErr {
				var ve *policy.ValidationError
				if !errors.As(err, &ve) || ve.Field != "max_rescues" {
					t.Fatalf("Resolve error = %v, want a *ValidationError on max_rescues", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !r.AtMostOnce || r.MaxRescues != 0 || r.DecideRescue(1) {
				t.Errorf("Resolve = %v, want at_most_once with 0 rescues", r)
			}
		})
	}
}
