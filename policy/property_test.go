package policy_test

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tenurehq/tenure/policy"
)

// genPolicy draws the options of a valid policy and the policy they build.
func genPolicy(t *rapid.T, allowFunc bool) ([]policy.Option, policy.Retry) {
	dur := func(label string, lo, hi time.Duration) time.Duration {
		return time.Duration(rapid.Int64Range(int64(lo), int64(hi)).Draw(t, label))
	}
	kinds := 4
	if allowFunc {
		kinds = 5
	}
	var opts []policy.Option
	switch rapid.IntRange(0, kinds-1).Draw(t, "shape") {
	case 0:
		initial := dur("initial", 1, time.Hour)
		factor := rapid.OneOf(rapid.Float64Range(1, 10), rapid.Just(1.0), rapid.Float64Range(1, 1e300)).Draw(t, "factor")
		opts = append(opts, policy.Exponential(initial, factor, dur("max", initial, math.MaxInt64)))
	case 1:
		opts = append(opts, policy.Constant(dur("delay", 0, time.Hour)))
	case 2:
		initial := dur("initial", 0, time.Hour)
		opts = append(opts, policy.Linear(initial, dur("step", 1, time.Hour), dur("max", max(initial, 1), math.MaxInt64)))
	case 3:
		delays := rapid.SliceOfN(rapid.Int64Range(0, int64(24*time.Hour)), 1, 8).Draw(t, "delays")
		ds := make([]time.Duration, len(delays))
		for i, d := range delays {
			ds[i] = time.Duration(d)
		}
		opts = append(opts, policy.Schedule(ds...))
	case 4:
		k := dur("k", -time.Second, time.Hour)
		opts = append(opts, policy.BackoffFunc(func(n int) time.Duration { return k * time.Duration(n%7) }))
	}
	opts = append(opts,
		policy.Jitter(policy.JitterKind(rapid.IntRange(0, 3).Draw(t, "jitter"))),
		policy.MaxAttempts(rapid.IntRange(1, 40).Draw(t, "max_attempts")),
		policy.MaxRescues(rapid.IntRange(0, 5).Draw(t, "max_rescues")),
		policy.MaxRetryAfter(dur("max_retry_after", 0, 2*time.Hour)),
		policy.AttemptTimeout(dur("attempt_timeout", 0, time.Hour)),
		policy.Deadline(time.Duration(rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(1, int64(48*time.Hour))).Draw(t, "deadline"))),
	)
	r, err := policy.New(opts...)
	var ve *policy.ValidationError
	if errors.As(err, &ve) && ve.Field == "jitter" {
		// Decorrelated jitter needs known, non-zero bounds; drop it.
		opts = append(opts, policy.Jitter(policy.FullJitter))
		r, err = policy.New(opts...)
	}
	if err != nil {
		t.Fatalf("generated an invalid policy: %v", err)
	}
	return opts, r
}

func TestProperty_DelayBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		_, r := genPolicy(t, true)
		if r.MaxAttempts < 2 {
			return
		}
		h := policy.History{
			Errors:    rapid.IntRange(1, r.MaxAttempts-1).Draw(t, "errors"),
			LastDelay: time.Duration(rapid.Int64Range(0, math.MaxInt64).Draw(t, "last_delay")),
			Seed:      rapid.Uint64().Draw(t, "seed"),
			Err:       errTransient,
		}
		h.Attempt = h.Errors
		d := r.Decide(h)
		if d.Reason == policy.DeadlineExceeded || !d.Retry {
			if r.Deadline == 0 {
				t.Fatalf("gave up without a deadline: %v", d)
			}
			return
		}
		base := r.Backoff.Delay(h.Errors)
		first, largest := r.Backoff.Delay(1), time.Duration(math.MaxInt64)
		switch r.Backoff.Kind {
		case policy.ExponentialBackoff, policy.LinearBackoff:
			largest = r.Backoff.Max
		case policy.ConstantBackoff:
			largest = r.Backoff.Initial
		case policy.ScheduleBackoff:
			largest = 0
			for _, x := range r.Backoff.Delays {
				largest = max(largest, x)
			}
		}
		if d.Delay < 0 || d.Delay > largest || base > largest {
			t.Fatalf("delay %s, base %s outside [0, %s]", d.Delay, base, largest)
		}
		lo, hi := base, base
		switch r.Jitter {
		case policy.FullJitter:
			lo = 0
		case policy.EqualJitter:
			lo = base / 2
		case policy.DecorrelatedJitter:
			lo, hi = first, largest
		}
		if d.Delay < lo || d.Delay > hi {
			t.Fatalf("%s jitter: delay %s outside [%s, %s] (base %s)", r.Jitter, d.Delay, lo, hi, base)
		}
		if (d.Source == policy.SourcePolicy) != (d.Delay == base) || (d.Source == policy.SourceJitter) != (d.Delay != base) {
			t.Fatalf("source %s for delay %s with base %s", d.Source, d.Delay, base)
		}
	})
}

func TestProperty_SameSeedSameDelay(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		opts, r := genPolicy(t, true)
		h := policy.History{
			Attempt:   rapid.IntRange(1, 100).Draw(t, "attempt"),
			Errors:    rapid.IntRange(1, r.MaxAttempts).Draw(t, "errors"),
			Elapsed:   time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "elapsed")),
			LastDelay: time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "last_delay")),
			Seed:      policy.Seed(rapid.String().Draw(t, "run"), rapid.IntRange(1, 100).Draw(t, "step"), 1),
			Err:       errTransient,
		}
		again, err := policy.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		a, b := r.Decide(h), again.Decide(h)
		if a.Retry != b.Retry || a.Delay != b.Delay || a.Source != b.Source || a.Reason != b.Reason || a.Timeout != b.Timeout {
			t.Fatalf("same input, different decisions: %v and %v", a, b)
		}
	})
}

func TestProperty_ExhaustionAtMaxAttempts(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		opts, _ := genPolicy(t, true)
		r, err := policy.New(append(opts, policy.Deadline(0))...)
		if err != nil {
			t.Fatal(err)
		}
		seed := rapid.Uint64().Draw(t, "seed")
		var last time.Duration
		for errs := 1; errs <= r.MaxAttempts+2; errs++ {
			d := r.Decide(policy.History{Attempt: errs, Errors: errs, LastDelay: last, Seed: seed + uint64(errs), Err: errTransient})
			if errs < r.MaxAttempts && !d.Retry {
				t.Fatalf("gave up after %d of %d errors: %v", errs, r.MaxAttempts, d)
			}
			if errs >= r.MaxAttempts && (d.Retry || d.Reason != policy.RetriesExhausted) {
				t.Fatalf("after %d of %d errors: %v, want retries_exhausted", errs, r.MaxAttempts, d)
			}
			last = d.Delay
		}
	})
}

// TestProperty_ExplainBoundsDecide checks that a chain of decisions stays
// within the timeline Explain gives, and that a retry always starts before
// the deadline.
func TestProperty_ExplainBoundsDecide(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		_, r := genPolicy(t, true)
		e := policy.Explain(r)
		if len(e.Steps) != r.MaxAttempts-1 {
			t.Fatalf("%d steps for %d attempts", len(e.Steps), r.MaxAttempts)
		}
		var elapsed, last, sum time.Duration
		run := rapid.String().Draw(t, "run")
		for errs := 1; errs < r.MaxAttempts; errs++ {
			d := r.Decide(policy.History{Attempt: errs, Errors: errs, Elapsed: elapsed, LastDelay: last, Seed: policy.Seed(run, 1, errs), Err: errTransient})
			s := e.Steps[errs-1]
			if s.Min > s.Max || d.Delay < s.Min || d.Delay > s.Max {
				t.Fatalf("delay %s after attempt %d outside Explain's [%s, %s]", d.Delay, errs, s.Min, s.Max)
			}
			if !d.Retry {
				if d.Reason != policy.DeadlineExceeded || elapsed+d.Delay < r.Deadline {
					t.Fatalf("gave up early: %v", d)
				}
				return
			}
			if r.Deadline > 0 && elapsed+d.Delay >= r.Deadline {
				t.Fatalf("retry starts at %s, deadline %s", elapsed+d.Delay, r.Deadline)
			}
			sum = min(sum, math.MaxInt64-s.Max) + s.Max // saturating
			elapsed += d.Delay
			last = d.Delay
		}
		if e.WorstCase < sum {
			t.Fatalf("worst case %s below the sum of max delays %s", e.WorstCase, sum)
		}
	})
}

func TestProperty_RetryAfterClamped(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		_, r := genPolicy(t, false)
		if r.MaxAttempts < 2 {
			return
		}
		hint := time.Duration(rapid.Int64Range(0, math.MaxInt64).Draw(t, "hint"))
		d := r.Decide(policy.History{Attempt: 1, Errors: 1, Err: policy.WithRetryAfter(errTransient, hint)})
		switch {
		case r.MaxRetryAfter == 0 && d.Source == policy.SourceRetryAfter:
			t.Fatalf("hint used although MaxRetryAfter is 0: %v", d)
		case r.MaxRetryAfter > 0 && (d.Source != policy.SourceRetryAfter || d.Delay != min(hint, r.MaxRetryAfter)):
			t.Fatalf("hint %s, max %s: %v", hint, r.MaxRetryAfter, d)
		}
	})
}

// TestProperty_ResolveNeverPanics feeds arbitrary values to every option:
// the result is a valid policy or a *ValidationError.
func TestProperty_ResolveNeverPanics(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := func(label string) time.Duration { return time.Duration(rapid.Int64().Draw(t, label)) }
		all := []func() policy.Option{
			func() policy.Option { return policy.MaxAttempts(rapid.Int().Draw(t, "n")) },
			func() policy.Option { return policy.MaxRescues(rapid.Int().Draw(t, "n")) },
			func() policy.Option { return policy.AtMostOnce() },
			func() policy.Option { return policy.Exponential(d("i"), rapid.Float64().Draw(t, "f"), d("m")) },
			func() policy.Option { return policy.Constant(d("c")) },
			func() policy.Option { return policy.Linear(d("i"), d("s"), d("m")) },
			func() policy.Option { return policy.Schedule(d("a"), d("b")) },
			func() policy.Option { return policy.Schedule() },
			func() policy.Option { return policy.BackoffFunc(nil) },
			func() policy.Option { return policy.Jitter(policy.JitterKind(rapid.IntRange(-2, 6).Draw(t, "j"))) },
			func() policy.Option { return policy.MaxRetryAfter(d("r")) },
			func() policy.Option { return policy.AttemptTimeout(d("t")) },
			func() policy.Option { return policy.Deadline(d("dl")) },
			func() policy.Option { return policy.RetryIf(nil) },
			func() policy.Option { return policy.On(nil, policy.MaxAttempts(rapid.Int().Draw(t, "n"))) },
			func() policy.Option { return policy.On(errNotFound, policy.Constant(d("c"))) },
			func() policy.Option {
				return policy.OnType[*RateLimitError](policy.MaxRescues(rapid.Int().Draw(t, "n")))
			},
		}
		layers := make([][]policy.Option, rapid.IntRange(0, 3).Draw(t, "layers"))
		for i := range layers {
			for range rapid.IntRange(0, 6).Draw(t, "options") {
				layers[i] = append(layers[i], all[rapid.IntRange(0, len(all)-1).Draw(t, "option")]())
			}
		}
		r, err := policy.Resolve(layers...)
		var ve *policy.ValidationError
		if err != nil && !errors.As(err, &ve) {
			t.Fatalf("error %v (%T), want *policy.ValidationError", err, err)
		}
		if err == nil && r.Validate() != nil {
			t.Fatalf("Resolve accepted a policy Validate rejects: %v", r.Validate())
		}
		if err == nil && r.AtMostOnce && (r.MaxRescues != 0 || r.DecideRescue(1)) {
			t.Fatalf("at-most-once policy may rerun a lost attempt: %v", r)
		}
		_ = r.Decide(policy.History{Attempt: 1, Errors: 1, Err: errTransient})
		_ = policy.Explain(r).String()
	})
}

func TestProperty_JSONRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		_, r := genPolicy(t, false)
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back policy.Retry
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("restored policy invalid: %v", err)
		}
		if again, _ := json.Marshal(back); string(again) != string(data) {
			t.Fatalf("round trip changed\n%s\nto\n%s", data, again)
		}
	})
}
