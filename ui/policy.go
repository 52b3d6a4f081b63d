package ui

import (
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

// policyPage is the Data of the policy page: a step's recorded policy
// explained attempt by attempt, beside the delays its attempts recorded.
type policyPage struct {
	RunID       uuid.UUID
	Step        record.Step
	Policy      string
	Explanation policy.Explanation
	Text        string
	Rows        []policyRow
	Chart       delayChart
}

// policyRow is one delay of the explanation, and the delay the attempt of
// that number recorded, if it ran.
type policyRow struct {
	Attempt  int
	Min, Max time.Duration
	Recorded *time.Duration
	Source   string
}

// delayChart draws each delay's range (min to max) as a bar.
type delayChart struct {
	W, H  float64
	Bars  []bar
	Ticks []tick
}

func (h *handler) policy(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	id, err := uuid.Parse(v.Get("run"))
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "Policy", fmt.Errorf("policy?run=ID&step=N: %q is not a run ID", v.Get("run")))
		return
	}
	n, err := strconv.Atoi(v.Get("step"))
	if err != nil || n < 1 {
		h.fail(w, r, http.StatusBadRequest, "Policy", fmt.Errorf("policy?run=ID&step=N: %q is not a step number", v.Get("step")))
		return
	}
	ctx := r.Context()
	if _, err := h.op.Run(ctx, id); errors.Is(err, operator.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, "Policy", err)
		return
	} else if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Policy", err)
		return
	}
	steps, err := h.op.Steps(ctx, id)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Policy", err)
		return
	}
	var step *record.Step
	for i := range steps {
		if steps[i].Step == n {
			step = &steps[i]
		}
	}
	if step == nil {
		h.fail(w, r, http.StatusNotFound, "Policy", fmt.Errorf("run %s has no step %d", id, n))
		return
	}
	if step.Kind != record.KindActivity {
		h.fail(w, r, http.StatusNotFound, "Policy", fmt.Errorf("step %d is a %s step (%s): it has no retry policy", n, step.Kind, step.Activity))
		return
	}
	pol, err := recordedPolicy(*step)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Policy", err)
		return
	}
	attempts, err := h.op.History(ctx, id)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Policy", err)
		return
	}
	recorded := map[int]record.Attempt{}
	for _, a := range attempts {
		if a.Step == n {
			recorded[a.Attempt] = a
		}
	}
	e := policy.Explain(pol)
	p := policyPage{RunID: id, Step: *step, Policy: pol.String(), Explanation: e, Text: e.String()}
	for _, s := range e.Steps {
		row := policyRow{Attempt: s.Attempt, Min: s.Min, Max: s.Max}
		if a, ok := recorded[s.Attempt]; ok && a.Delay != nil {
			row.Recorded, row.Source = a.Delay, a.DelaySource
		}
		p.Rows = append(p.Rows, row)
	}
	p.Chart = explainChart(p.Rows)
	h.render(w, r, http.StatusOK, "policy", page{Title: "Policy", Nav: "runs", Data: p})
}

// explainChart lays out the delay ranges on one duration axis, at most 60
// of them.
func explainChart(rows []policyRow) delayChart {
	rows = rows[:min(len(rows), 60)]
	c := delayChart{W: 720, H: float64(len(rows))*14 + 24}
	var top time.Duration
	for _, r := range rows {
		top = max(top, r.Max)
		if r.Recorded != nil {
			top = max(top, *r.Recorded)
		}
	}
	if top <= 0 {
		top = time.Second
	}
	const left = 70.0
	axis := c.W - left - 10
	x := func(d time.Duration) float64 { return left + axis*float64(d)/float64(top) }
	for i, r := range rows {
		y := float64(i)*14 + 4
		title := fmt.Sprintf("after attempt %d: %s .. %s", r.Attempt, dur(r.Min), dur(r.Max))
		if r.Recorded != nil {
			title += fmt.Sprintf("; recorded %s (%s)", dur(*r.Recorded), r.Source)
		}
		c.Bars = append(c.Bars, bar{X: x(r.Min), Y: y, W: max(x(r.Max)-x(r.Min), 2), H: 10, Title: title})
	}
	for i := 0; i <= 4; i++ {
		d := top * time.Duration(i) / 4
		anchor := "middle" // the first and last start and end at the axis's ends: no label is cut
		switch i {
		case 0:
			anchor = "start"
		case 4:
			anchor = "end"
		}
		c.Ticks = append(c.Ticks, tick{X: x(d), Label: dur(d), Anchor: anchor})
	}
	return c
}
