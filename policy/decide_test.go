package policy_test

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/policy"
)

func TestDecide(t *testing.T) {
	mustNew := func(opts ...policy.Option) policy.Retry {
		t.Helper()
		r, err := policy.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	plain := mustNew(policy.MaxAttempts(4), policy.Exponential(time.Second, 2, time.Minute), policy.Jitter(policy.NoJitter))
	hinted := policy.WithRetryAfter(errTransient, 10*time.Second)
	tests := []struct {
		name string
		r    policy.Retry
		h    policy.History
		want policy.Decision
	}{
		{"first error", plain, policy.History{Attempt: 1, Errors: 1, Err: errTransient},
			policy.Decision{Retry: true, Delay: time.Second, Source: policy.SourcePolicy}},
		{"third error", plain, policy.History{Attempt: 3, Errors: 3, Err: errTransient},
			policy.Decision{Retry: true, Delay: 4 * time.Second, Source: policy.SourcePolicy}},
		{"budget spent", plain, policy.History{Attempt: 4, Errors: 4, Err: errTransient},
			policy.Decision{Reason: policy.RetriesExhausted}},
		{"rescued attempts do not spend retries", plain, policy.History{Attempt: 6, Errors: 3, Rescues: 3, Err: errTransient},
			policy.Decision{Retry: true, Delay: 4 * time.Second, Source: policy.SourcePolicy}},
		{"permanent", plain, policy.History{Attempt: 1, Errors: 1, Err: policy.Permanent(errTransient)},
			policy.Decision{Reason: policy.NonRetryable}},
		{"retry-after replaces the delay", plain, policy.History{Attempt: 1, Errors: 1, Err: hinted},
			policy.Decision{Retry: true, Delay: 10 * time.Second, Source: policy.SourceRetryAfter}},
		{"retry-after may be shorter", plain, policy.History{Attempt: 3, Errors: 3, Err: policy.WithRetryAfter(errTransient, 0)},
			policy.Decision{Retry: true, Delay: 0, Source: policy.SourceRetryAfter}},
		{"retry-after clamped by MaxRetryAfter", mustNew(policy.Jitter(policy.NoJitter), policy.MaxRetryAfter(3*time.Second)), policy.History{Attempt: 1, Errors: 1, Err: hinted},
			policy.Decision{Retry: true, Delay: 3 * time.Second, Source: policy.SourceRetryAfter}},
		{"retry-after ignored with MaxRetryAfter 0", mustNew(policy.Jitter(policy.NoJitter), policy.MaxRetryAfter(0)), policy.History{Attempt: 1, Errors: 1, Err: hinted},
			policy.Decision{Retry: true, Delay: time.Second, Source: policy.SourcePolicy}},
		{"retry-after does not extend the budget", plain, policy.History{Attempt: 4, Errors: 4, Err: hinted},
			policy.Decision{Reason: policy.RetriesExhausted}},
		{"deadline leaves room", mustNew(policy.Jitter(policy.NoJitter), policy.Deadline(time.Minute)), policy.History{Attempt: 1, Errors: 1, Elapsed: 58 * time.Second, Err: errTransient},
			policy.Decision{Retry: true, Delay: time.Second, Source: policy.SourcePolicy, Timeout: time.Second}},
		{"next start exactly at the deadline", mustNew(policy.Jitter(policy.NoJitter), policy.Deadline(time.Minute)), policy.History{Attempt: 1, Errors: 1, Elapsed: 59 * time.Second, Err: errTransient},
			policy.Decision{Delay: time.Second, Source: policy.SourcePolicy, Reason: policy.DeadlineExceeded}},
		{"already past the deadline", mustNew(policy.Jitter(policy.NoJitter), policy.Constant(0), policy.Deadline(time.Minute)), policy.History{Attempt: 1, Errors: 1, Elapsed: 2 * time.Minute, Err: errTransient},
			policy.Decision{Delay: 0, Source: policy.SourcePolicy, Reason: policy.DeadlineExceeded}},
		{"retry-after beyond the deadline gives up", mustNew(policy.Deadline(5 * time.Second)), policy.History{Attempt: 1, Errors: 1, Err: hinted},
			policy.Decision{Delay: 10 * time.Second, Source: policy.SourceRetryAfter, Reason: policy.DeadlineExceeded}},
		{"budget is checked before the deadline", mustNew(policy.MaxAttempts(1), policy.Deadline(time.Second)), policy.History{Attempt: 1, Errors: 1, Elapsed: time.Hour, Err: errTransient},
			policy.Decision{Reason: policy.RetriesExhausted}},
		{"attempt timeout passed on", mustNew(policy.Jitter(policy.NoJitter), policy.AttemptTimeout(10*time.Second)), policy.History{Attempt: 1, Errors: 1, Err: errTransient},
			policy.Decision{Retry: true, Delay: time.Second, Source: policy.SourcePolicy, Timeout: 10 * time.Second}},
		{"attempt timeout cut by the deadline", mustNew(policy.Jitter(policy.NoJitter), policy.AttemptTimeout(10*time.Second), policy.Deadline(time.Minute)), policy.History{Attempt: 1, Errors: 1, Elapsed: 55 * time.Second, Err: errTransient},
			policy.Decision{Retry: true, Delay: time.Second, Source: policy.SourcePolicy, Timeout: 4 * time.Second}},
		{"full jitter with a seed", mustNew(policy.Jitter(policy.FullJitter)), policy.History{Attempt: 2, Errors: 2, Err: errTransient, Seed: policy.Seed("run-1", 1, 2)},
			policy.Decision{Retry: true, Delay: 802994768, Source: policy.SourceJitter}},
		{"decorrelated jitter grows from LastDelay", mustNew(policy.Jitter(policy.DecorrelatedJitter)), policy.History{Attempt: 2, Errors: 2, LastDelay: 2 * time.Second, Err: errTransient, Seed: 7},
			policy.Decision{Retry: true, Delay: 3553788316, Source: policy.SourceJitter}},
		{"no retry with one attempt", mustNew(policy.MaxAttempts(1)), policy.History{Attempt: 1, Errors: 1, Err: errTransient},
			policy.Decision{Reason: policy.RetriesExhausted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.r.Decide(tt.h)
			d.Effective = policy.Retry{}
			if d.Retry != tt.want.Retry || d.Delay != tt.want.Delay || d.Source != tt.want.Source || d.Timeout != tt.want.Timeout || d.Reason != tt.want.Reason {
				t.Errorf("Decide = %+v\nwant     %+v", d, tt.want)
			}
			if again := tt.r.Decide(tt.h); again.Delay != d.Delay || again.Retry != d.Retry {
				t.Errorf("Decide is not deterministic: %v then %v", d, again)
			}
		})
	}
}

func TestDecide_InvalidPolicyDoesNotPanic(t *testing.T) {
	for _, r := range []policy.Retry{
		{},
		{MaxAttempts: 5, Backoff: policy.Backoff{Kind: policy.FuncBackoff}, Jitter: policy.DecorrelatedJitter},
		{MaxAttempts: 5, Backoff: policy.Backoff{Kind: policy.ScheduleBackoff}, Jitter: policy.EqualJitter, Deadline: -1},
		{MaxAttempts: 5, Backoff: policy.Backoff{Kind: policy.ExponentialBackoff, Initial: -5, Factor: -3, Max: -1}, Jitter: 99},
		{MaxAttempts: 5, Backoff: policy.Backoff{Kind: policy.LinearBackoff, Initial: 10, Step: -1, Max: 1}, Jitter: policy.FullJitter},
	} {
		d := r.Decide(policy.History{Attempt: 1, Errors: 1, Err: errTransient, Elapsed: -time.Hour})
		if d.Delay < 0 {
			t.Errorf("%v: negative delay %s", r, d.Delay)
		}
		_ = policy.Explain(r).String()
	}
}

func TestDecideRescue(t *testing.T) {
	tests := []struct {
		name    string
		opts    []policy.Option
		rescues int
		want    bool
	}{
		{"default allows 3", nil, 3, true},
		{"default stops at 4", nil, 4, false},
		{"no rescue budget", []policy.Option{policy.MaxRescues(0)}, 1, false},
		{"at most once never reruns", []policy.Option{policy.AtMostOnce()}, 1, false},
		{"retries do not spend rescues", []policy.Option{policy.MaxRescues(1), policy.MaxAttempts(1)}, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := policy.New(tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.DecideRescue(tt.rescues); got != tt.want {
				t.Errorf("DecideRescue(%d) = %t, want %t", tt.rescues, got, tt.want)
			}
		})
	}
	if (policy.Retry{AtMostOnce: true, MaxRescues: 3}).DecideRescue(1) {
		t.Error("an AtMostOnce literal with rescues reruns a lost attempt")
	}
}

func TestTimeoutAt(t *testing.T) {
	tests := []struct {
		name              string
		timeout, deadline time.Duration
		start             time.Duration
		want              time.Duration
		ok                bool
	}{
		{"no limits", 0, 0, time.Hour, 0, true},
		{"attempt timeout only", 5 * time.Second, 0, time.Hour, 5 * time.Second, true},
		{"deadline only", 0, time.Minute, 20 * time.Second, 40 * time.Second, true},
		{"timeout within deadline", 5 * time.Second, time.Minute, 0, 5 * time.Second, true},
		{"timeout cut by deadline", 5 * time.Second, time.Minute, 58 * time.Second, 2 * time.Second, true},
		{"at the deadline", 5 * time.Second, time.Minute, time.Minute, 0, false},
		{"after the deadline", 0, time.Minute, time.Hour, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := policy.Retry{AttemptTimeout: tt.timeout, Deadline: tt.deadline}
			got, ok := r.TimeoutAt(tt.start)
			if got != tt.want || ok != tt.ok {
				t.Errorf("TimeoutAt(%s) = %s, %t; want %s, %t", tt.start, got, ok, tt.want, tt.ok)
			}
		})
	}
}
