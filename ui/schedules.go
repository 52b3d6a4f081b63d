package ui

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
)

// scheduleView is a schedule as the pages show it.
type scheduleView struct {
	record.Schedule
	// Path is its name as a path segment, escaped.
	Path string
}

// State is the schedule's state in a word: active, paused, ended, error.
func (s scheduleView) State() string {
	switch {
	case s.Error != "":
		return "error"
	case s.PausedAt != nil:
		return "paused"
	case s.Ended:
		return "ended"
	}
	return "active"
}

// tickView is a tick decided, with its lag.
type tickView struct {
	record.ScheduleTick
}

// Lag is how late the tick was decided after its nominal time.
func (t tickView) Lag() time.Duration { return t.DecidedAt.Sub(t.NominalAt) }

// schedulesPage is the Data of the Schedules page.
type schedulesPage struct {
	Schedules []scheduleView
}

// schedulePage is the Data of one schedule's page.
type schedulePage struct {
	S     scheduleView
	Ticks []tickView
	// Done says what the last write did; Error why one was refused.
	Done, Error string
	// Max is how many ticks the page lists at most.
	Max int
}

// maxTicks is how many ticks a schedule's page lists: the latest.
const maxTicks = 50

func (h *handler) schedules(w http.ResponseWriter, r *http.Request) {
	list, err := h.op.Schedules(r.Context())
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Schedules", err)
		return
	}
	p := schedulesPage{}
	for _, s := range list {
		p.Schedules = append(p.Schedules, scheduleView{Schedule: s, Path: url.PathEscape(s.Name)})
	}
	h.render(w, r, http.StatusOK, "schedules", page{Title: "Schedules", Nav: "schedules", Data: p})
}

func (h *handler) schedule(w http.ResponseWriter, r *http.Request) {
	h.showSchedule(w, r, http.StatusOK, scheduleDone[r.URL.Query().Get("done")], "")
}

// scheduleDone is what the page says after each write (the redirect's done=).
var scheduleDone = map[string]string{
	"paused":    "The schedule is paused: no tick is decided until it is resumed. Declarations in code no longer change it.",
	"resumed":   "The schedule is resumed: the ticks due while it was paused are decided as its catch-up policy says.",
	"triggered": "A run is started now, outside the spec and the overlap policy.",
}

// showSchedule renders the page of the schedule the path names, with what a
// write did or why it was refused.
func (h *handler) showSchedule(w http.ResponseWriter, r *http.Request, status int, done, refused string) {
	name := r.PathValue("name")
	s, err := h.op.Schedule(r.Context(), name)
	if errors.Is(err, operator.ErrNoSchedule) {
		h.fail(w, r, http.StatusNotFound, "Schedule", fmt.Errorf("no schedule is named %q", name))
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Schedule", err)
		return
	}
	ticks, err := h.op.ScheduleTicks(r.Context(), name, maxTicks)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Schedule", err)
		return
	}
	p := schedulePage{S: scheduleView{Schedule: s, Path: url.PathEscape(s.Name)}, Done: done, Error: refused, Max: maxTicks}
	for _, t := range ticks {
		p.Ticks = append(p.Ticks, tickView{t})
	}
	h.render(w, r, status, "schedule", page{Title: "Schedule " + name, Nav: "schedules", Data: p})
}

// scheduleWrite guards a write to the schedule the path names, as
// downstreamWrite does a downstream's: writes enabled, authenticated, CSRF,
// a note required; ErrNoSchedule is a 404.
func (h *handler) scheduleWrite(title string, do func(r *http.Request, name, note string) (done string, err error)) http.HandlerFunc {
	return h.write(func(w http.ResponseWriter, r *http.Request, who string) {
		name := r.PathValue("name")
		note := strings.TrimSpace(r.PostFormValue("note"))
		if note == "" {
			h.showSchedule(w, r, http.StatusUnprocessableEntity, "", noteRequired)
			return
		}
		done, err := do(r, name, auditNote(who, note))
		switch {
		case errors.Is(err, operator.ErrNoSchedule):
			h.fail(w, r, http.StatusNotFound, title, fmt.Errorf("no schedule is named %q", name))
			return
		case err != nil:
			h.fail(w, r, http.StatusInternalServerError, title, err)
			return
		}
		h.log.Info("ui: "+strings.ToLower(title), "who", who, "schedule", name, "done", done, "note", note)
		redirect(w, root(r)+"schedules/"+url.PathEscape(name)+"?done="+done)
	})
}

func (h *handler) pauseSchedule(r *http.Request, name, note string) (string, error) {
	return "paused", h.op.PauseSchedule(r.Context(), name, note)
}

func (h *handler) resumeSchedule(r *http.Request, name, note string) (string, error) {
	return "resumed", h.op.ResumeSchedule(r.Context(), name, note)
}

func (h *handler) triggerSchedule(r *http.Request, name, note string) (string, error) {
	_, err := h.op.TriggerSchedule(r.Context(), name, note)
	return "triggered", err
}
