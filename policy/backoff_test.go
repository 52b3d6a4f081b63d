package policy_test

import (
	"math"
	"testing"
	"time"

	"github.com/tenurehq/tenure/policy"
)

func TestBackoffDelay(t *testing.T) {
	const maxDuration = time.Duration(math.MaxInt64)
	tests := []struct {
		name string
		b    policy.Backoff
		n    int
		want time.Duration
	}{
		{"exponential first", exp(time.Second, 2, time.Minute), 1, time.Second},
		{"exponential n below 1 counts as 1", exp(time.Second, 2, time.Minute), 0, time.Second},
		{"exponential second", exp(time.Second, 2, time.Minute), 2, 2 * time.Second},
		{"exponential sixth", exp(time.Second, 2, time.Minute), 6, 32 * time.Second},
		{"exponential capped", exp(time.Second, 2, time.Minute), 7, time.Minute},
		{"exponential fractional factor", exp(100*time.Millisecond, 1.5, time.Minute), 3, 225 * time.Millisecond},
		{"exponential factor 1", exp(time.Second, 1, time.Minute), 50, time.Second},
		{"exponential huge n saturates at max", exp(time.Second, 2, time.Hour), math.MaxInt, time.Hour},
		{"exponential huge factor saturates at max", exp(time.Second, 1e300, maxDuration), 3, maxDuration},
		{"exponential max duration never overflows", exp(time.Hour, 10, maxDuration), 40, maxDuration},
		{"constant", policy.Backoff{Kind: policy.ConstantBackoff, Initial: 5 * time.Second}, 9, 5 * time.Second},
		{"constant zero", policy.Backoff{Kind: policy.ConstantBackoff}, 1, 0},
		{"linear first", lin(time.Second, 2*time.Second, 10*time.Second), 1, time.Second},
		{"linear third", lin(time.Second, 2*time.Second, 10*time.Second), 3, 5 * time.Second},
		{"linear capped", lin(time.Second, 2*time.Second, 10*time.Second), 6, 10 * time.Second},
		{"linear from zero", lin(0, time.Second, 10*time.Second), 1, 0},
		{"linear huge n saturates at max", lin(time.Second, time.Hour, maxDuration), math.MaxInt, maxDuration},
		{"schedule first", sched(time.Second, 5*time.Second, 30*time.Second), 1, time.Second},
		{"schedule third", sched(time.Second, 5*time.Second, 30*time.Second), 3, 30 * time.Second},
		{"schedule last repeats", sched(time.Second, 5*time.Second, 30*time.Second), 100, 30 * time.Second},
		{"schedule empty", sched(), 1, 0},
		{"func", fn(func(n int) time.Duration { return time.Duration(n) * time.Millisecond }), 7, 7 * time.Millisecond},
		{"func negative counts as 0", fn(func(int) time.Duration { return -time.Second }), 1, 0},
		{"func nil gives 0", policy.Backoff{Kind: policy.FuncBackoff}, 1, 0},
		{"no kind gives 0", policy.Backoff{}, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.b.Delay(tt.n); got != tt.want {
				t.Errorf("Delay(%d) = %s, want %s", tt.n, got, tt.want)
			}
		})
	}
}

func TestBackoffOptions(t *testing.T) {
	tests := []struct {
		name string
		opt  policy.Option
		want []time.Duration // delays after 1, 2, … failed attempts
	}{
		{"Exponential", policy.Exponential(time.Second, 3, 20*time.Second), []time.Duration{time.Second, 3 * time.Second, 9 * time.Second, 20 * time.Second, 20 * time.Second}},
		{"Constant", policy.Constant(2 * time.Second), []time.Duration{2 * time.Second, 2 * time.Second, 2 * time.Second}},
		{"Linear", policy.Linear(time.Second, time.Second, 3*time.Second), []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second}},
		{"Schedule", policy.Schedule(0, time.Second, time.Minute), []time.Duration{0, time.Second, time.Minute, time.Minute}},
		{"BackoffFunc", policy.BackoffFunc(func(n int) time.Duration { return time.Duration(n*n) * time.Second }), []time.Duration{time.Second, 4 * time.Second, 9 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policy.New(tt.opt, policy.Jitter(policy.NoJitter), policy.MaxAttempts(len(tt.want)+1))
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range tt.want {
				if got := p.Backoff.Delay(i + 1); got != want {
					t.Errorf("Delay(%d) = %s, want %s", i+1, got, want)
				}
				d := p.Decide(policy.History{Attempt: i + 1, Errors: i + 1, Err: errTransient})
				if !d.Retry || d.Delay != want || d.Source != policy.SourcePolicy {
					t.Errorf("Decide after %d errors = %+v, want retry in %s (policy)", i+1, d, want)
				}
			}
		})
	}
}

func TestScheduleCopiesItsArgument(t *testing.T) {
	delays := []time.Duration{time.Second, 2 * time.Second}
	opt := policy.Schedule(delays...)
	delays[0] = time.Hour
	p, err := policy.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Backoff.Delay(1); got != time.Second {
		t.Errorf("Delay(1) = %s after the caller changed its slice, want 1s", got)
	}
}

func exp(initial time.Duration, factor float64, max time.Duration) policy.Backoff {
	return policy.Backoff{Kind: policy.ExponentialBackoff, Initial: initial, Factor: factor, Max: max}
}

func lin(initial, step, max time.Duration) policy.Backoff {
	return policy.Backoff{Kind: policy.LinearBackoff, Initial: initial, Step: step, Max: max}
}

func sched(delays ...time.Duration) policy.Backoff {
	return policy.Backoff{Kind: policy.ScheduleBackoff, Delays: delays}
}

func fn(f func(int) time.Duration) policy.Backoff {
	return policy.Backoff{Kind: policy.FuncBackoff, Func: f}
}
