package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// JitterKind selects how a computed delay is randomized, following the AWS
// Architecture Blog article "Exponential Backoff and Jitter". base is the
// delay of the backoff shape for the current retry.
type JitterKind int

// Jitter kinds.
const (
	// NoJitter uses the base delay unchanged.
	NoJitter JitterKind = iota
	// FullJitter draws uniformly from [0, base].
	FullJitter
	// EqualJitter draws uniformly from [base/2, base]: base/2 + rand[0, base/2].
	EqualJitter
	// DecorrelatedJitter draws min(max, rand[initial, prev·3]), where initial
	// and max are the first and largest delays of the shape and prev is the
	// previous delay (initial before the first retry). It ignores the base
	// delay and needs a shape with known bounds (not BackoffFunc).
	DecorrelatedJitter
)

// Jitter sets how computed delays are randomized. Delays given by a
// Retry-After hint are never jittered.
func Jitter(k JitterKind) Option {
	return func(r *Retry) { r.Jitter = k }
}

// String returns the kind's name as used in JSON: "none", "full", "equal" or
// "decorrelated".
func (k JitterKind) String() string {
	switch k {
	case NoJitter:
		return "none"
	case FullJitter:
		return "full"
	case EqualJitter:
		return "equal"
	case DecorrelatedJitter:
		return "decorrelated"
	}
	return fmt.Sprintf("JitterKind(%d)", int(k))
}

// jitter returns the delay for a retry whose base delay is base. prev is the
// delay chosen before the attempt that just failed (0 if none) and seed
// selects the random draw, so equal arguments give equal delays.
func (r Retry) jitter(base, prev time.Duration, seed uint64) time.Duration {
	switch r.Jitter {
	case FullJitter:
		return uniform(seed, 0, base)
	case EqualJitter:
		half := base / 2
		return half + uniform(seed, 0, base-half)
	case DecorrelatedJitter:
		first, largest, _ := r.Backoff.bounds()
		return min(largest, uniform(seed, first, decorrelatedCeiling(first, prev)))
	}
	return base
}

// jitterRange returns the smallest and largest delay the jitter can give for
// a retry whose base delay is base. For DecorrelatedJitter, prevMax is the
// largest previous delay (0 before the first retry).
func (r Retry) jitterRange(base, prevMax time.Duration) (lo, hi time.Duration) {
	switch r.Jitter {
	case FullJitter:
		return 0, base
	case EqualJitter:
		return base / 2, base
	case DecorrelatedJitter:
		first, largest, _ := r.Backoff.bounds()
		return min(largest, first), min(largest, decorrelatedCeiling(first, prevMax))
	}
	return base, base
}

// decorrelatedCeiling is the top of the decorrelated draw: prev·3, with prev
// 0 standing for initial, and never below initial.
func decorrelatedCeiling(initial, prev time.Duration) time.Duration {
	if prev <= 0 {
		prev = initial
	}
	return max(mulSat(prev, 3), initial)
}

// uniform draws a duration uniformly from [lo, hi] with a PRNG seeded by
// seed. hi below lo gives lo.
func uniform(seed uint64, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	rng := newRand(seed)
	span := uint64(hi) - uint64(lo) // fits: hi > lo, both are int64
	if span == math.MaxUint64 {
		return time.Duration(rng.Uint64())
	}
	return lo + time.Duration(rng.Uint64N(span+1))
}

// pcgIncrement is the second PCG seed word; it only needs to be fixed.
const pcgIncrement = 0x9e3779b97f4a7c15

// newRand returns the PRNG for one decision. The algorithm (PCG) and its
// seeding are fixed, so a recorded seed reproduces a recorded delay.
func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^pcgIncrement))
}
