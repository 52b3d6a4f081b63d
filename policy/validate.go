package policy

import (
	"errors"
	"fmt"
	"math"
)

// ValidationError reports a policy field with a value that makes no sense.
// New, Resolve and Validate return it; match it with errors.As.
type ValidationError struct {
	// Field is the field's JSON name, with a path for nested fields, e.g.
	// "max_attempts", "backoff.factor" or "rules[0].max_attempts".
	Field string
	// Value is the offending value.
	Value any
	// Reason says what the field requires.
	Reason string
}

// Error names the field, its value and the requirement, e.g.
// "policy: max_attempts = 0: must be at least 1".
func (e *ValidationError) Error() string {
	return fmt.Sprintf("policy: %s = %v: %s", e.Field, e.Value, e.Reason)
}

// Validate checks that the policy makes sense and returns the first problem
// as a *ValidationError, or nil. It checks the policies of rules too, naming
// their fields "rules[i].<field>". Validate never panics.
func (r Retry) Validate() error {
	if err := r.validateFields(); err != nil {
		return err
	}
	for i, rule := range r.Rules {
		if err := r.validateRule(rule); err != nil {
			var ve *ValidationError
			if errors.As(err, &ve) {
				return &ValidationError{Field: fmt.Sprintf("rules[%d].%s", i, ve.Field), Value: ve.Value, Reason: ve.Reason}
			}
			return err
		}
	}
	return nil
}

// validateFields checks everything but the rules.
func (r Retry) validateFields() error {
	invalid := func(field string, value any, reason string) error {
		return &ValidationError{Field: field, Value: value, Reason: reason}
	}
	switch {
	case r.MaxAttempts < 1:
		return invalid("max_attempts", r.MaxAttempts, "must be at least 1")
	case r.MaxRescues < 0:
		return invalid("max_rescues", r.MaxRescues, "must be at least 0")
	case r.rescueConflict > 0:
		return invalid("max_rescues", r.rescueConflict, "must be 0 with at_most_once, which forbids rerunning a lost attempt")
	case r.AtMostOnce && r.MaxRescues != 0:
		return invalid("max_rescues", r.MaxRescues, "must be 0 with at_most_once, which forbids rerunning a lost attempt")
	}
	if err := r.Backoff.validate(); err != nil {
		return err
	}
	switch {
	case r.Jitter < NoJitter || r.Jitter > DecorrelatedJitter:
		return invalid("jitter", r.Jitter, "unknown jitter kind")
	case r.Jitter == DecorrelatedJitter && r.Backoff.Kind == FuncBackoff:
		return invalid("jitter", r.Jitter, "decorrelated jitter needs a backoff with known bounds, not a function")
	case r.Jitter == DecorrelatedJitter && r.Backoff.Delay(1) == 0:
		return invalid("jitter", r.Jitter, "decorrelated jitter needs a first delay above 0")
	case r.MaxRetryAfter < 0:
		return invalid("max_retry_after", r.MaxRetryAfter, "must be at least 0 (0 ignores Retry-After hints)")
	case r.AttemptTimeout < 0:
		return invalid("attempt_timeout", r.AttemptTimeout, "must be at least 0 (0 means no limit)")
	case r.Deadline < 0:
		return invalid("deadline", r.Deadline, "must be at least 0 (0 means no limit)")
	case r.retryIfProblem != "":
		return invalid("retry_if", "func", r.retryIfProblem)
	}
	return nil
}

// validateRule checks one rule against its base policy r. Field names are
// relative to the rule.
func (r Retry) validateRule(rule Rule) error {
	invalid := func(field string, value any, reason string) error {
		return &ValidationError{Field: field, Value: value, Reason: reason}
	}
	p := rule.Policy
	switch {
	case rule.matches == nil && rule.problem != "":
		return invalid("match", rule.Match, rule.problem)
	case rule.matches == nil:
		return invalid("match", rule.Match, "rule has no matcher; build rules with On or OnType")
	case len(p.Rules) > 0:
		return invalid("rules", len(p.Rules), "a rule's policy cannot have rules of its own")
	case p.AtMostOnce != r.AtMostOnce:
		return invalid("at_most_once", p.AtMostOnce, "belongs to the step, not to an error rule; set it on the base policy")
	case p.MaxRescues != r.MaxRescues || p.rescueConflict > 0:
		return invalid("max_rescues", p.MaxRescues, "the rescue budget belongs to the step, not to an error rule; set it on the base policy")
	}
	return p.validateFields()
}

// validate checks the fields the backoff's kind uses. Field names are
// prefixed with "backoff.".
func (b Backoff) validate() error {
	invalid := func(field string, value any, reason string) error {
		return &ValidationError{Field: "backoff." + field, Value: value, Reason: reason}
	}
	switch b.Kind {
	case ExponentialBackoff:
		switch {
		case b.Initial <= 0:
			return invalid("initial", b.Initial, "must be above 0")
		case !(b.Factor >= 1):
			return invalid("factor", b.Factor, "must be at least 1")
		case math.IsInf(b.Factor, 0):
			return invalid("factor", b.Factor, "must be finite")
		case b.Max < b.Initial:
			return invalid("max", b.Max, fmt.Sprintf("must be at least initial (%s)", b.Initial))
		}
	case ConstantBackoff:
		if b.Initial < 0 {
			return invalid("delay", b.Initial, "must be at least 0")
		}
	case LinearBackoff:
		switch {
		case b.Initial < 0:
			return invalid("initial", b.Initial, "must be at least 0")
		case b.Step <= 0:
			return invalid("step", b.Step, "must be above 0 (use Constant for a fixed delay)")
		case b.Max <= 0:
			return invalid("max", b.Max, "must be above 0")
		case b.Max < b.Initial:
			return invalid("max", b.Max, fmt.Sprintf("must be at least initial (%s)", b.Initial))
		}
	case ScheduleBackoff:
		if len(b.Delays) == 0 {
			return invalid("delays", "[]", "must list at least one delay")
		}
		for i, d := range b.Delays {
			if d < 0 {
				return invalid(fmt.Sprintf("delays[%d]", i), d, "must be at least 0")
			}
		}
	case FuncBackoff:
		if b.Func == nil && b.restored {
			return invalid("func", "func", "a function cannot be restored from JSON; rebuild the policy with BackoffFunc")
		}
		if b.Func == nil {
			return invalid("func", nil, "must not be nil")
		}
	default:
		return invalid("kind", b.Kind, "unknown backoff kind")
	}
	return nil
}
