package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/record"
)

// ErrNoDownstream is returned for a downstream that has no row yet: a
// downstream's row is written by the first worker whose code calls it
// (flow.New, activities.Activity.Calls).
var ErrNoDownstream = store.ErrNoDownstream

// Downstreams returns every downstream of flow control as it stands, by
// name: its limits, what is in use and waiting, its breaker and its
// counters (the view downstream_status).
func (op *Operator) Downstreams(ctx context.Context) ([]record.Downstream, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.Downstreams(ctx)
}

// Downstream returns one downstream as it stands; an error wrapping
// ErrNoDownstream when it has no row.
func (op *Operator) Downstream(ctx context.Context, name string) (record.Downstream, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return record.Downstream{}, err
	}
	return op.store.Downstream(ctx, name)
}

// LimitsChange says which of a downstream's limits SetLimits changes: a
// nil field, and a false Remove flag, leave its limit as it is. Durations
// are whole milliseconds, as the database keeps them. Go 1.26's new(expr)
// writes a field: LimitsChange{Concurrency: new(5)}.
type LimitsChange struct {
	// Concurrency sets how many calls may run at once, per key (at least
	// 1).
	Concurrency *int
	// Rate, RateInterval and Burst set the rate limit: at most Rate starts
	// per RateInterval, per key, in bursts of at most Burst. A rate set on
	// a downstream without one takes an interval of 1s and a burst of 1
	// unless they are given; an interval or a burst alone needs a rate.
	Rate         *int
	RateInterval *time.Duration
	Burst        *int
	// RetryRatio and RetryPerSecond set the retry budget: retries of at
	// most RetryRatio times the first attempts plus RetryPerSecond a
	// second. One set on a downstream without a budget takes 0 for the
	// other.
	RetryRatio     *float64
	RetryPerSecond *float64
	// BreakerErrorRatio, BreakerMinCalls, BreakerWindow and BreakerOpenFor
	// set the circuit breaker (see flow.BreakerPolicy). A downstream
	// without a breaker gets one from BreakerErrorRatio, with the other
	// three as given or as its row holds them (by default 10 calls, 10s,
	// 5s); they alone need a breaker.
	BreakerErrorRatio *float64
	BreakerMinCalls   *int
	BreakerWindow     *time.Duration
	BreakerOpenFor    *time.Duration
	// RemoveConcurrency, RemoveRate, RemoveRetryBudget and RemoveBreaker
	// remove that limit; the fields that would set it must then be nil. A
	// breaker removed can still be opened by hand.
	RemoveConcurrency bool
	RemoveRate        bool
	RemoveRetryBudget bool
	RemoveBreaker     bool
}

// SetLimits changes a downstream's limits by hand, through the SQL function
// set_downstream, and returns the limits now in force. Every worker applies
// them at its next admission; runs waiting on a concurrency limit that
// rises are woken. The change is written to the audit log (action
// 'limits', with the limits before and after, the database role and note),
// and from then on the downstream is overridden: the limits its code
// declares are recorded but no longer applied, until ResetLimits.
//
// Limits that make no sense once changed (a concurrency below 1, a burst
// without a rate, a breaker ratio above 1, a change that sets and removes
// the same limit, or one that sets nothing) are refused before anything is
// sent, with an error wrapping flow.ErrInvalid that names the limit. A
// downstream without a row is an error wrapping ErrNoDownstream.
func (op *Operator) SetLimits(ctx context.Context, name string, change LimitsChange, note string) (flow.Limits, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return flow.Limits{}, err
	}
	body, err := change.encode()
	if err != nil {
		return flow.Limits{}, fmt.Errorf("set limits of downstream %q: %w", name, err)
	}
	d, err := op.store.Downstream(ctx, name)
	if err != nil {
		return flow.Limits{}, err
	}
	changed, err := change.apply(d.Limits)
	if err == nil {
		err = changed.Validate()
	}
	if err != nil {
		return flow.Limits{}, fmt.Errorf("set limits of downstream %q: %w", name, err)
	}
	return op.store.SetDownstream(ctx, name, body, note)
}

// ResetLimits gives a downstream back to the limits its code declared last,
// through the SQL function reset_downstream, audited with note, and returns
// them: from then on, declarations apply again.
func (op *Operator) ResetLimits(ctx context.Context, name, note string) (flow.Limits, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return flow.Limits{}, err
	}
	return op.store.ResetDownstream(ctx, name, note)
}

// OpenBreaker opens a downstream's circuit breaker by hand, through the SQL
// function open_breaker: no call of it starts until CloseBreaker, however
// its errors go (a breaker opened by hand sends no probe). Steps that would
// call it wait, charged nothing. The change is written to the audit log
// (action 'breaker', note as its reason; "" records "opened by hand").
func (op *Operator) OpenBreaker(ctx context.Context, name, note string) error {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return err
	}
	return op.store.OpenBreaker(ctx, name, note)
}

// CloseBreaker closes a downstream's circuit breaker by hand, through the
// SQL function close_breaker, and wakes every run waiting on it; audited as
// OpenBreaker is ("" records "closed by hand"). It also closes a breaker
// that opened by itself, without waiting for its probe.
func (op *Operator) CloseBreaker(ctx context.Context, name, note string) error {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return err
	}
	return op.store.CloseBreaker(ctx, name, note)
}

// BreakerHistory returns the newest changes of a downstream's breaker
// state, newest first (every downstream's when name is empty), at most
// limit (0: 100): the view breaker_history.
func (op *Operator) BreakerHistory(ctx context.Context, name string, limit int) ([]record.BreakerChange, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.BreakerHistory(ctx, name, limit)
}

// encode is the change as set_downstream's JSON: the keys of flow.Limits'
// JSON that change, null for a limit removed. It refuses a change that sets
// nothing, sets and removes one limit, or holds a value no limit can take.
func (c LimitsChange) encode() ([]byte, error) {
	j := map[string]any{}
	var bad []error
	set := func(key string, v any, ok bool) {
		if ok {
			j[key] = v
		}
	}
	ms := func(what, key string, d *time.Duration) {
		if d == nil {
			return
		}
		if *d < time.Millisecond || *d%time.Millisecond != 0 {
			bad = append(bad, fmt.Errorf("%s = %s: a whole number of milliseconds, at least 1ms: %w", what, *d, flow.ErrInvalid))
			return
		}
		j[key] = d.Milliseconds()
	}
	set("concurrency", c.Concurrency, c.Concurrency != nil)
	set("rate", c.Rate, c.Rate != nil)
	ms("rate interval", "rate_interval_ms", c.RateInterval)
	set("burst", c.Burst, c.Burst != nil)
	set("retry_ratio", c.RetryRatio, c.RetryRatio != nil)
	set("retry_per_s", c.RetryPerSecond, c.RetryPerSecond != nil)
	set("breaker_error_ratio", c.BreakerErrorRatio, c.BreakerErrorRatio != nil)
	set("breaker_min_calls", c.BreakerMinCalls, c.BreakerMinCalls != nil)
	ms("breaker window", "breaker_window_ms", c.BreakerWindow)
	ms("breaker open time", "breaker_open_ms", c.BreakerOpenFor)
	for _, f := range []struct {
		what string
		x    *float64
	}{{"retry ratio", c.RetryRatio}, {"retries per second", c.RetryPerSecond}, {"breaker error ratio", c.BreakerErrorRatio}} {
		if f.x != nil && (math.IsNaN(*f.x) || math.IsInf(*f.x, 0)) {
			bad = append(bad, fmt.Errorf("%s = %v: a finite number: %w", f.what, *f.x, flow.ErrInvalid))
		}
	}
	if c.Concurrency != nil && *c.Concurrency < 1 {
		bad = append(bad, fmt.Errorf("concurrency = %d: at least 1, or remove the limit: %w", *c.Concurrency, flow.ErrInvalid))
	}
	for _, r := range []struct {
		remove bool
		what   string
		key    string
		sets   bool
	}{
		{c.RemoveConcurrency, "concurrency", "concurrency", c.Concurrency != nil},
		{c.RemoveRate, "rate", "rate", c.Rate != nil || c.RateInterval != nil || c.Burst != nil},
		{c.RemoveRetryBudget, "retry budget", "retry_ratio", c.RetryRatio != nil || c.RetryPerSecond != nil},
		{c.RemoveBreaker, "breaker", "breaker_error_ratio", c.BreakerErrorRatio != nil || c.BreakerMinCalls != nil || c.BreakerWindow != nil || c.BreakerOpenFor != nil},
	} {
		if r.remove && r.sets {
			bad = append(bad, fmt.Errorf("the %s is both set and removed: %w", r.what, flow.ErrInvalid))
		}
		if r.remove {
			j[r.key] = nil
		}
	}
	if len(j) == 0 && len(bad) == 0 {
		bad = append(bad, fmt.Errorf("the change sets and removes nothing: %w", flow.ErrInvalid))
	}
	if err := errors.Join(bad...); err != nil {
		return nil, err
	}
	return json.Marshal(j)
}

// apply returns l changed by c, as set_downstream changes a row (see the
// fields' comments), for Validate; or an error wrapping flow.ErrInvalid for
// a setting of a limit l does not have, without the field that adds it. A
// breaker's settings that the row holds without a breaker are unknown here:
// they take the defaults, which are valid, as any the row holds is.
func (c LimitsChange) apply(l flow.Limits) (flow.Limits, error) {
	if c.Concurrency != nil {
		l.Concurrency = *c.Concurrency
	}
	if c.RemoveConcurrency {
		l.Concurrency = 0
	}
	var err error
	if l.Rate, err = c.applyRate(l.Rate); err != nil {
		return l, err
	}
	l.RetryBudget = c.applyRetryBudget(l.RetryBudget)
	l.Breaker, err = c.applyBreaker(l.Breaker)
	return l, err
}

func (c LimitsChange) applyRate(r *flow.RateLimit) (*flow.RateLimit, error) {
	switch {
	case c.RemoveRate:
		return nil, nil
	case c.Rate == nil && c.RateInterval == nil && c.Burst == nil:
		return r, nil
	case r == nil && c.Rate == nil:
		return nil, fmt.Errorf("a rate interval or burst needs a rate: the downstream has no rate limit: %w", flow.ErrInvalid)
	case r == nil:
		r = &flow.RateLimit{Per: time.Second, Burst: 1}
	default:
		r = &flow.RateLimit{N: r.N, Per: r.Per, Burst: r.Burst}
	}
	if c.Rate != nil {
		r.N = *c.Rate
	}
	if c.RateInterval != nil {
		r.Per = *c.RateInterval
	}
	if c.Burst != nil {
		r.Burst = *c.Burst
	}
	return r, nil
}

func (c LimitsChange) applyRetryBudget(b *flow.RetryBudget) *flow.RetryBudget {
	switch {
	case c.RemoveRetryBudget:
		return nil
	case c.RetryRatio == nil && c.RetryPerSecond == nil:
		return b
	case b == nil:
		b = &flow.RetryBudget{}
	default:
		b = &flow.RetryBudget{Ratio: b.Ratio, PerSecond: b.PerSecond}
	}
	if c.RetryRatio != nil {
		b.Ratio = *c.RetryRatio
	}
	if c.RetryPerSecond != nil {
		b.PerSecond = *c.RetryPerSecond
	}
	return b
}

func (c LimitsChange) applyBreaker(b *flow.BreakerPolicy) (*flow.BreakerPolicy, error) {
	var p flow.BreakerPolicy
	switch {
	case c.RemoveBreaker:
		return nil, nil
	case c.BreakerErrorRatio == nil && c.BreakerMinCalls == nil && c.BreakerWindow == nil && c.BreakerOpenFor == nil:
		return b, nil
	case b == nil && c.BreakerErrorRatio == nil:
		return nil, fmt.Errorf("breaker settings need an error ratio: the downstream has no breaker: %w", flow.ErrInvalid)
	case b == nil:
		p = flow.BreakerPolicy{MinCalls: 10, Window: 10 * time.Second, OpenFor: 5 * time.Second}
	default:
		p = *b
	}
	if c.BreakerErrorRatio != nil {
		p.ErrorRatio = *c.BreakerErrorRatio
	}
	if c.BreakerMinCalls != nil {
		p.MinCalls = *c.BreakerMinCalls
	}
	if c.BreakerWindow != nil {
		p.Window = *c.BreakerWindow
	}
	if c.BreakerOpenFor != nil {
		p.OpenFor = *c.BreakerOpenFor
	}
	return &p, nil
}
