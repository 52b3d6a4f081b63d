package ui

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
)

// A run that failed indeterminate lost an attempt of an at-most-once
// activity: nobody knows whether it took effect (a payment made, a parcel
// shipped). A requeue invokes the activity again, so its effect may happen
// twice. Every requeue surface names those activities, and a confirm that
// puts such runs back must say, activity by activity, that someone checked
// the effect did not happen: the server refuses it otherwise.

// checkedField is the form field of a confirm that says someone checked that
// an at-most-once activity did not take effect: one value per activity.
const checkedField = "checked"

// skipField is the form field of a confirm that requeues only the runs that
// did not fail indeterminate, leaving those failed.
const skipField = "skip_indeterminate"

// lostEffect is an at-most-once activity whose attempt was lost in Runs of
// the runs a requeue would put back.
type lostEffect struct {
	Activity string
	Runs     int
}

// checked decides which of p's failures a confirm puts back, and with what
// audit note: all of them when the form says every lost effect was checked,
// the others alone (skip) when it asks to skip the indeterminate ones and
// there are others. ok is false when it does neither while some failed
// indeterminate: p then says why, and nothing may be requeued.
func (p *previewPage) checked(form url.Values) (skip bool, note string, ok bool) {
	if len(p.Lost) == 0 {
		return false, p.Note, true
	}
	if form.Get(skipField) == "1" && p.Others > 0 {
		return true, skippedNote(p.Note, p.Lost), true
	}
	if missing := unchecked(form, p.Lost); len(missing) > 0 {
		p.Unchecked = uncheckedRefusal(missing, p.Others)
		return false, "", false
	}
	return false, checkedNote(p.Note, p.Lost), true
}

// lostEffects returns the activities of the indeterminate failures of a
// set's breakdown, by name.
func lostEffects(breakdown []record.FailureSetGroup) []lostEffect {
	runs := map[string]int{}
	for _, g := range breakdown {
		if g.Reason == policy.Indeterminate {
			runs[g.Activity] += int(g.Failures)
		}
	}
	return sortedEffects(runs)
}

// lostInGroups returns the activities of the indeterminate groups, by name,
// with their open failures.
func lostInGroups(groups []record.FailureGroup) []lostEffect {
	runs := map[string]int{}
	for _, g := range groups {
		if g.Reason == policy.Indeterminate {
			runs[g.Activity] += int(g.Count)
		}
	}
	return sortedEffects(runs)
}

func sortedEffects(runs map[string]int) []lostEffect {
	effects := make([]lostEffect, 0, len(runs))
	for a, n := range runs {
		effects = append(effects, lostEffect{Activity: a, Runs: n})
	}
	slices.SortFunc(effects, func(a, b lostEffect) int { return cmp.Compare(a.Activity, b.Activity) })
	return effects
}

// lostRuns is how many runs the effects count.
func lostRuns(effects []lostEffect) int {
	n := 0
	for _, e := range effects {
		n += e.Runs
	}
	return n
}

// unchecked returns the effects that form does not say were checked.
func unchecked(form url.Values, effects []lostEffect) []lostEffect {
	var missing []lostEffect
	for _, e := range effects {
		if !slices.Contains(form[checkedField], e.Activity) {
			missing = append(missing, e)
		}
	}
	return missing
}

// uncheckedRefusal says why a confirm that did not check missing was refused.
func uncheckedRefusal(missing []lostEffect, others int) string {
	it, its := "it", "its effect"
	if len(missing) > 1 {
		it, its = "them", "their effects"
	}
	s := "Nothing was requeued: " + describeEffects(missing) + ". Requeueing runs " + it + " again, so " + its +
		" may happen twice: check that " + it + " did not take effect, then tick the box for " + it + " and confirm again"
	if others > 0 {
		s += ", or requeue only the " + plural(others, "other run")
	}
	return s + "."
}

// describeEffects is "2 runs failed indeterminate in at-most-once
// pay-supplier, 1 in send-parcel".
func describeEffects(effects []lostEffect) string {
	parts := make([]string, len(effects))
	for i, e := range effects {
		if i == 0 {
			parts[i] = fmt.Sprintf("%s failed indeterminate in at-most-once %s", plural(e.Runs, "run"), e.Activity)
		} else {
			parts[i] = fmt.Sprintf("%s in %s", num(e.Runs), e.Activity)
		}
	}
	return strings.Join(parts, ", ")
}

// checkedNote is the audit note of a requeue that includes indeterminate
// runs: the person's note, then what they confirmed they checked, so that
// the audit log says who vouched for it.
func checkedNote(note string, effects []lostEffect) string {
	if len(effects) == 0 {
		return note
	}
	parts := make([]string, len(effects))
	for i, e := range effects {
		parts[i] = fmt.Sprintf("%s did not take effect for %s", e.Activity, plural(e.Runs, "indeterminate run"))
	}
	return joinNote(note, "checked that "+strings.Join(parts, " and "))
}

// skippedNote is the audit note of a requeue that left the indeterminate
// runs failed.
func skippedNote(note string, effects []lostEffect) string {
	if len(effects) == 0 {
		return note
	}
	return joinNote(note, fmt.Sprintf("left %s failed", plural(lostRuns(effects), "indeterminate run")))
}

func joinNote(note, more string) string {
	if note = strings.TrimSpace(note); note == "" {
		return more
	}
	return note + "; " + more
}
