package ui

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
)

// ages are the age filters offered, in order.
var ages = []struct{ Value, Label string }{
	{"", "any time"}, {"1h", "last hour"}, {"24h", "last 24 hours"}, {"7d", "last 7 days"}, {"30d", "last 30 days"},
}

// parseAge reads an age filter: a Go duration or a number of days ("7d").
func parseAge(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 || days > 36500 {
			return 0, fmt.Errorf("invalid age %q: want e.g. 1h, 24h, 7d", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("invalid age %q: want e.g. 1h, 24h, 7d", s)
	}
	return d, nil
}

// failureQuery is the failures page's filter, as its form and the requeue
// forms carry it.
type failureQuery struct {
	Workflow, Activity, Reason, Age, Key string
	// The group, for a requeue of one group.
	Group       bool
	Fingerprint record.Fingerprint
}

func readFailureQuery(v url.Values) failureQuery {
	q := failureQuery{Workflow: v.Get("workflow"), Activity: v.Get("activity"), Reason: v.Get("reason"),
		Age: v.Get("age"), Key: v.Get("key")}
	if v.Get("group") == "1" {
		q.Group = true
		q.Fingerprint = record.Fingerprint{Workflow: v.Get("fp_workflow"), Activity: v.Get("fp_activity"),
			Reason: policy.Reason(v.Get("fp_reason")), ErrorType: v.Get("fp_type"),
			// Browsers send a form value's line breaks as CR LF.
			Message: strings.ReplaceAll(v.Get("fp_message"), "\r\n", "\n")}
	}
	return q
}

// filter is q as the operator's filter, with the age counted back from now
// (and no end).
func (q failureQuery) filter(now time.Time) (record.FailureGroupFilter, error) {
	age, err := parseAge(q.Age)
	if err != nil {
		return record.FailureGroupFilter{}, err
	}
	f := record.FailureGroupFilter{Workflow: q.Workflow, Activity: q.Activity, Reason: policy.Reason(q.Reason), Key: q.Key}
	if age > 0 {
		f.Since = now.Add(-age)
	}
	if q.Group {
		fp := q.Fingerprint
		f.Fingerprint = &fp
	}
	return f, nil
}

// window is q as the filter of a requeue: the failures of a fixed window,
// from until minus the age (or from any time) to until, which a preview
// takes from the database's clock and its confirm from the preview's
// form (readWindow). The confirm so acts on the failures the preview
// counted, however long after, while failures keep coming (after until).
func (q failureQuery) window(until time.Time) (record.FailureGroupFilter, error) {
	f, err := q.filter(until)
	f.Until = until
	return f, err
}

// windowFields are the form fields that carry a preview's window to its
// confirm.
const (
	sinceField = "since"
	untilField = "until"
)

// readWindow reads the window a preview fixed from its confirm's form: the
// filter's age counted back from until, and until, which must be a time in
// RFC 3339 no later than now (by the database's clock). A form without
// one did not come from a preview.
func readWindow(form url.Values, q failureQuery, now time.Time) (record.FailureGroupFilter, error) {
	until, err := time.Parse(time.RFC3339Nano, form.Get(untilField))
	if err != nil {
		return record.FailureGroupFilter{}, fmt.Errorf("the confirm carries no valid window end (%s=%q): requeue again from the failures page", untilField, form.Get(untilField))
	}
	if until.After(now) {
		return record.FailureGroupFilter{}, fmt.Errorf("the window ends at %s, after now: requeue again from the failures page", until.Format(time.RFC3339))
	}
	f, err := q.window(until)
	if err != nil {
		return f, err
	}
	if s := form.Get(sinceField); s != "" || !f.Since.IsZero() {
		since, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || !since.Equal(f.Since) {
			return record.FailureGroupFilter{}, fmt.Errorf("the window's start (%s=%q) is not the age %q before its end: requeue again from the failures page", sinceField, s, q.Age)
		}
	}
	return f, nil
}

// Values is q as URL values: the filter links and the hidden fields.
func (q failureQuery) Values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"workflow": q.Workflow, "activity": q.Activity, "reason": q.Reason, "age": q.Age, "key": q.Key} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// Set reports whether q filters at all.
func (q failureQuery) Set() bool { return len(q.Values()) > 0 }

// failuresPage is the Data of the failures page.
type failuresPage struct {
	Query    failureQuery
	Ages     []struct{ Value, Label string }
	Reasons  []policy.Reason
	Groups   record.FailureGroups
	Chart    barChart
	Sparks   []barChart
	Requeued string
	Kept     string // indeterminate runs a requeue left failed
	Purged   string
	// Lost are the at-most-once activities of the indeterminate groups
	// shown; LostPartial is set when some groups are not shown, so that
	// "Requeue all" may include more of them.
	Lost        []lostEffect
	LostRuns    int
	LostPartial bool
}

func (h *handler) failures(w http.ResponseWriter, r *http.Request) {
	q := readFailureQuery(r.URL.Query())
	q.Group = false
	f, err := q.filter(time.Now())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "Failures", err)
		return
	}
	const buckets = 24
	groups, err := h.op.FailureGroups(r.Context(), f, buckets, 100)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Failures", err)
		return
	}
	total := make([]int64, buckets)
	sparks := make([]barChart, len(groups.Groups))
	var shown int64 // failures of the groups shown
	for i, g := range groups.Groups {
		for b, n := range g.Buckets {
			total[b] += n
		}
		sparks[i] = sparkline(g.Buckets, groups.From, groups.Width)
		shown += g.Count
	}
	p := failuresPage{Query: q, Ages: ages, Reasons: policy.Reasons(), Groups: groups, Sparks: sparks,
		Chart:    overview(total, groups.From, groups.Width),
		Requeued: r.URL.Query().Get("requeued"), Kept: r.URL.Query().Get("kept"), Purged: r.URL.Query().Get("purged"),
		Lost: lostInGroups(groups.Groups), LostPartial: shown < groups.Total}
	p.LostRuns = lostRuns(p.Lost)
	h.render(w, r, http.StatusOK, "failures", page{Title: "Failures", Nav: "failures", Data: p})
}

// maxSample is how many of the failures a requeue or purge preview lists:
// the oldest. The preview counts all of them, breaks them down by group,
// and the confirm acts on all of them, however many.
const maxSample = 20

// previewPage is the Data of a requeue preview: how many failed runs a
// confirm puts back, broken down by workflow, activity and reason, a sample
// of them, and the form that confirms it.
type previewPage struct {
	Query failureQuery
	Count int // failures in the set: the runs a confirm requeues
	// Sample is the oldest maxSample of them, as full rows.
	Sample []record.Failure
	// Breakdown counts the set by workflow, activity and reason, most
	// first; Oldest and Newest are its first and last failures.
	Breakdown      []record.FailureSetGroup
	Oldest, Newest time.Time
	Set            string // the set's digest, which the confirm carries
	// Since and Until are the window the preview fixed (Since zero: from
	// any time), which the confirm carries.
	Since, Until time.Time
	Note         string
	Action       string // where the confirm posts, relative to the root
	Back         string // the page to go back to, relative to the root
	Changed      string // why a confirm was refused, when it was
	// Lost are the at-most-once activities of the failures that failed
	// indeterminate, which a confirm must say were checked (checkedField);
	// LostRuns counts those failures, Others the rest. LostShown is set
	// when the sample holds every one of them (marked ⚠).
	Lost             []lostEffect
	LostRuns, Others int
	LostShown        bool
	Unchecked        string // why a confirm without the checks was refused
}

// newPreview is the preview of set, with the full rows of its oldest
// failures, sample.
func newPreview(set record.FailureSet, sample []record.Failure) previewPage {
	p := previewPage{Count: int(set.Count), Set: set.Digest, Breakdown: set.Breakdown,
		Oldest: set.Oldest, Newest: set.Newest, Since: set.Filter.Since, Until: set.Filter.Until}
	p.Sample = sample[:min(len(sample), maxSample)]
	p.Lost = lostEffects(set.Breakdown)
	p.LostRuns = lostRuns(p.Lost)
	p.Others = p.Count - p.LostRuns
	shown := 0
	for _, f := range p.Sample {
		if f.Reason == policy.Indeterminate {
			shown++
		}
	}
	p.LostShown = shown == p.LostRuns
	return p
}

// requeueFailures previews (first post) and then performs (confirm=1) the
// requeue of the failures that the filter, or one group under it, selects:
// all of them, however many. The preview fixes the window, from the age
// before the database's now to that now, counts the failures in it, breaks
// them down and lists a sample; the confirm carries the window, reads the
// set in it again, refuses with 409 when it is not the one previewed (a
// requeue, a purge meanwhile: a new preview, of a new window, follows) and
// with 422 when it includes runs that failed indeterminate and neither says
// their activity was checked nor skips them, and requeues exactly the
// previewed rows in one statement with one audit row. Failures that come
// after the preview are after its window: an incident still going on does
// not change the set a confirm acts on.
func (h *handler) requeueFailures(w http.ResponseWriter, r *http.Request, who string) {
	ctx := r.Context()
	q := readFailureQuery(r.PostForm)
	// The database's clock: the end of a new window, or the limit of one
	// posted (failed_at is the database's time too).
	now, err := h.op.PurgeCutoff(ctx, 0)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Requeue", err)
		return
	}
	confirm := r.PostFormValue("confirm") == "1"
	var f record.FailureGroupFilter
	if confirm {
		f, err = readWindow(r.PostForm, q, now)
	} else {
		f, err = q.window(now)
	}
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "Requeue", err)
		return
	}
	set, p, err := h.requeuePreview(r, q, f)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Requeue", err)
		return
	}
	if !confirm {
		h.render(w, r, http.StatusOK, "preview", page{Title: "Requeue preview", Nav: "failures", Data: p})
		return
	}
	h.confirmRequeue(w, r, who, q, now, set, p)
}

// requeuePreview reads the set of failures f selects and the preview of
// its requeue, posted in r with q.
func (h *handler) requeuePreview(r *http.Request, q failureQuery, f record.FailureGroupFilter) (record.FailureSet, previewPage, error) {
	set, err := h.op.FailureSet(r.Context(), f)
	if err != nil {
		return set, previewPage{}, err
	}
	sample, err := h.op.OpenFailures(r.Context(), set.Filter, maxSample)
	if err != nil {
		return set, previewPage{}, err
	}
	p := newPreview(set, sample)
	p.Query, p.Note, p.Action, p.Back = q, r.PostFormValue("note"), "failures/requeue", "failures?"+q.Values().Encode()
	return set, p, nil
}

// newRequeuePreview is the preview of a new window of q, ending now.
func (h *handler) newRequeuePreview(r *http.Request, q failureQuery, now time.Time) (record.FailureSet, previewPage, error) {
	f, err := q.window(now)
	if err != nil {
		return record.FailureSet{}, previewPage{}, err
	}
	return h.requeuePreview(r, q, f)
}

// confirmRequeue requeues set, previewed as p, if it is the set the
// confirm posted in r previewed and p's checks pass, then redirects to the
// failures with the count requeued.
func (h *handler) confirmRequeue(w http.ResponseWriter, r *http.Request, who string, q failureQuery, now time.Time, set record.FailureSet, p previewPage) {
	if want := r.PostFormValue("set"); want != p.Set {
		// A new preview, of a new window ending now.
		_, again, err := h.newRequeuePreview(r, q, now)
		if err != nil {
			h.fail(w, r, http.StatusInternalServerError, "Requeue", err)
			return
		}
		again.Changed = "The failures changed since the preview (another requeue, a purge): nothing was requeued. Check the counts below, of the failures until now, and confirm again."
		h.render(w, r, http.StatusConflict, "preview", page{Title: "Requeue preview", Nav: "failures", Data: again})
		return
	}
	skip, note, ok := p.checked(r.PostForm)
	if !ok {
		h.render(w, r, http.StatusUnprocessableEntity, "preview", page{Title: "Requeue preview", Nav: "failures", Data: p})
		return
	}
	n, err := h.op.RequeueFailureSet(r.Context(), operator.RequeueSet{Filter: set.Filter, Digest: set.Digest, SkipIndeterminate: skip,
		Note: auditNote(who, note), Audit: q.audit()})
	if errors.Is(err, operator.ErrFailuresChanged) {
		// Changed between this read and the requeue's lock: as above.
		var again previewPage
		if _, again, err = h.newRequeuePreview(r, q, now); err == nil {
			again.Changed = "The failures changed as you confirmed (another requeue, a purge): nothing was requeued. Check the counts below, of the failures until now, and confirm again."
			h.render(w, r, http.StatusConflict, "preview", page{Title: "Requeue preview", Nav: "failures", Data: again})
			return
		}
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Requeue", err)
		return
	}
	kept := 0
	if skip {
		kept = p.LostRuns
	}
	h.log.Info("ui: requeued failures", "who", who, "runs", n, "previewed", p.Count, "indeterminate", p.LostRuns,
		"left_failed", kept, "filter", q.Values().Encode(), "group", q.Group,
		"since", formTime(set.Filter.Since), "until", formTime(set.Filter.Until), "digest", set.Digest)
	v := q.Values()
	v.Set("requeued", strconv.FormatInt(n, 10))
	if kept > 0 {
		v.Set("kept", strconv.Itoa(kept))
	}
	redirect(w, root(r)+"failures?"+v.Encode())
}

// audit is q as the audit row records how a set was selected: the page's
// filter, and the group's fingerprint for a requeue of one group.
func (q failureQuery) audit() map[string]string {
	filter := map[string]string{}
	for k, v := range q.Values() {
		if len(v) > 0 && v[0] != "" {
			filter[k] = v[0]
		}
	}
	if fp := q.Fingerprint; q.Group {
		filter["group_workflow"], filter["group_activity"], filter["group_reason"] = fp.Workflow, fp.Activity, string(fp.Reason)
		filter["group_error_type"], filter["group_message"] = fp.ErrorType, fp.Message
	}
	return filter
}

// purgePage is the Data of the purge confirmation.
type purgePage struct {
	Workflow   string
	OlderThan  string
	Before     time.Time // the cutoff, by the database's clock: fixed at the first count
	Counted    record.Purged
	Sample     []record.PurgeCandidate // the oldest maxSample runs
	ByWorkflow []record.PurgeWorkflow
	Note       string
	Changed    string
}

// SinceValue and UntilValue are the window as the confirm form carries it.
func (p previewPage) SinceValue() string { return formTime(p.Since) }

// UntilValue: see SinceValue.
func (p previewPage) UntilValue() string { return formTime(p.Until) }

// formTime is t as a form carries it: RFC 3339 in UTC, to the nanosecond;
// "" for the zero time.
func formTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// BeforeValue is the cutoff as the confirm form carries it.
func (p purgePage) BeforeValue() string { return formTime(p.Before) }

// purgeFailures counts (first post) and then deletes (confirm=1) the runs
// with failure history of one workflow or all that finished before the
// given age, however many: the count fixes the cutoff (now minus the age,
// by the database's clock), which the confirm carries, so that runs
// finishing meanwhile do not join the set. The preview lists the oldest
// runs and the count per workflow, all three from the SQL function that
// selects them for purge_failures, locking none; the confirm counts again
// against the same cutoff, refuses with 409 when that count differs from
// the preview's (with a new sample), and deletes in one statement with one
// audit row that records the cutoff (purge_failures_before).
func (h *handler) purgeFailures(w http.ResponseWriter, r *http.Request, who string) {
	p := purgePage{Workflow: r.PostFormValue("workflow"), OlderThan: r.PostFormValue("older_than"), Note: r.PostFormValue("note")}
	if p.OlderThan == "" {
		p.OlderThan = "30d"
	}
	age, err := parseAge(p.OlderThan)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "Purge", err)
		return
	}
	ctx := r.Context()
	if b := r.PostFormValue("before"); b != "" {
		if p.Before, err = time.Parse(time.RFC3339Nano, b); err != nil {
			h.fail(w, r, http.StatusBadRequest, "Purge", fmt.Errorf("invalid cutoff %q: purge again from the failures page", b))
			return
		}
	} else if p.Before, err = h.op.PurgeCutoff(ctx, age); err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Purge", err)
		return
	}
	o := operator.PurgeOptions{Before: p.Before, Workflow: p.Workflow, DryRun: true}
	if p.Counted, err = h.op.PurgeFailures(ctx, o); err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Purge", err)
		return
	}
	show := func(status int) {
		if p.Sample, p.ByWorkflow, err = h.op.PurgeSample(ctx, o, maxSample); err != nil {
			h.fail(w, r, http.StatusInternalServerError, "Purge", err)
			return
		}
		h.render(w, r, status, "purge", page{Title: "Purge failures", Nav: "failures", Data: p})
	}
	if r.PostFormValue("confirm") != "1" {
		show(http.StatusOK)
		return
	}
	if r.PostFormValue("runs") != strconv.FormatInt(p.Counted.Runs, 10) || r.PostFormValue("failure_rows") != strconv.FormatInt(p.Counted.Failures, 10) {
		p.Changed = "The runs to delete changed since the count (a requeue, another purge): nothing was deleted. Check the new count and confirm again."
		show(http.StatusConflict)
		return
	}
	if p.Counted.Runs == 0 {
		redirect(w, root(r)+"failures?purged=0")
		return
	}
	o.DryRun, o.Note = false, auditNote(who, p.Note)
	done, err := h.op.PurgeFailures(ctx, o)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Purge", err)
		return
	}
	h.log.Info("ui: purged failures", "who", who, "runs", done.Runs, "failures", done.Failures, "workflow", p.Workflow,
		"older_than", p.OlderThan, "before", p.BeforeValue())
	redirect(w, root(r)+"failures?purged="+strconv.FormatInt(done.Runs, 10))
}
