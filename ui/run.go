package ui

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
)

// runPage is the Data of a run's page.
type runPage struct {
	Run        record.Run
	Input      payload
	Output     payload
	Steps      []stepView
	Attempts   []attemptView
	Timeline   timeline
	Waiting    *waiting // what a queued run waits for; nil for none
	Audit      []record.AuditEntry
	Children   []record.ChildRun
	CanRequeue bool
	CanCancel  bool
	Cancelled  string
	// HiddenSteps and HiddenAttempts count the earliest steps and attempts
	// not shown (a page shows the last maxShown of each).
	HiddenSteps, HiddenAttempts int
}

// maxShown is how many steps, and attempts, a run page shows at most: the
// last ones, where a failure is. tenure runs show --json has them all.
const maxShown = 500

// stepView is a step with its policy explained.
type stepView struct {
	record.Step
	Attempts  int
	Policy    string // policy.Retry's String; "" for other kinds
	WorstCase string
	Warnings  []string
	PolicyErr string
}

// attemptView is an attempt with its trace link, and the wait on a limit
// that ended when it started (attempt_timeline's throttled_for and
// throttled_by; nil for none).
type attemptView struct {
	record.Attempt
	Duration  time.Duration
	TraceHref string
	InBudget  bool
	Throttled *record.UIThrottle
}

// throttledBefore is each attempt's wait on a limit, by step and attempt.
func throttledBefore(throttles []record.UIThrottle) map[[2]int]*record.UIThrottle {
	out := map[[2]int]*record.UIThrottle{}
	for i, t := range throttles {
		if t.Attempt > 0 && t.Ended != nil {
			out[[2]int{t.Step, t.Attempt}] = &throttles[i]
		}
	}
	return out
}

// parseRunID reads the {id} of the path.
func parseRunID(r *http.Request) (uuid.UUID, error) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return uuid.Nil, fmt.Errorf("%q is not a run ID (a UUID)", r.PathValue("id"))
	}
	return id, nil
}

func (h *handler) run(w http.ResponseWriter, r *http.Request) {
	id, err := parseRunID(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "Run", err)
		return
	}
	ctx := r.Context()
	run, err := h.op.Run(ctx, id)
	if errors.Is(err, operator.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, "Run", err)
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Run", err)
		return
	}
	steps, err := h.op.Steps(ctx, id)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Run", err)
		return
	}
	attempts, err := h.op.History(ctx, id)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Run", err)
		return
	}
	audit, err := h.op.RunAuditLog(ctx, id)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Run", err)
		return
	}
	children, err := h.op.Children(ctx, id, 100)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Run", err)
		return
	}
	throttles, err := h.op.UIRunThrottles(ctx, id)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Run", err)
		return
	}
	now := time.Now()
	var hiddenSteps, hiddenAttempts int
	if n := len(steps); n > maxShown {
		hiddenSteps, steps = n-maxShown, steps[n-maxShown:]
	}
	if n := len(attempts); n > maxShown {
		hiddenAttempts, attempts = n-maxShown, attempts[n-maxShown:]
	}
	p := runPage{Run: run, HiddenSteps: hiddenSteps, HiddenAttempts: hiddenAttempts, Input: h.payload(run.Input), Output: h.payload(run.Output), Audit: audit, Children: children,
		CanRequeue: h.cfg.Writes && run.Status == record.RunFailed,
		CanCancel:  h.cfg.Writes && (run.Status == record.RunQueued || run.Status == record.RunRunning),
		Cancelled:  r.URL.Query().Get("cancelled"),
		Timeline:   h.buildTimeline(run, steps, attempts, audit, throttles, now),
		Waiting:    waitingFor(run, steps, attempts, throttles, h.orphansNow(ctx), now)}
	counts := map[int]int{}
	waited := throttledBefore(throttles)
	for _, a := range attempts { // duration and budget as the attempt_timeline view gives them
		counts[a.Step]++
		p.Attempts = append(p.Attempts, attemptView{Attempt: a, Duration: a.Duration, TraceHref: h.traceLink(a),
			InBudget: a.InBudget, Throttled: waited[[2]int{a.Step, a.Attempt}]})
	}
	for _, s := range steps {
		v := stepView{Step: s, Attempts: counts[s.Step]}
		if s.Kind == record.KindActivity {
			if pol, err := recordedPolicy(s); err != nil {
				v.PolicyErr = err.Error()
			} else {
				e := policy.Explain(pol)
				v.Policy, v.WorstCase, v.Warnings = pol.String(), dur(e.WorstCase), e.Warnings
			}
		}
		p.Steps = append(p.Steps, v)
	}
	h.render(w, r, http.StatusOK, "run", page{Title: "Run " + id.String()[:8], Nav: "runs", Data: p})
}

// recordedPolicy parses the policy recorded on an activity step.
func recordedPolicy(s record.Step) (policy.Retry, error) {
	var p policy.Retry
	if err := json.Unmarshal(s.Policy, &p); err != nil {
		return p, fmt.Errorf("the recorded policy does not parse: %w", err)
	}
	return p, nil
}

// requeueRun previews (first post: the failure row it will mark requeued)
// and then performs (confirm=1) the requeue of one failed run, with the note
// in its audit row, and sends the browser back to the run. The confirm
// refuses with 409 when the run's open failure is not the one previewed,
// and with 422 when the run failed indeterminate and the form does not say
// its activity was checked.
func (h *handler) requeueRun(w http.ResponseWriter, r *http.Request, who string) {
	id, err := parseRunID(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "Requeue", err)
		return
	}
	run, err := h.op.Run(r.Context(), id)
	if errors.Is(err, operator.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, "Requeue", err)
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Requeue", err)
		return
	}
	// The set of one failure: the run's open one, named by its row's ID.
	var set record.FailureSet
	var rows []record.Failure
	if f := run.Failure; run.Status == record.RunFailed && f != nil {
		set = record.FailureSet{Count: 1, Oldest: f.FailedAt, Newest: f.FailedAt, Digest: "failure-" + strconv.FormatInt(f.ID, 10),
			Breakdown: []record.FailureSetGroup{{Workflow: f.Workflow, Activity: f.Activity, Reason: f.Reason, Failures: 1}}}
		rows = []record.Failure{*f}
	}
	p := newPreview(set, rows)
	p.Note, p.Action, p.Back = r.PostFormValue("note"), "runs/"+id.String()+"/requeue", "runs/"+id.String()
	if set.Count == 0 {
		p.Changed = fmt.Sprintf("Run %s is %s, not failed: there is nothing to requeue.", id, run.Status)
		status := http.StatusOK
		if r.PostFormValue("confirm") == "1" {
			status = http.StatusConflict
		}
		h.render(w, r, status, "preview", page{Title: "Requeue preview", Nav: "runs", Data: p})
		return
	}
	if r.PostFormValue("confirm") != "1" {
		h.render(w, r, http.StatusOK, "preview", page{Title: "Requeue preview", Nav: "runs", Data: p})
		return
	}
	if r.PostFormValue("set") != p.Set {
		p.Changed = "The run's failure changed since the preview: nothing was requeued. Check it below and confirm again."
		h.render(w, r, http.StatusConflict, "preview", page{Title: "Requeue preview", Nav: "runs", Data: p})
		return
	}
	_, note, ok := p.checked(r.PostForm)
	if !ok {
		h.render(w, r, http.StatusUnprocessableEntity, "preview", page{Title: "Requeue preview", Nav: "runs", Data: p})
		return
	}
	err = h.op.Requeue(r.Context(), id, auditNote(who, note))
	if errors.Is(err, operator.ErrNotFailed) {
		p.Changed = "Someone requeued the run meanwhile: nothing was done."
		h.render(w, r, http.StatusConflict, "preview", page{Title: "Requeue preview", Nav: "runs", Data: p})
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Requeue", err)
		return
	}
	h.log.Info("ui: requeued run", "who", who, "run", id)
	redirect(w, root(r)+"runs/"+id.String())
}

// cancelPage is the Data of the cancel confirmation.
type cancelPage struct {
	Run record.Run
}

// cancelRun asks (first post) and then cancels (confirm=1) a queued or
// running run, as operator.Cancel does, which writes an audit_log row
// (action cancel) naming who did it and why.
func (h *handler) cancelRun(w http.ResponseWriter, r *http.Request, who string) {
	id, err := parseRunID(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "Cancel", err)
		return
	}
	run, err := h.op.Run(r.Context(), id)
	if errors.Is(err, operator.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, "Cancel", err)
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Cancel", err)
		return
	}
	if r.PostFormValue("confirm") != "1" {
		h.render(w, r, http.StatusOK, "cancel", page{Title: "Cancel run", Nav: "runs", Data: cancelPage{Run: run}})
		return
	}
	requested, err := h.op.Cancel(r.Context(), id, auditNote(who, r.PostFormValue("note")))
	if errors.Is(err, operator.ErrFinished) {
		h.fail(w, r, http.StatusConflict, "Cancel", err)
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Cancel", err)
		return
	}
	h.log.Info("ui: cancelled run", "who", who, "run", id, "requested", requested, "note", r.PostFormValue("note"))
	redirect(w, root(r)+"runs/"+id.String()+"?cancelled="+strconv.FormatBool(requested))
}
