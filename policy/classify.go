package policy

import (
	"errors"
	"fmt"
	"reflect"
)

// Permanent marks err as not worth retrying: Decide gives up with
// non_retryable whatever the rules and RetryIf say. The result wraps err, so
// errors.Is and errors.As still see it and its message is unchanged.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or any error it wraps, was marked with
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// permanentError is the wrapper made by Permanent.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// RetryIf sets the predicate that decides whether an error is worth retrying;
// false makes Decide give up with non_retryable. It is consulted after
// Permanent and the rules, for errors no rule matched, and never with a nil
// error. A rule classifies its own errors: it does not inherit the predicate,
// but RetryIf among its options gives it one. pred must not be nil. Without
// RetryIf every error is retried.
func RetryIf(pred func(error) bool) Option {
	return func(r *Retry) {
		r.retryIf = pred
		r.retryIfProblem = ""
		if pred == nil {
			r.retryIfProblem = "must not be nil"
		}
	}
}

// Rule gives the errors it matches their own policy. Build rules with On and
// OnType; Decide uses the first rule that matches.
type Rule struct {
	// Match describes what the rule matches: the target's message for On,
	// the type name for OnType.
	Match string
	// Policy is the rule's options applied over the merged policy, computed
	// by Resolve. It has no rules of its own, and a RetryIf predicate only
	// if the rule's options set one.
	Policy Retry

	// matches reports whether an error is the rule's; nil if the rule
	// cannot match (see problem).
	matches func(error) bool
	// key identifies the rule's target so a higher layer can replace it:
	// the target error for On (when comparable), the type for OnType.
	key any
	// opts are applied over the merged policy to give Policy.
	opts []Option
	// problem explains why matches is nil.
	problem string
}

// On adds a rule for errors that match target with errors.Is. The rule's
// policy is opts applied over the merged policy, so it changes only what
// opts set. A rule for the same target declared again, for example by a
// per-call option over an activity default, replaces the earlier one in
// place. target must not be nil.
func On(target error, opts ...Option) Option {
	rule := Rule{opts: append([]Option(nil), opts...)}
	if target == nil {
		rule.Match = "<nil>"
		rule.problem = "target error must not be nil"
	} else {
		rule.Match = message(target)
		rule.matches = func(err error) bool { return errors.Is(err, target) }
		if reflect.TypeOf(target).Comparable() {
			rule.key = target
		}
	}
	return addRule(rule)
}

// OnType adds a rule for errors that errors.As can assign to E, such as
// *RateLimitError or an interface type. Like On, its policy is opts applied
// over the merged policy, and a rule for the same type declared again
// replaces the earlier one.
func OnType[E error](opts ...Option) Option {
	t := reflect.TypeFor[E]()
	return addRule(Rule{
		Match: t.String(),
		key:   t,
		opts:  append([]Option(nil), opts...),
		matches: func(err error) bool {
			var target E
			return errors.As(err, &target)
		},
	})
}

// message returns err's message, or its type if Error panics (a nil
// pointer with a value method, say), so that declaring a rule never panics.
func message(err error) (msg string) {
	defer func() {
		if recover() != nil {
			msg = fmt.Sprintf("%T", err)
		}
	}()
	return err.Error()
}

// addRule appends rule, or replaces an earlier rule with the same key.
func addRule(rule Rule) Option {
	return func(r *Retry) {
		for i := range r.Rules {
			if sameKey(r.Rules[i].key, rule.key) {
				rules := append([]Rule(nil), r.Rules...)
				rules[i] = rule
				r.Rules = rules
				return
			}
		}
		r.Rules = append(r.Rules[:len(r.Rules):len(r.Rules)], rule)
	}
}

// sameKey reports whether two rule keys name the same target. Keys are
// comparable types, but a comparable struct may hold an incomparable value in
// an interface field; such keys are treated as different rather than panic.
func sameKey(a, b any) (same bool) {
	if a == nil || b == nil {
		return false
	}
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// effective returns the policy that governs err: the policy of the first
// rule that matches, or r.
func (r Retry) effective(err error) Retry {
	if err == nil {
		return r
	}
	for _, rule := range r.Rules {
		if rule.matches != nil && rule.matches(err) {
			return rule.Policy
		}
	}
	return r
}
