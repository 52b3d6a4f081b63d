package policy

import (
	"encoding/json"
	"fmt"
	"time"
)

// notRestorable is the problem recorded for functions lost in JSON.
const notRestorable = "a function cannot be restored from JSON; rebuild the policy with "

// retryJSON is the JSON form of Retry. Pointers tell a missing field, which
// keeps its default, from a zero one.
type retryJSON struct {
	MaxAttempts    *int          `json:"max_attempts"`
	MaxRescues     *int          `json:"max_rescues"`
	AtMostOnce     *bool         `json:"at_most_once"`
	Backoff        *backoffJSON  `json:"backoff"`
	Jitter         *JitterKind   `json:"jitter"`
	MaxRetryAfter  *jsonDuration `json:"max_retry_after"`
	AttemptTimeout *jsonDuration `json:"attempt_timeout"`
	Deadline       *jsonDuration `json:"deadline"`
	RetryIf        string        `json:"retry_if,omitempty"`
	Rules          []ruleJSON    `json:"rules,omitempty"`
}

// backoffJSON is the JSON form of Backoff; only the kind's fields are set.
type backoffJSON struct {
	Kind    string         `json:"kind"`
	Initial *jsonDuration  `json:"initial,omitempty"`
	Delay   *jsonDuration  `json:"delay,omitempty"`
	Factor  *float64       `json:"factor,omitempty"`
	Step    *jsonDuration  `json:"step,omitempty"`
	Max     *jsonDuration  `json:"max,omitempty"`
	Delays  []jsonDuration `json:"delays,omitempty"`
}

// ruleJSON is the JSON form of Rule.
type ruleJSON struct {
	Match  string `json:"match"`
	Policy Retry  `json:"policy"`
}

// jsonDuration is a Duration written as a Go duration string such as "1m30s".
type jsonDuration time.Duration

func (d jsonDuration) MarshalText() ([]byte, error) {
	return []byte(time.Duration(d).String()), nil
}

func (d *jsonDuration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = jsonDuration(v)
	return nil
}

// durationPtr returns a pointer to d as a jsonDuration.
func durationPtr(d time.Duration) *jsonDuration {
	j := jsonDuration(d)
	return &j
}

// MarshalJSON writes the policy with snake_case keys and durations as Go
// duration strings, e.g.
//
//	{"max_attempts":3,"max_rescues":3,"at_most_once":false,
//	 "backoff":{"kind":"exponential","initial":"1s","factor":2,"max":"1m0s"},
//	 "jitter":"full","max_retry_after":"1h0m0s","attempt_timeout":"0s","deadline":"0s"}
//
// A function backoff is written as {"kind":"func"}, a RetryIf predicate as
// "retry_if":"func", and each rule as {"match": <error text or type name>,
// "policy": {...}}. Functions and rule matchers cannot be written, so they do
// not survive a round trip (see UnmarshalJSON).
func (r Retry) MarshalJSON() ([]byte, error) {
	jitter := r.Jitter
	j := retryJSON{
		MaxAttempts:    &r.MaxAttempts,
		MaxRescues:     &r.MaxRescues,
		AtMostOnce:     &r.AtMostOnce,
		Backoff:        r.Backoff.toJSON(),
		Jitter:         &jitter,
		MaxRetryAfter:  durationPtr(r.MaxRetryAfter),
		AttemptTimeout: durationPtr(r.AttemptTimeout),
		Deadline:       durationPtr(r.Deadline),
	}
	if r.retryIf != nil || r.retryIfProblem != "" {
		j.RetryIf = "func"
	}
	for _, rule := range r.Rules {
		j.Rules = append(j.Rules, ruleJSON{Match: rule.Match, Policy: rule.Policy})
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads a policy written by MarshalJSON. Missing fields keep
// their package defaults. Malformed JSON, durations or kinds are errors, but
// the result is not validated, so that a stored policy can always be read and
// explained.
//
// Everything but functions round-trips. A function backoff comes back with a
// nil Func, a "retry_if":"func" comes back without a predicate, and rules come
// back with their Match and Policy but without a matcher. Validate reports
// each of these with a message saying it cannot be restored, so such a policy
// can be explained but not used to decide until it is rebuilt from options.
func (r *Retry) UnmarshalJSON(data []byte) error {
	var j retryJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	p := Default()
	if j.MaxAttempts != nil {
		p.MaxAttempts = *j.MaxAttempts
	}
	if j.MaxRescues != nil {
		p.MaxRescues = *j.MaxRescues
	}
	if j.AtMostOnce != nil {
		p.AtMostOnce = *j.AtMostOnce
	}
	if j.Backoff != nil {
		b, err := j.Backoff.toBackoff()
		if err != nil {
			return err
		}
		p.Backoff = b
	}
	if j.Jitter != nil {
		p.Jitter = *j.Jitter
	}
	if j.MaxRetryAfter != nil {
		p.MaxRetryAfter = time.Duration(*j.MaxRetryAfter)
	}
	if j.AttemptTimeout != nil {
		p.AttemptTimeout = time.Duration(*j.AttemptTimeout)
	}
	if j.Deadline != nil {
		p.Deadline = time.Duration(*j.Deadline)
	}
	if j.RetryIf != "" {
		p.retryIfProblem = notRestorable + "RetryIf"
	}
	for _, rule := range j.Rules {
		p.Rules = append(p.Rules, Rule{
			Match:   rule.Match,
			Policy:  rule.Policy,
			problem: "a rule's matcher cannot be restored from JSON; rebuild the rule with On or OnType",
		})
	}
	*r = p
	return nil
}

// toJSON returns the JSON form of the backoff.
func (b Backoff) toJSON() *backoffJSON {
	j := &backoffJSON{Kind: b.Kind.String()}
	switch b.Kind {
	case ExponentialBackoff:
		factor := b.Factor
		j.Initial, j.Factor, j.Max = durationPtr(b.Initial), &factor, durationPtr(b.Max)
	case ConstantBackoff:
		j.Delay = durationPtr(b.Initial)
	case LinearBackoff:
		j.Initial, j.Step, j.Max = durationPtr(b.Initial), durationPtr(b.Step), durationPtr(b.Max)
	case ScheduleBackoff:
		j.Delays = make([]jsonDuration, len(b.Delays))
		for i, d := range b.Delays {
			j.Delays[i] = jsonDuration(d)
		}
	}
	return j
}

// toBackoff returns the backoff a backoffJSON describes. Missing fields are 0.
func (j backoffJSON) toBackoff() (Backoff, error) {
	get := func(d *jsonDuration) time.Duration {
		if d == nil {
			return 0
		}
		return time.Duration(*d)
	}
	b := Backoff{Initial: get(j.Initial), Step: get(j.Step), Max: get(j.Max)}
	if j.Factor != nil {
		b.Factor = *j.Factor
	}
	switch j.Kind {
	case "exponential":
		b.Kind = ExponentialBackoff
	case "constant":
		b.Kind, b.Initial = ConstantBackoff, get(j.Delay)
	case "linear":
		b.Kind = LinearBackoff
	case "schedule":
		b.Kind = ScheduleBackoff
		b.Delays = make([]time.Duration, len(j.Delays))
		for i, d := range j.Delays {
			b.Delays[i] = time.Duration(d)
		}
	case "func":
		b.Kind, b.restored = FuncBackoff, true
	default:
		return Backoff{}, fmt.Errorf("policy: unknown backoff kind %q", j.Kind)
	}
	return b, nil
}

// MarshalText returns the kind's name: "none", "full", "equal" or
// "decorrelated". An unknown kind is an error.
func (k JitterKind) MarshalText() ([]byte, error) {
	if k < NoJitter || k > DecorrelatedJitter {
		return nil, fmt.Errorf("policy: unknown jitter kind %d", int(k))
	}
	return []byte(k.String()), nil
}

// UnmarshalText sets the kind from its name as returned by String.
func (k *JitterKind) UnmarshalText(b []byte) error {
	for c := NoJitter; c <= DecorrelatedJitter; c++ {
		if c.String() == string(b) {
			*k = c
			return nil
		}
	}
	return fmt.Errorf("policy: unknown jitter kind %q", b)
}
