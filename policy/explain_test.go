package policy_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/policy"
)

func TestExplain_Timeline(t *testing.T) {
	s := time.Second
	tests := []struct {
		name  string
		opts  []policy.Option
		steps [][2]time.Duration // min, max per failed attempt
		worst time.Duration
	}{
		{"exponential, no jitter", []policy.Option{policy.MaxAttempts(5), policy.Exponential(s, 2, 5*s), policy.Jitter(policy.NoJitter)},
			[][2]time.Duration{{s, s}, {2 * s, 2 * s}, {4 * s, 4 * s}, {5 * s, 5 * s}}, 12 * s},
		{"full jitter", []policy.Option{policy.MaxAttempts(3), policy.Exponential(s, 2, time.Minute), policy.Jitter(policy.FullJitter)},
			[][2]time.Duration{{0, s}, {0, 2 * s}}, 3 * s},
		{"equal jitter", []policy.Option{policy.MaxAttempts(3), policy.Constant(4 * s), policy.Jitter(policy.EqualJitter)},
			[][2]time.Duration{{2 * s, 4 * s}, {2 * s, 4 * s}}, 8 * s},
		{"decorrelated jitter", []policy.Option{policy.MaxAttempts(5), policy.Exponential(s, 2, 20*s), policy.Jitter(policy.DecorrelatedJitter)},
			[][2]time.Duration{{s, 3 * s}, {s, 9 * s}, {s, 20 * s}, {s, 20 * s}}, 52 * s},
		{"linear", []policy.Option{policy.MaxAttempts(4), policy.Linear(s, 2*s, 4*s), policy.Jitter(policy.NoJitter)},
			[][2]time.Duration{{s, s}, {3 * s, 3 * s}, {4 * s, 4 * s}}, 8 * s},
		{"schedule", []policy.Option{policy.MaxAttempts(4), policy.Schedule(s, 5*s), policy.Jitter(policy.NoJitter)},
			[][2]time.Duration{{s, s}, {5 * s, 5 * s}, {5 * s, 5 * s}}, 11 * s},
		{"func", []policy.Option{policy.MaxAttempts(3), policy.BackoffFunc(func(n int) time.Duration { return time.Duration(n) * 10 * s }), policy.Jitter(policy.NoJitter)},
			[][2]time.Duration{{10 * s, 10 * s}, {20 * s, 20 * s}}, 30 * s},
		{"attempt timeout adds MaxAttempts times", []policy.Option{policy.MaxAttempts(3), policy.Constant(s), policy.Jitter(policy.NoJitter), policy.AttemptTimeout(10 * s)},
			[][2]time.Duration{{s, s}, {s, s}}, 32 * s},
		{"single attempt", []policy.Option{policy.MaxAttempts(1), policy.AttemptTimeout(s)}, nil, s},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := policy.New(tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			e := policy.Explain(r)
			if len(e.Steps) != len(tt.steps) {
				t.Fatalf("%d steps, want %d:\n%s", len(e.Steps), len(tt.steps), e)
			}
			for i, s := range e.Steps {
				if s.Attempt != i+1 || s.Min != tt.steps[i][0] || s.Max != tt.steps[i][1] {
					t.Errorf("step %d = %+v, want attempt %d in [%s, %s]", i, s, i+1, tt.steps[i][0], tt.steps[i][1])
				}
			}
			if e.WorstCase != tt.worst || e.Omitted != 0 || len(e.Warnings) != 0 {
				t.Errorf("worst case %s, omitted %d, warnings %q; want %s, 0, none", e.WorstCase, e.Omitted, e.Warnings, tt.worst)
			}
		})
	}
}

func TestExplain_DeadlineWarnings(t *testing.T) {
	s := time.Second
	tests := []struct {
		name string
		opts []policy.Option
		want []string
	}{
		{"fits", []policy.Option{policy.MaxAttempts(3), policy.Constant(s), policy.Deadline(time.Minute)}, nil},
		{"worst case exceeds the deadline", []policy.Option{policy.MaxAttempts(3), policy.Constant(20 * s), policy.Jitter(policy.FullJitter), policy.Deadline(30 * s)},
			[]string{"worst case 40s exceeds deadline 30s"}},
		{"attempts cannot start", []policy.Option{policy.MaxAttempts(5), policy.Constant(20 * s), policy.Jitter(policy.NoJitter), policy.Deadline(30 * s)},
			[]string{"deadline 30s: only 2 of 5 attempts can start"}},
		{"start exactly at the deadline does not count", []policy.Option{policy.MaxAttempts(3), policy.Constant(15 * s), policy.Jitter(policy.NoJitter), policy.Deadline(30 * s)},
			[]string{"deadline 30s: only 2 of 3 attempts can start"}},
		{"timeout longer than the deadline", []policy.Option{policy.MaxAttempts(1), policy.AttemptTimeout(time.Minute), policy.Deadline(30 * s)},
			[]string{"attempt_timeout 1m0s exceeds deadline 30s", "worst case 1m0s exceeds deadline 30s"}},
		{"settled timeline counted in closed form", []policy.Option{policy.MaxAttempts(math.MaxInt32), policy.Constant(s), policy.Jitter(policy.NoJitter), policy.Deadline(time.Hour)},
			[]string{"deadline 1h0m0s: only 3600 of 2147483647 attempts can start"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := policy.New(tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			e := policy.Explain(r)
			if len(e.Warnings) != len(tt.want) {
				t.Fatalf("warnings %q, want %d", e.Warnings, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(e.Warnings[i], w) {
					t.Errorf("warning %d = %q, want it to start with %q", i, e.Warnings[i], w)
				}
			}
		})
	}
}

func TestExplain_RetryForever(t *testing.T) {
	start := time.Now()
	r, err := policy.New(policy.MaxAttempts(math.MaxInt), policy.Exponential(time.Millisecond, 1.0000001, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	e := policy.Explain(r)
	if len(e.Steps) != 1000 || e.Omitted != math.MaxInt-1-1000 {
		t.Errorf("%d steps listed, %d omitted", len(e.Steps), e.Omitted)
	}
	if e.WorstCase != math.MaxInt64 {
		t.Errorf("worst case %s, want it saturated", e.WorstCase)
	}
	if len(e.Warnings) != 1 || !strings.Contains(e.Warnings[0], "upper bound") {
		t.Errorf("warnings %q, want the upper-bound note", e.Warnings)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("Explain took %s", time.Since(start))
	}
	f, err := policy.New(policy.MaxAttempts(math.MaxInt), policy.BackoffFunc(func(int) time.Duration { return time.Second }))
	if err != nil {
		t.Fatal(err)
	}
	if e := policy.Explain(f); len(e.Warnings) != 1 || !strings.Contains(e.Warnings[0], "counts only the first") {
		t.Errorf("warnings %q, want the partial-count note", e.Warnings)
	}
}

func TestExplain_String(t *testing.T) {
	r, err := policy.New(
		policy.MaxAttempts(6),
		policy.Exponential(time.Second, 2, 4*time.Second),
		policy.Jitter(policy.EqualJitter),
		policy.Deadline(10*time.Second),
		policy.OnType[*RateLimitError](policy.MaxAttempts(2), policy.Constant(30*time.Second), policy.Jitter(policy.NoJitter)),
	)
	if err != nil {
		t.Fatal(err)
	}
	want := `policy: max_attempts=6 max_rescues=3 backoff=exponential(1s, x2, max 4s) jitter=equal max_retry_after=1h0m0s deadline=10s rules=1
after attempt  delay
1              500ms .. 1s
2              1s .. 2s
3-5            2s .. 4s
worst case: 15s
warning: worst case 15s exceeds deadline 10s: the step may give up with deadline_exceeded before its last attempt
rule "*policy_test.RateLimitError":
  policy: max_attempts=2 max_rescues=3 backoff=constant(30s) jitter=none max_retry_after=1h0m0s deadline=10s
  after attempt  delay
  1              30s
  worst case: 30s
  warning: deadline 10s: only 1 of 2 attempts can start, even with the shortest delays
`
	if got := policy.Explain(r).String(); got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
}
