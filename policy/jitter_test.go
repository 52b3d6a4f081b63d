package policy

import (
	"math"
	"testing"
	"time"
)

func TestJitterBounds(t *testing.T) {
	exponential := Backoff{Kind: ExponentialBackoff, Initial: time.Second, Factor: 2, Max: time.Minute}
	tests := []struct {
		name    string
		jitter  JitterKind
		backoff Backoff
		base    time.Duration
		prev    time.Duration
		lo, hi  time.Duration
		skewed  bool // draws pile up at the cap, so only the bounds are checked
	}{
		{"none", NoJitter, exponential, 8 * time.Second, 0, 8 * time.Second, 8 * time.Second, false},
		{"full", FullJitter, exponential, 8 * time.Second, 0, 0, 8 * time.Second, false},
		{"full zero base", FullJitter, exponential, 0, 0, 0, 0, false},
		{"equal", EqualJitter, exponential, 8 * time.Second, 0, 4 * time.Second, 8 * time.Second, false},
		{"equal odd base", EqualJitter, exponential, 3, 0, 1, 3, false},
		{"decorrelated first retry", DecorrelatedJitter, exponential, 0, 0, time.Second, 3 * time.Second, false},
		{"decorrelated grows from prev", DecorrelatedJitter, exponential, 0, 5 * time.Second, time.Second, 15 * time.Second, false},
		{"decorrelated capped at max", DecorrelatedJitter, exponential, 0, 50 * time.Second, time.Second, time.Minute, false},
		{"decorrelated tiny prev", DecorrelatedJitter, exponential, 0, time.Millisecond, time.Second, time.Second, false},
		{"decorrelated huge prev", DecorrelatedJitter, exponential, 0, math.MaxInt64, time.Second, time.Minute, true},
		{"decorrelated schedule", DecorrelatedJitter, Backoff{Kind: ScheduleBackoff, Delays: []time.Duration{2 * time.Second, 10 * time.Second, 5 * time.Second}}, 0, 0, 2 * time.Second, 6 * time.Second, false},
		{"decorrelated constant", DecorrelatedJitter, Backoff{Kind: ConstantBackoff, Initial: time.Second}, 0, 0, time.Second, time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Retry{Jitter: tt.jitter, Backoff: tt.backoff}
			lo, hi := r.jitterRange(tt.base, tt.prev)
			if lo != tt.lo || hi != tt.hi {
				t.Errorf("jitterRange = [%s, %s], want [%s, %s]", lo, hi, tt.lo, tt.hi)
			}
			seenLo, seenHi := time.Duration(math.MaxInt64), time.Duration(0)
			for seed := range uint64(2000) {
				d := r.jitter(tt.base, tt.prev, seed)
				if d < tt.lo || d > tt.hi {
					t.Fatalf("seed %d: jitter = %s, want within [%s, %s]", seed, d, tt.lo, tt.hi)
				}
				if d != r.jitter(tt.base, tt.prev, seed) {
					t.Fatalf("seed %d: jitter is not deterministic", seed)
				}
				seenLo, seenHi = min(seenLo, d), max(seenHi, d)
			}
			// 2000 uniform draws come within 1% of both ends.
			span := tt.hi - tt.lo
			if !tt.skewed && (seenLo > tt.lo+span/100 || seenHi < tt.hi-span/100) {
				t.Errorf("draws span [%s, %s], want close to [%s, %s]", seenLo, seenHi, tt.lo, tt.hi)
			}
		})
	}
}

func TestUniformExtremes(t *testing.T) {
	tests := []struct {
		name   string
		lo, hi time.Duration
	}{
		{"empty range", 5, 5},
		{"inverted range gives lo", 9, 3},
		{"whole non-negative range", 0, math.MaxInt64},
		{"whole range", math.MinInt64, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for seed := range uint64(100) {
				d := uniform(seed, tt.lo, tt.hi)
				if d < tt.lo || (tt.hi >= tt.lo && d > tt.hi) || (tt.hi < tt.lo && d != tt.lo) {
					t.Fatalf("uniform(%d, %d, %d) = %d", seed, tt.lo, tt.hi, d)
				}
			}
		})
	}
}
