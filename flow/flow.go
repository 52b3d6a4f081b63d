// Package flow declares the downstreams that activities call, with the
// limits they share: how many calls at once (concurrency), how many per
// interval (rate), how many retries compared to first attempts (the retry
// budget), and when to stop calling a downstream that keeps failing (the
// circuit breaker).
//
// A downstream is declared once, next to the activities' retry policies,
// and an activity says it calls it with activities.Activity.Calls, taking
// a key from its input when the limits apply per tenant or per account:
//
//	var Payments = flow.New("payments",
//		flow.Concurrency(20),
//		flow.Rate(50, time.Second, 10),
//		flow.Breaker(flow.BreakerPolicy{}))
//
//	var Charge = activities.New("charge", charge, policy.MaxAttempts(8)).
//		Calls(Payments, func(in ChargeIn) string { return in.Account })
//
// Limits are also rows of the database (table downstreams): a worker writes
// the row of a downstream its code declares, and a person may change it at
// run time in SQL, with operator.Operator.SetLimits, tenure limits or the
// web UI; every change is audited, and from then on declarations no longer
// override it until it is reset.
//
// A step denied by a limit is not an attempt: its run gives up its lease
// and waits, charged nothing (not MaxAttempts, not MaxRescues), until a
// release wakes it (a concurrency slot given back, a breaker closed) or the
// rate allows it. How often and how long each step waited is recorded (view
// step_throttling), and attempt_timeline says what delayed each attempt.
// docs/flow-control.md has the semantics.
package flow

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Downstream is a named service that activities call, with the limits they
// share. Declare it with New, as a package variable.
type Downstream struct {
	name   string
	limits Limits
}

// Limits are a downstream's limits. The zero value limits nothing.
type Limits struct {
	// Concurrency is how many calls may run at once, per key; 0: no limit.
	Concurrency int
	// Rate limits how many calls may start per interval, per key; nil: no
	// limit.
	Rate *RateLimit
	// RetryBudget limits retries compared to first attempts, for the whole
	// downstream; nil: no budget.
	RetryBudget *RetryBudget
	// Breaker stops calls after errors pass a threshold, for the whole
	// downstream; nil: no breaker (it can still be opened by hand).
	Breaker *BreakerPolicy
}

// RateLimit is at most N starts per Per, in bursts of at most Burst: the
// generic cell rate algorithm (GCRA), by the database clock. In any window
// of length Per, at most N+Burst calls start.
type RateLimit struct {
	N     int
	Per   time.Duration
	Burst int
}

// RetryBudget allows retries (attempts after an error) of at most Ratio
// times the first attempts, plus PerSecond retries a second: a retry beyond
// it waits, durably, instead of adding to the load of a failing downstream.
// The balance holds at most max(PerSecond, 1) retries.
type RetryBudget struct {
	Ratio     float64
	PerSecond float64
}

// DefaultRetryBudget is the budget of a downstream that declares none: 20 %
// of first attempts plus 10 retries a second.
var DefaultRetryBudget = RetryBudget{Ratio: 0.2, PerSecond: 10}

// BreakerPolicy is when a downstream's circuit breaker opens: when, within
// Window, at least MinCalls calls ended and ErrorRatio of them in an error,
// or when the window's last MinCalls calls all ended in an error (an
// outage's start, while the window still holds the successes before it).
// It stays open for OpenFor, then lets one probe through (half open): the
// probe's success closes it, its error opens it again. Zero fields take the
// defaults: ErrorRatio 0.5, MinCalls 10, Window 10 s, OpenFor 5 s.
type BreakerPolicy struct {
	ErrorRatio float64
	MinCalls   int
	Window     time.Duration
	OpenFor    time.Duration
}

// Option sets one of a downstream's limits.
type Option func(*Limits)

// Concurrency limits the calls that may run at once, per key, to n.
func Concurrency(n int) Option { return func(l *Limits) { l.Concurrency = n } }

// Rate limits the calls that may start to n per interval, per key, in
// bursts of at most burst.
func Rate(n int, per time.Duration, burst int) Option {
	return func(l *Limits) { l.Rate = &RateLimit{N: n, Per: per, Burst: burst} }
}

// WithRetryBudget sets the downstream's retry budget (by default
// DefaultRetryBudget).
func WithRetryBudget(ratio, perSecond float64) Option {
	return func(l *Limits) { l.RetryBudget = &RetryBudget{Ratio: ratio, PerSecond: perSecond} }
}

// NoRetryBudget removes the default retry budget: retries are limited by
// their policies only.
func NoRetryBudget() Option { return func(l *Limits) { l.RetryBudget = nil } }

// Breaker gives the downstream a circuit breaker; zero fields of p take
// their defaults.
func Breaker(p BreakerPolicy) Option {
	return func(l *Limits) {
		if p.ErrorRatio == 0 {
			p.ErrorRatio = 0.5
		}
		if p.MinCalls == 0 {
			p.MinCalls = 10
		}
		if p.Window == 0 {
			p.Window = 10 * time.Second
		}
		if p.OpenFor == 0 {
			p.OpenFor = 5 * time.Second
		}
		l.Breaker = &p
	}
}

// ErrInvalid is wrapped by the panic of New, and the error of Validate,
// for limits that make no sense.
var ErrInvalid = errors.New("invalid downstream")

// New declares a downstream. It panics when the name is empty or longer
// than 200 bytes, or the limits make no sense (a negative concurrency, a
// rate without an interval), as activities.New does for a bad policy: at
// start-up, never at 3 a.m. The panic's value wraps ErrInvalid.
func New(name string, opts ...Option) *Downstream {
	l := Limits{RetryBudget: &RetryBudget{Ratio: DefaultRetryBudget.Ratio, PerSecond: DefaultRetryBudget.PerSecond}}
	for _, o := range opts {
		o(&l)
	}
	if name == "" || len(name) > 200 {
		panic(fmt.Errorf("flow.New(%q): the name must be 1 to 200 bytes: %w", name, ErrInvalid))
	}
	if strings.HasPrefix(name, WorkflowPrefix) {
		panic(fmt.Errorf("flow.New(%q): names beginning %q are a workflow's concurrency key's (sdk.WithConcurrency): %w", name, WorkflowPrefix, ErrInvalid))
	}
	if err := l.Validate(); err != nil {
		panic(fmt.Errorf("flow.New(%q): %w", name, err))
	}
	return &Downstream{name: name, limits: l}
}

// WorkflowPrefix begins the name of the downstream that holds a workflow's
// concurrency key (sdk.WithConcurrency): "workflow:<workflow name>". No
// downstream of New may take such a name.
const WorkflowPrefix = "workflow:"

// Name is the downstream's name, the key of its row.
func (d *Downstream) Name() string { return d.name }

// Limits are the downstream's limits as declared (the database's row may
// hold others, set by a person).
func (d *Downstream) Limits() Limits { return d.limits }

// Validate returns an error wrapping ErrInvalid when the limits make no
// sense, naming the first such limit.
func (l Limits) Validate() error {
	bad := func(what string, v any) error { return fmt.Errorf("%s = %v: %w", what, v, ErrInvalid) }
	switch {
	case l.Concurrency < 0:
		return bad("concurrency", l.Concurrency)
	case l.Rate != nil && l.Rate.N < 1:
		return bad("rate", l.Rate.N)
	case l.Rate != nil && l.Rate.Per < time.Millisecond:
		return bad("rate interval (at least 1ms)", l.Rate.Per)
	case l.Rate != nil && l.Rate.Burst < 1:
		return bad("rate burst (at least 1)", l.Rate.Burst)
	case l.RetryBudget != nil && (l.RetryBudget.Ratio < 0 || math.IsNaN(l.RetryBudget.Ratio) || math.IsInf(l.RetryBudget.Ratio, 0)):
		return bad("retry budget ratio", l.RetryBudget.Ratio)
	case l.RetryBudget != nil && (l.RetryBudget.PerSecond < 0 || math.IsNaN(l.RetryBudget.PerSecond) || math.IsInf(l.RetryBudget.PerSecond, 0)):
		return bad("retry budget per second", l.RetryBudget.PerSecond)
	case l.Breaker != nil && !(l.Breaker.ErrorRatio > 0 && l.Breaker.ErrorRatio <= 1):
		return bad("breaker error ratio (above 0, at most 1)", l.Breaker.ErrorRatio)
	case l.Breaker != nil && l.Breaker.MinCalls < 1:
		return bad("breaker minimum calls", l.Breaker.MinCalls)
	case l.Breaker != nil && l.Breaker.Window < time.Millisecond:
		return bad("breaker window (at least 1ms)", l.Breaker.Window)
	case l.Breaker != nil && l.Breaker.OpenFor < time.Millisecond:
		return bad("breaker open time (at least 1ms)", l.Breaker.OpenFor)
	}
	return nil
}

// limitsJSON is Limits as the database's rows hold them (SQL _limits).
type limitsJSON struct {
	Concurrency       *int     `json:"concurrency,omitempty"`
	Rate              *int     `json:"rate,omitempty"`
	RateIntervalMS    *int64   `json:"rate_interval_ms,omitempty"`
	Burst             *int     `json:"burst,omitempty"`
	RetryRatio        *float64 `json:"retry_ratio,omitempty"`
	RetryPerS         *float64 `json:"retry_per_s,omitempty"`
	BreakerErrorRatio *float64 `json:"breaker_error_ratio,omitempty"`
	BreakerMinCalls   *int     `json:"breaker_min_calls,omitempty"`
	BreakerWindowMS   *int64   `json:"breaker_window_ms,omitempty"`
	BreakerOpenMS     *int64   `json:"breaker_open_ms,omitempty"`
}

// MarshalJSON encodes the limits as the database's rows hold them: the
// keys of SQL's set_downstream (concurrency, rate, rate_interval_ms, burst,
// retry_ratio, retry_per_s, breaker_error_ratio, breaker_min_calls,
// breaker_window_ms, breaker_open_ms), absent for no such limit.
func (l Limits) MarshalJSON() ([]byte, error) {
	var j limitsJSON
	if l.Concurrency > 0 {
		j.Concurrency = &l.Concurrency
	}
	if r := l.Rate; r != nil {
		ms := r.Per.Milliseconds()
		j.Rate, j.RateIntervalMS, j.Burst = &r.N, &ms, &r.Burst
	}
	if b := l.RetryBudget; b != nil {
		j.RetryRatio, j.RetryPerS = &b.Ratio, &b.PerSecond
	}
	if b := l.Breaker; b != nil {
		w, o := b.Window.Milliseconds(), b.OpenFor.Milliseconds()
		j.BreakerErrorRatio, j.BreakerMinCalls, j.BreakerWindowMS, j.BreakerOpenMS = &b.ErrorRatio, &b.MinCalls, &w, &o
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes limits as MarshalJSON encodes them. The breaker's
// minimum calls, window and open time are the database's own defaults when
// absent.
func (l *Limits) UnmarshalJSON(b []byte) error {
	var j limitsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*l = Limits{}
	if j.Concurrency != nil {
		l.Concurrency = *j.Concurrency
	}
	if j.Rate != nil && j.RateIntervalMS != nil && j.Burst != nil {
		l.Rate = &RateLimit{N: *j.Rate, Per: time.Duration(*j.RateIntervalMS) * time.Millisecond, Burst: *j.Burst}
	}
	if j.RetryRatio != nil && j.RetryPerS != nil {
		l.RetryBudget = &RetryBudget{Ratio: *j.RetryRatio, PerSecond: *j.RetryPerS}
	}
	if j.BreakerErrorRatio != nil {
		p := BreakerPolicy{ErrorRatio: *j.BreakerErrorRatio, MinCalls: 10, Window: 10 * time.Second, OpenFor: 5 * time.Second}
		if j.BreakerMinCalls != nil {
			p.MinCalls = *j.BreakerMinCalls
		}
		if j.BreakerWindowMS != nil {
			p.Window = time.Duration(*j.BreakerWindowMS) * time.Millisecond
		}
		if j.BreakerOpenMS != nil {
			p.OpenFor = time.Duration(*j.BreakerOpenMS) * time.Millisecond
		}
		l.Breaker = &p
	}
	return nil
}

// String describes the limits in a line, as tenure limits prints them, e.g.
// "concurrency 20, rate 50/1s burst 10, retries 20%+10/s, breaker 50% of 10 in 10s, open 5s".
func (l Limits) String() string {
	var parts []string
	if l.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("concurrency %d", l.Concurrency))
	}
	if r := l.Rate; r != nil {
		parts = append(parts, fmt.Sprintf("rate %d/%s burst %d", r.N, r.Per, r.Burst))
	}
	if b := l.RetryBudget; b != nil {
		parts = append(parts, fmt.Sprintf("retries %s%%+%g/s", percent(b.Ratio), b.PerSecond))
	}
	if b := l.Breaker; b != nil {
		parts = append(parts, fmt.Sprintf("breaker %s%% of %d in %s, open %s", percent(b.ErrorRatio), b.MinCalls, b.Window, b.OpenFor))
	}
	if len(parts) == 0 {
		return "no limits"
	}
	s := parts[0]
	for _, p := range parts[1:] {
		s += ", " + p
	}
	return s
}

// percent is ratio as a percentage of at most 6 significant digits: 0.29
// is "29", not the "28.999999999999996" of ratio*100 printed exactly.
func percent(ratio float64) string { return strconv.FormatFloat(ratio*100, 'g', 6, 64) }

// Causes of a step's wait on a downstream, as attempt_timeline.throttled_by
// and the throttles table record them.
const (
	CauseConcurrency = "concurrency"
	CauseRate        = "rate"
	CauseBreaker     = "breaker"
	CauseRetryBudget = "retry-budget"
)

// Breaker states, as downstream_status.breaker records them.
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half_open"
)
