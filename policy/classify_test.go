package policy_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tenurehq/tenure/policy"
)

func TestPermanent(t *testing.T) {
	if policy.Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
	err := fmt.Errorf("charge: %w", policy.Permanent(errNotFound))
	if !policy.IsPermanent(err) {
		t.Error("IsPermanent(wrapped Permanent) = false")
	}
	if !errors.Is(err, errNotFound) {
		t.Error("errors.Is does not see through Permanent")
	}
	if errors.Unwrap(policy.Permanent(errNotFound)) != errNotFound {
		t.Error("Unwrap(Permanent(err)) != err")
	}
	if got := err.Error(); got != "charge: not found" {
		t.Errorf("message = %q, want it unchanged", got)
	}
	if policy.IsPermanent(errNotFound) || policy.IsPermanent(nil) {
		t.Error("IsPermanent of an unmarked error")
	}
	var rl *RateLimitError
	if !errors.As(policy.Permanent(&RateLimitError{}), &rl) {
		t.Error("errors.As does not see through Permanent")
	}
}

// TestDecide_ClassificationOrder checks Permanent > rules (first match) >
// RetryIf > budget.
func TestDecide_ClassificationOrder(t *testing.T) {
	onlyTransient := func(err error) bool { return errors.Is(err, errTransient) }
	base := []policy.Option{
		policy.MaxAttempts(3),
		policy.Exponential(time.Second, 2, time.Minute),
		policy.Jitter(policy.NoJitter),
		policy.OnType[*RateLimitError](policy.MaxAttempts(20), policy.Constant(30*time.Second), policy.MaxRetryAfter(0)),
		policy.On(errNotFound, policy.MaxAttempts(2)),
		policy.On(context.DeadlineExceeded, policy.RetryIf(func(error) bool { return false })),
		policy.RetryIf(onlyTransient),
	}
	rateLimited := &RateLimitError{Wait: time.Hour}
	tests := []struct {
		name      string
		err       error
		errors    int
		want      policy.Decision
		wantMatch int // index of the rule that decided, -1 for the base
	}{
		{"plain transient error, base policy", errTransient, 1, policy.Decision{Retry: true, Delay: time.Second, Source: policy.SourcePolicy}, -1},
		{"base budget is 3", errTransient, 3, policy.Decision{Reason: policy.RetriesExhausted}, -1},
		{"permanent wins over everything", policy.Permanent(errTransient), 1, policy.Decision{Reason: policy.NonRetryable}, -1},
		{"permanent wins over a rule", policy.Permanent(rateLimited), 1, policy.Decision{Reason: policy.NonRetryable}, -1},
		{"type rule gives its own policy", rateLimited, 1, policy.Decision{Retry: true, Delay: 30 * time.Second, Source: policy.SourcePolicy}, 0},
		{"type rule matches wrapped errors", fmt.Errorf("call: %w", rateLimited), 3, policy.Decision{Retry: true, Delay: 30 * time.Second, Source: policy.SourcePolicy}, 0},
		{"type rule budget is 20", rateLimited, 20, policy.Decision{Reason: policy.RetriesExhausted}, 0},
		{"rule keeps the base backoff", errNotFound, 1, policy.Decision{Retry: true, Delay: time.Second, Source: policy.SourcePolicy}, 1},
		{"rule budget is 2", errNotFound, 2, policy.Decision{Reason: policy.RetriesExhausted}, 1},
		{"first matching rule wins", fmt.Errorf("%w: %w", errNotFound, rateLimited), 1, policy.Decision{Retry: true, Delay: 30 * time.Second, Source: policy.SourcePolicy}, 0},
		{"rule overrides the predicate", context.DeadlineExceeded, 1, policy.Decision{Reason: policy.NonRetryable}, 2},
		{"matched errors skip the base predicate", errNotFound, 1, policy.Decision{Retry: true, Delay: time.Second, Source: policy.SourcePolicy}, 1},
		{"predicate rejects unmatched errors", errors.New("bad input"), 1, policy.Decision{Reason: policy.NonRetryable}, -1},
		{"predicate comes before the budget", errors.New("bad input"), 3, policy.Decision{Reason: policy.NonRetryable}, -1},
		{"nil error is retried by the base", nil, 1, policy.Decision{Retry: true, Delay: time.Second, Source: policy.SourcePolicy}, -1},
	}
	r, err := policy.New(base...)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := r.Decide(policy.History{Attempt: tt.errors, Errors: tt.errors, Err: tt.err})
			if d.Retry != tt.want.Retry || d.Delay != tt.want.Delay || d.Source != tt.want.Source || d.Reason != tt.want.Reason {
				t.Errorf("Decide = %v %+v, want %v", d, d, tt.want)
			}
			wantPolicy := r
			if tt.wantMatch >= 0 {
				wantPolicy = r.Rules[tt.wantMatch].Policy
			}
			if d.Effective.String() != wantPolicy.String() {
				t.Errorf("Effective = %v, want %v", d.Effective, wantPolicy)
			}
		})
	}
}

func TestOn_SameTargetReplacesRule(t *testing.T) {
	activity := []policy.Option{
		policy.On(errNotFound, policy.MaxAttempts(2)),
		policy.OnType[*RateLimitError](policy.MaxAttempts(20)),
	}
	call := []policy.Option{
		policy.OnType[*RateLimitError](policy.MaxAttempts(5)),
		policy.On(errNotFound, policy.MaxAttempts(1)),
		policy.On(errTransient, policy.MaxAttempts(9)),
	}
	r, err := policy.Resolve(activity, call)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rule := range r.Rules {
		got = append(got, fmt.Sprintf("%s:%d", rule.Match, rule.Policy.MaxAttempts))
	}
	want := "[not found:1 *policy_test.RateLimitError:5 connection reset:9]"
	if fmt.Sprint(got) != want {
		t.Errorf("rules = %v, want %s", got, want)
	}
}

// incomparableError cannot be compared with ==; On must not panic on it.
type incomparableError struct{ parts []string }

func (e incomparableError) Error() string { return fmt.Sprint(e.parts) }

func TestOn_IncomparableTarget(t *testing.T) {
	target := incomparableError{parts: []string{"a"}}
	r, err := policy.New(policy.On(target, policy.MaxAttempts(1)), policy.On(target, policy.MaxAttempts(2)))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rules) != 2 {
		t.Errorf("got %d rules, want 2 (incomparable targets are never replaced)", len(r.Rules))
	}
	// errors.Is never matches an incomparable target, so the base decides.
	if d := r.Decide(policy.History{Errors: 1, Err: target}); !d.Retry || d.Effective.MaxAttempts != policy.DefaultMaxAttempts {
		t.Errorf("Decide = %v by %v, want a retry by the base policy", d, d.Effective)
	}
}

// TestRule_OverMergedPolicy checks that a rule's options apply over the
// merged policy, whatever layer the rule came from.
func TestRule_OverMergedPolicy(t *testing.T) {
	activity := []policy.Option{policy.On(errNotFound, policy.MaxAttempts(7))}
	call := []policy.Option{policy.Constant(5 * time.Second), policy.Jitter(policy.NoJitter), policy.Deadline(time.Hour)}
	r, err := policy.Resolve(activity, call)
	if err != nil {
		t.Fatal(err)
	}
	p := r.Rules[0].Policy
	if p.MaxAttempts != 7 || p.Backoff.Kind != policy.ConstantBackoff || p.Deadline != time.Hour || p.Jitter != policy.NoJitter {
		t.Errorf("rule policy = %v, want 7 attempts over the call's constant backoff and deadline", p)
	}
}

// nilPointerError panics in Error when its pointer is nil.
type nilPointerError struct{ msg string }

func (e *nilPointerError) Error() string { return e.msg }

func TestOn_TargetWhoseErrorPanics(t *testing.T) {
	r, err := policy.New(policy.On((*nilPointerError)(nil), policy.MaxAttempts(1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Rules[0].Match; got != "*policy_test.nilPointerError" {
		t.Errorf("Match = %q, want the type name", got)
	}
}
