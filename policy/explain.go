package policy

import (
	"fmt"
	"strings"
	"time"
)

// Limits that keep Explain fast for policies that retry (nearly) forever.
const (
	// explainListLimit is the number of delays Explain lists.
	explainListLimit = 1000
	// explainComputeLimit is the number of delays Explain computes one by
	// one before it bounds the rest by the shape's largest delay.
	explainComputeLimit = 100_000
)

// Explanation is the delay timeline of a policy, for docs, the CLI and tests.
type Explanation struct {
	// Policy is the policy explained.
	Policy Retry
	// Steps lists the delay after each failed attempt but the last, that
	// is before attempts 2 … MaxAttempts, at most 1000 of them.
	Steps []ExplainedAttempt
	// Omitted counts the delays after the last listed one.
	Omitted int
	// WorstCase is the longest the step can take when every attempt fails:
	// the sum of the largest delays, plus MaxAttempts·AttemptTimeout if
	// AttemptTimeout is set. It does not count Retry-After hints, and it is
	// not cut by the deadline (see Warnings). It saturates instead of
	// overflowing.
	WorstCase time.Duration
	// Warnings say where the policy cannot keep its promises, chiefly when
	// it cannot fit its deadline.
	Warnings []string
	// Rules explains the policy of each rule, in order.
	Rules []RuleExplanation
}

// ExplainedAttempt gives the range of the delay after attempt Attempt failed,
// that is before attempt Attempt+1, with jitter taken into account.
type ExplainedAttempt struct {
	// Attempt is the number of the failed attempt.
	Attempt int
	// Min is the shortest delay.
	Min time.Duration
	// Max is the longest delay.
	Max time.Duration
}

// RuleExplanation is the explanation of one rule's policy.
type RuleExplanation struct {
	// Match is the rule's Match.
	Match string
	// Explanation explains the rule's policy.
	Explanation Explanation
}

// Explain returns the delay timeline of r: the smallest and largest delay
// after each failed attempt, the worst-case total time, and warnings when r
// cannot fit its deadline. For DecorrelatedJitter the largest delay assumes
// every earlier draw was the largest. Explain works on any policy, also one
// that fails Validate, such as a policy restored from JSON with a function
// backoff, whose delays it shows as 0 with a warning.
func Explain(r Retry) Explanation {
	e := Explanation{Policy: r}
	retries := max(r.MaxAttempts-1, 0)
	var (
		total    time.Duration // sum of the largest delays
		earliest time.Duration // sum of the smallest delays: earliest start of the next attempt
		prevMax  time.Duration
		starts   = 1 // attempts that can start before the deadline; the first starts at 0
	)
	add := func(n, count int, lo, hi time.Duration) {
		listed := min(count, max(explainListLimit-len(e.Steps), 0))
		for i := range listed {
			e.Steps = append(e.Steps, ExplainedAttempt{Attempt: n + i, Min: lo, Max: hi})
		}
		e.Omitted += count - listed
		total = addSat(total, mulSat(hi, int64(count)))
		starts += startable(r.Deadline, earliest, lo, count)
		earliest = addSat(earliest, mulSat(lo, int64(count)))
	}
	for n := 1; n <= retries; n++ {
		base := r.Backoff.Delay(n)
		lo, hi := r.jitterRange(base, prevMax)
		if r.settled(n, hi) {
			add(n, retries-n+1, lo, hi)
			break
		}
		if n > explainComputeLimit {
			rest := retries - n + 1
			if _, largest, ok := r.Backoff.bounds(); ok {
				add(n, rest, 0, largest)
				e.Warnings = append(e.Warnings, fmt.Sprintf("delays after attempt %d are bounded by the largest delay %s, so the worst case is an upper bound", explainComputeLimit, largest))
			} else {
				e.Omitted += rest
				e.Warnings = append(e.Warnings, fmt.Sprintf("the worst case counts only the first %d delays of the function backoff", explainComputeLimit))
			}
			break
		}
		add(n, 1, lo, hi)
		prevMax = hi
	}
	if r.AttemptTimeout > 0 {
		total = addSat(total, mulSat(r.AttemptTimeout, int64(max(r.MaxAttempts, 0))))
	}
	e.WorstCase = total
	e.Warnings = append(e.Warnings, r.deadlineWarnings(total, starts)...)
	if r.Backoff.Kind == FuncBackoff && r.Backoff.Func == nil {
		e.Warnings = append(e.Warnings, "the backoff function is not available (a policy restored from JSON): its delays are shown as 0")
	}
	for _, rule := range r.Rules {
		e.Rules = append(e.Rules, RuleExplanation{Match: rule.Match, Explanation: Explain(rule.Policy)})
	}
	return e
}

// settled reports whether every delay from the n-th on has the range of the
// n-th, whose largest value is hi.
func (r Retry) settled(n int, hi time.Duration) bool {
	if !r.Backoff.settled(n) {
		return false
	}
	if r.Jitter != DecorrelatedJitter {
		return true
	}
	_, largest, _ := r.Backoff.bounds()
	return hi >= largest
}

// startable counts how many of count attempts, each waiting at least lo
// after the previous one, the first of them lo after earliest, start before
// deadline.
func startable(deadline, earliest, lo time.Duration, count int) int {
	if deadline <= 0 {
		return count
	}
	if earliest >= deadline {
		return 0
	}
	if lo <= 0 {
		return count
	}
	return int(min(int64(count), int64((deadline-earliest-1)/lo)))
}

// deadlineWarnings explains how the deadline limits the policy.
func (r Retry) deadlineWarnings(worst time.Duration, starts int) []string {
	if r.Deadline <= 0 {
		return nil
	}
	var w []string
	if r.AttemptTimeout > r.Deadline {
		w = append(w, fmt.Sprintf("attempt_timeout %s exceeds deadline %s: attempts are cut at the deadline", r.AttemptTimeout, r.Deadline))
	}
	switch {
	case starts < r.MaxAttempts:
		w = append(w, fmt.Sprintf("deadline %s: only %d of %d attempts can start, even with the shortest delays", r.Deadline, starts, r.MaxAttempts))
	case worst > r.Deadline:
		w = append(w, fmt.Sprintf("worst case %s exceeds deadline %s: the step may give up with deadline_exceeded before its last attempt", worst, r.Deadline))
	}
	return w
}

// String renders the explanation as text for the CLI: the policy, one line per
// delay (runs of equal delays share a line), the worst case, the warnings and
// the rules.
func (e Explanation) String() string {
	var b strings.Builder
	e.write(&b, "")
	return b.String()
}

// write renders the explanation with every line indented by indent.
func (e Explanation) write(b *strings.Builder, indent string) {
	fmt.Fprintf(b, "%spolicy: %s\n", indent, e.Policy)
	if len(e.Steps) == 0 {
		fmt.Fprintf(b, "%sno retries\n", indent)
	} else {
		fmt.Fprintf(b, "%s%-14s %s\n", indent, "after attempt", "delay")
	}
	for i := 0; i < len(e.Steps); {
		s := e.Steps[i]
		j := i + 1
		for j < len(e.Steps) && e.Steps[j].Min == s.Min && e.Steps[j].Max == s.Max {
			j++
		}
		label := fmt.Sprint(s.Attempt)
		if j-i > 1 {
			label = fmt.Sprintf("%d-%d", s.Attempt, e.Steps[j-1].Attempt)
		}
		delay := s.Min.String()
		if s.Max != s.Min {
			delay = s.Min.String() + " .. " + s.Max.String()
		}
		fmt.Fprintf(b, "%s%-14s %s\n", indent, label, delay)
		i = j
	}
	if e.Omitted > 0 {
		fmt.Fprintf(b, "%s… %d more delays not listed\n", indent, e.Omitted)
	}
	fmt.Fprintf(b, "%sworst case: %s\n", indent, e.WorstCase)
	for _, w := range e.Warnings {
		fmt.Fprintf(b, "%swarning: %s\n", indent, w)
	}
	for _, rule := range e.Rules {
		fmt.Fprintf(b, "%srule %q:\n", indent, rule.Match)
		rule.Explanation.write(b, indent+"  ")
	}
}
