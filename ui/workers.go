package ui

import (
	"net/http"

	"github.com/tenurehq/tenure/record"
)

// workersPage is the Data of the workers page.
type workersPage struct {
	Workers []workerView
	Orphans []record.Orphans
	Live    int
}

// workerView is a worker with its state in a word: live, stopped (a clean
// shutdown) or dead (no heartbeat, no shutdown).
type workerView struct {
	record.Worker
	State string
}

func (h *handler) workers(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	list, err := h.op.Workers(ctx, true)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Workers", err)
		return
	}
	orphans, err := h.op.Orphans(ctx)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Workers", err)
		return
	}
	p := workersPage{Orphans: orphans}
	for _, wk := range list {
		v := workerView{Worker: wk, State: "dead"}
		switch {
		case wk.Live:
			v.State = "live"
			p.Live++
		case wk.StoppedAt != nil:
			v.State = "stopped"
		}
		p.Workers = append(p.Workers, v)
	}
	h.render(w, r, http.StatusOK, "workers", page{Title: "Workers", Nav: "workers", Data: p})
}
