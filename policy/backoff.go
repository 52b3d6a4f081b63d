package policy

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// BackoffKind names the shape of a Backoff.
type BackoffKind int

// Backoff shapes. The zero BackoffKind is no shape and does not validate.
const (
	// ExponentialBackoff waits Initial·Factor^(n-1), capped at Max.
	ExponentialBackoff BackoffKind = iota + 1
	// ConstantBackoff always waits Initial.
	ConstantBackoff
	// LinearBackoff waits Initial + Step·(n-1), capped at Max.
	LinearBackoff
	// ScheduleBackoff waits Delays[n-1]; the last delay repeats.
	ScheduleBackoff
	// FuncBackoff waits Func(n); negative results count as 0.
	FuncBackoff
)

// String returns the kind's name as used in JSON: "exponential", "constant",
// "linear", "schedule" or "func".
func (k BackoffKind) String() string {
	switch k {
	case ExponentialBackoff:
		return "exponential"
	case ConstantBackoff:
		return "constant"
	case LinearBackoff:
		return "linear"
	case ScheduleBackoff:
		return "schedule"
	case FuncBackoff:
		return "func"
	}
	return fmt.Sprintf("BackoffKind(%d)", int(k))
}

// Backoff is the shape of the delays between attempts, before jitter. n, the
// argument of Delay and Func, counts the attempts that have failed so far: the
// delay before the second attempt is Delay(1).
type Backoff struct {
	// Kind selects the shape and which fields below are used.
	Kind BackoffKind
	// Initial is the first delay (exponential, linear) or the only one (constant).
	Initial time.Duration
	// Factor is the growth factor of exponential backoff, at least 1.
	Factor float64
	// Step is the increment of linear backoff, greater than 0.
	Step time.Duration
	// Max caps exponential and linear backoff, at least Initial.
	Max time.Duration
	// Delays is the explicit schedule; the last delay repeats.
	Delays []time.Duration
	// Func computes the delay of function backoff. It must be pure (the same
	// n gives the same delay) so decisions can be reproduced and explained.
	Func func(n int) time.Duration

	// restored marks a function backoff read from JSON, whose function is
	// lost.
	restored bool
}

// Exponential sets exponential backoff: initial, initial·factor,
// initial·factor², … capped at max. initial must be > 0, factor ≥ 1 and
// max ≥ initial.
func Exponential(initial time.Duration, factor float64, max time.Duration) Option {
	return func(r *Retry) {
		r.Backoff = Backoff{Kind: ExponentialBackoff, Initial: initial, Factor: factor, Max: max}
	}
}

// Constant sets constant backoff: every delay is d, which must be ≥ 0.
func Constant(d time.Duration) Option {
	return func(r *Retry) {
		r.Backoff = Backoff{Kind: ConstantBackoff, Initial: d}
	}
}

// Linear sets linear backoff: initial, initial+step, initial+2·step, …
// capped at max. initial must be ≥ 0, step > 0 and max ≥ initial, max > 0.
func Linear(initial, step, max time.Duration) Option {
	return func(r *Retry) {
		r.Backoff = Backoff{Kind: LinearBackoff, Initial: initial, Step: step, Max: max}
	}
}

// Schedule sets an explicit list of delays: the n-th retry waits delays[n-1]
// and the last delay repeats. The list must not be empty and no delay may be
// negative.
func Schedule(delays ...time.Duration) Option {
	delays = append([]time.Duration(nil), delays...)
	return func(r *Retry) {
		// Each policy gets its own copy, so no two policies share an array.
		r.Backoff = Backoff{Kind: ScheduleBackoff, Delays: append([]time.Duration(nil), delays...)}
	}
}

// BackoffFunc sets a computed backoff: the n-th retry waits f(n), where n is
// the number of attempts that have failed so far (1 before the second
// attempt). f must not be nil and must be pure; negative results count as 0.
// A function backoff cannot be combined with DecorrelatedJitter, which needs
// a first and a largest delay, and cannot be restored from JSON.
func BackoffFunc(f func(n int) time.Duration) Option {
	return func(r *Retry) {
		r.Backoff = Backoff{Kind: FuncBackoff, Func: f}
	}
}

// Delay returns the delay before the next attempt after n failed attempts,
// before jitter. n below 1 counts as 1. The result is never negative and
// never above the shape's cap; arithmetic saturates instead of overflowing.
func (b Backoff) Delay(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	var d time.Duration
	switch b.Kind {
	case ExponentialBackoff:
		f := float64(b.Initial) * math.Pow(b.Factor, float64(n-1))
		// Compare in floating point before converting: a product beyond
		// MaxInt64 (or NaN) would convert to an unspecified value.
		if !(f < float64(b.Max)) {
			return max(b.Max, 0)
		}
		d = time.Duration(f)
	case ConstantBackoff:
		d = b.Initial
	case LinearBackoff:
		k := int64(n - 1)
		if b.Step > 0 && k > int64(b.Max-b.Initial)/int64(b.Step) {
			return max(b.Max, 0)
		}
		d = b.Initial + b.Step*time.Duration(k)
		if d > b.Max {
			d = b.Max
		}
	case ScheduleBackoff:
		if len(b.Delays) == 0 {
			return 0
		}
		d = b.Delays[min(n, len(b.Delays))-1]
	case FuncBackoff:
		if b.Func == nil {
			return 0
		}
		d = b.Func(n)
	}
	return max(d, 0)
}

// bounds returns the first delay and the largest delay of the shape; ok is
// false for function backoff, whose delays are not known in advance.
func (b Backoff) bounds() (first, largest time.Duration, ok bool) {
	switch b.Kind {
	case ExponentialBackoff, LinearBackoff:
		return b.Delay(1), max(b.Max, 0), true
	case ConstantBackoff:
		d := max(b.Initial, 0)
		return d, d, true
	case ScheduleBackoff:
		for _, d := range b.Delays {
			largest = max(largest, d)
		}
		return b.Delay(1), largest, len(b.Delays) > 0
	}
	return 0, 0, false
}

// settled reports whether Delay(m) equals Delay(n) for every m ≥ n, which
// lets Explain stop computing a long timeline once the shape reaches its cap.
func (b Backoff) settled(n int) bool {
	switch b.Kind {
	case ExponentialBackoff:
		return b.Factor == 1 || b.Delay(n) >= b.Max
	case LinearBackoff:
		return b.Delay(n) >= b.Max
	case ConstantBackoff:
		return true
	case ScheduleBackoff:
		return n >= len(b.Delays)
	}
	return false
}

// String describes the shape, e.g. "exponential(1s, x2, max 1m0s)".
func (b Backoff) String() string {
	switch b.Kind {
	case ExponentialBackoff:
		return fmt.Sprintf("exponential(%s, x%g, max %s)", b.Initial, b.Factor, b.Max)
	case ConstantBackoff:
		return fmt.Sprintf("constant(%s)", b.Initial)
	case LinearBackoff:
		return fmt.Sprintf("linear(%s, +%s, max %s)", b.Initial, b.Step, b.Max)
	case ScheduleBackoff:
		parts := make([]string, len(b.Delays))
		for i, d := range b.Delays {
			parts[i] = d.String()
		}
		return "schedule(" + strings.Join(parts, ", ") + ")"
	case FuncBackoff:
		return "func"
	}
	return b.Kind.String()
}

// addSat returns a+b, saturating at the largest and smallest Duration.
func addSat(a, b time.Duration) time.Duration {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

// mulSat returns d·k for d ≥ 0 and k > 0, saturating at the largest Duration.
func mulSat(d time.Duration, k int64) time.Duration {
	if d > 0 && k > 0 && d > math.MaxInt64/time.Duration(k) {
		return math.MaxInt64
	}
	return d * time.Duration(k)
}
