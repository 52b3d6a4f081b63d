package policy

// Default returns the package defaults: DefaultMaxAttempts attempts,
// DefaultMaxRescues rescues, exponential backoff from DefaultInitialInterval by
// DefaultBackoffFactor up to DefaultMaxInterval, DefaultJitter, Retry-After
// hints up to DefaultMaxRetryAfter, no attempt timeout, no deadline, no rules.
func Default() Retry {
	return Retry{
		MaxAttempts: DefaultMaxAttempts,
		MaxRescues:  DefaultMaxRescues,
		Backoff: Backoff{
			Kind:    ExponentialBackoff,
			Initial: DefaultInitialInterval,
			Factor:  DefaultBackoffFactor,
			Max:     DefaultMaxInterval,
		},
		Jitter:         DefaultJitter,
		MaxRetryAfter:  DefaultMaxRetryAfter,
		AttemptTimeout: DefaultAttemptTimeout,
		Deadline:       DefaultDeadline,
	}
}

// New builds a policy from the package defaults and opts, and validates it.
// It is Resolve with a single layer.
func New(opts ...Option) (Retry, error) {
	return Resolve(opts)
}

// Resolve is the merge function for policies. It starts from Default and
// applies each layer's options in turn, so later layers win field by field;
// the runtime calls it as
//
//	Resolve(workerDefaults, activityDefaults, callOptions)
//
// which gives the precedence call option > activity default > worker default >
// package default. Within a layer, later options win too, except for the
// AtMostOnce/MaxRescues conflict, which does not depend on order.
//
// Rules are resolved last: each rule's options are applied over the merged
// policy without its rules and its RetryIf predicate, so a rule that sets
// only MaxAttempts keeps the merged backoff. The result is validated; a bad
// value anywhere, rules included, is returned as a *ValidationError together
// with the merged policy.
func Resolve(layers ...[]Option) (Retry, error) {
	r := Default()
	for _, layer := range layers {
		r.applyLayer(layer)
	}
	r.resolveRules()
	if err := r.Validate(); err != nil {
		return r, err
	}
	return r, nil
}

// applyLayer applies one layer of options and then enforces AtMostOnce, so
// that the order of AtMostOnce and MaxRescues within the layer does not
// matter.
func (r *Retry) applyLayer(opts []Option) {
	r.rescuesSet = false
	for _, opt := range opts {
		if opt != nil {
			opt(r)
		}
	}
	if r.AtMostOnce {
		if r.rescuesSet && r.MaxRescues > 0 && r.rescueConflict == 0 {
			r.rescueConflict = r.MaxRescues
		}
		if r.MaxRescues > 0 {
			r.MaxRescues = 0
		}
	}
	r.rescuesSet = false
}

// resolveRules computes each rule's policy from the merged policy and the
// rule's options.
func (r *Retry) resolveRules() {
	if len(r.Rules) == 0 {
		return
	}
	base := *r
	base.Rules = nil
	// A rule classifies its errors itself: the base predicate does not
	// apply to them unless the rule's options set one.
	base.retryIf, base.retryIfProblem = nil, ""
	rules := make([]Rule, len(r.Rules))
	for i, rule := range r.Rules {
		p := base
		p.rescueConflict = 0
		p.applyLayer(rule.opts)
		p.resolveRules()
		rule.Policy = p
		rules[i] = rule
	}
	r.Rules = rules
}
