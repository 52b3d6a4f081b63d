package ui

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
)

// runsPage is the Data of the runs page: the search and its results, and
// the runs in flight by worker.
type runsPage struct {
	ID, Key, Workflow, Status   string
	CreatedAfter, CreatedBefore string
	Statuses                    []record.RunStatus
	Runs                        []record.RunSummary
	Limit                       int
	InFlight                    []workerRuns
	Error                       string
}

// workerRuns is the runs one worker holds.
type workerRuns struct {
	Worker string
	Runs   []record.InFlight
}

// timeLayout is what <input type="datetime-local"> sends; read as UTC.
const timeLayout = "2006-01-02T15:04"

func parseLocal(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{timeLayout, timeLayout + ":05", time.RFC3339, "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("invalid time %q: want 2006-01-02T15:04 (UTC)", s)
}

func (h *handler) runs(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	p := runsPage{ID: strings.TrimSpace(v.Get("id")), Key: v.Get("key"), Workflow: v.Get("workflow"), Status: v.Get("status"),
		CreatedAfter: v.Get("created_after"), CreatedBefore: v.Get("created_before"), Statuses: record.RunStatuses(), Limit: 100}
	if p.ID != "" {
		if id, err := uuid.Parse(p.ID); err == nil {
			redirect(w, "runs/"+id.String())
			return
		}
		p.Error = fmt.Sprintf("%q is not a run ID (a UUID)", p.ID)
	}
	q := operator.RunSearch{Workflow: p.Workflow, Status: record.RunStatus(p.Status), Key: p.Key, Limit: p.Limit}
	var err error
	if q.CreatedAfter, err = parseLocal(p.CreatedAfter); err == nil {
		q.CreatedBefore, err = parseLocal(p.CreatedBefore)
	}
	if err != nil {
		p.Error = err.Error()
	}
	if p.Status != "" && !validStatus(q.Status) {
		p.Error = fmt.Sprintf("unknown status %q", p.Status)
	}
	ctx := r.Context()
	if p.Error == "" {
		if p.Runs, err = h.op.SearchRuns(ctx, q); err != nil {
			h.fail(w, r, http.StatusInternalServerError, "Runs", err)
			return
		}
	}
	inflight, err := h.op.InFlight(ctx, 500)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Runs", err)
		return
	}
	for _, f := range inflight {
		if n := len(p.InFlight); n > 0 && p.InFlight[n-1].Worker == f.Claimant {
			p.InFlight[n-1].Runs = append(p.InFlight[n-1].Runs, f)
			continue
		}
		p.InFlight = append(p.InFlight, workerRuns{Worker: f.Claimant, Runs: []record.InFlight{f}})
	}
	h.render(w, r, http.StatusOK, "runs", page{Title: "Runs", Nav: "runs", Data: p})
}

func validStatus(s record.RunStatus) bool { return slices.Contains(record.RunStatuses(), s) }
