package ui

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
)

// maxPreview is the most failures one bulk requeue from the UI touches:
// its preview lists every one of them.
const maxPreview = 1000

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
	Fingerprint operator.Fingerprint
}

func readFailureQuery(v url.Values) failureQuery {
	q := failureQuery{Workflow: v.Get("workflow"), Activity: v.Get("activity"), Reason: v.Get("reason"),
		Age: v.Get("age"), Key: v.Get("key")}
	if v.Get("group") == "1" {
		q.Group = true
		q.Fingerprint = operator.Fingerprint{Workflow: v.Get("fp_workflow"), Activity: v.Get("fp_activity"),
			Reason: policy.Reason(v.Get("fp_reason")), ErrorType: v.Get("fp_type"),
			// Browsers send a form value's line breaks as CR LF.
			Message: strings.ReplaceAll(v.Get("fp_message"), "\r\n", "\n")}
	}
	return q
}

// filter is q as the operator's filter, with the age counted back from now.
func (q failureQuery) filter(now time.Time) (operator.FailureGroupFilter, error) {
	age, err := parseAge(q.Age)
	if err != nil {
		return operator.FailureGroupFilter{}, err
	}
	f := operator.FailureGroupFilter{Workflow: q.Workflow, Activity: q.Activity, Reason: policy.Reason(q.Reason), Key: q.Key}
	if age > 0 {
		f.Since = now.Add(-age)
	}
	if q.Group {
		fp := q.Fingerprint
		f.Fingerprint = &fp
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
	Groups   operator.FailureGroups
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

// previewPage is the Data of a requeue preview: the rows a confirm would
// touch, and the form that confirms it.
type previewPage struct {
	Query   failureQuery
	Rows    []operator.Failure
	Total   int  // rows matching (more than Rows when over maxPreview)
	TooMany bool // over maxPreview: no confirm offered
	Set     string
	Note    string
	Action  string // where the confirm posts, relative to the root
	Back    string // the page to go back to, relative to the root
	Changed string // why a confirm was refused, when it was
	Max     int
	// Lost are the at-most-once activities of the rows that failed
	// indeterminate, which a confirm must say were checked (checkedField);
	// LostRuns counts those rows, Others the rest.
	Lost             []lostEffect
	LostRuns, Others int
	Unchecked        string // why a confirm without the checks was refused
}

// candidateSet is the fingerprint of a set of runs that a preview shows and
// a confirm compares: the sorted run IDs, hashed.
func candidateSet(rows []operator.Failure) string {
	ids := make([]string, len(rows))
	for i, f := range rows {
		ids[i] = f.RunID.String() + "/" + strconv.FormatInt(f.ID, 10)
	}
	slices.Sort(ids)
	sum := sha256.Sum256([]byte(strings.Join(ids, ",")))
	return strconv.Itoa(len(rows)) + "-" + hex.EncodeToString(sum[:16])
}

// requeueFailures previews (first post) and then performs (confirm=1) the
// requeue of the failures that the filter, or one group under it, selects.
// The confirm recomputes the set and refuses with 409 when it is not the
// one previewed, and with 422 when it includes runs that failed
// indeterminate and neither says their activity was checked nor skips them.
func (h *handler) requeueFailures(w http.ResponseWriter, r *http.Request, who string) {
	q := readFailureQuery(r.PostForm)
	now := time.Now()
	f, err := q.filter(now)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "Requeue", err)
		return
	}
	rows, err := h.op.OpenFailures(r.Context(), f, maxPreview+1)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Requeue", err)
		return
	}
	p := previewPage{Query: q, Rows: rows, Total: len(rows), Note: r.PostFormValue("note"), Action: "failures/requeue",
		Back: "failures?" + q.Values().Encode(), Max: maxPreview}
	if len(rows) > maxPreview {
		p.TooMany, p.Rows = true, rows[:maxPreview]
	}
	p.Set = candidateSet(p.Rows)
	p.withLost()
	if r.PostFormValue("confirm") != "1" || p.TooMany {
		h.render(w, r, http.StatusOK, "preview", page{Title: "Requeue preview", Nav: "failures", Data: p})
		return
	}
	if want := r.PostFormValue("set"); want != p.Set {
		p.Changed = "The failures changed since the preview (another requeue, a new failure): nothing was requeued. Check the rows below and confirm again."
		h.render(w, r, http.StatusConflict, "preview", page{Title: "Requeue preview", Nav: "failures", Data: p})
		return
	}
	chosen, note, ok := p.checked(r.PostForm)
	if !ok {
		h.render(w, r, http.StatusUnprocessableEntity, "preview", page{Title: "Requeue preview", Nav: "failures", Data: p})
		return
	}
	n, err := h.requeueSet(r, q, chosen, auditNote(who, note))
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Requeue", err)
		return
	}
	kept := len(rows) - len(chosen)
	h.log.Info("ui: requeued failures", "who", who, "runs", n, "previewed", len(rows), "indeterminate", p.LostRuns,
		"left_failed", kept, "filter", q.Values().Encode(), "group", q.Group)
	v := q.Values()
	v.Set("requeued", strconv.Itoa(n))
	if kept > 0 {
		v.Set("kept", strconv.Itoa(kept))
	}
	redirect(w, root(r)+"failures?"+v.Encode())
}

// requeueSet requeues the runs of exactly the previewed failure rows, in one
// statement with one audit row carrying note (requeue_failure_ids): a run
// requeued meanwhile by someone else, which may have failed again with
// another failure row, is left alone. It returns how many runs it put back.
func (h *handler) requeueSet(r *http.Request, q failureQuery, rows []operator.Failure, note string) (int, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	ids := make([]int64, len(rows))
	for i, row := range rows {
		ids[i] = row.ID
	}
	filter := map[string]string{}
	for k, v := range q.Values() {
		if len(v) > 0 && v[0] != "" {
			filter[k] = v[0]
		}
	}
	done, err := h.op.RequeueFailureIDs(r.Context(), ids, note, filter)
	return len(done), err
}

// purgePage is the Data of the purge confirmation.
type purgePage struct {
	Workflow  string
	OlderThan string
	Counted   operator.Purged
	Note      string
	Changed   string
}

// purgeFailures counts (first post) and then deletes (confirm=1) the runs
// with failure history of one workflow or all that finished before the
// given age, through operator.PurgeFailures. The confirm refuses with 409
// when the dry run now counts otherwise than the preview did.
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
	o := operator.PurgeOptions{OlderThan: age, Workflow: p.Workflow, DryRun: true}
	if p.Counted, err = h.op.PurgeFailures(r.Context(), o); err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Purge", err)
		return
	}
	if r.PostFormValue("confirm") != "1" {
		h.render(w, r, http.StatusOK, "purge", page{Title: "Purge failures", Nav: "failures", Data: p})
		return
	}
	if r.PostFormValue("runs") != strconv.FormatInt(p.Counted.Runs, 10) || r.PostFormValue("failure_rows") != strconv.FormatInt(p.Counted.Failures, 10) {
		p.Changed = "The runs to delete changed since the count: nothing was deleted. Check the new count and confirm again."
		h.render(w, r, http.StatusConflict, "purge", page{Title: "Purge failures", Nav: "failures", Data: p})
		return
	}
	o.DryRun, o.Note = false, auditNote(who, p.Note)
	done, err := h.op.PurgeFailures(r.Context(), o)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Purge", err)
		return
	}
	h.log.Info("ui: purged failures", "who", who, "runs", done.Runs, "failures", done.Failures, "workflow", p.Workflow, "older_than", p.OlderThan)
	redirect(w, root(r)+"failures?purged="+strconv.FormatInt(done.Runs, 10))
}
