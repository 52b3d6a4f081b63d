package ui

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/schedule"
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
	// Form is the new-schedule form, as posted when it was refused.
	Form scheduleForm
	// Done says what the last write did; Error why one was refused.
	Done, Error string
}

// scheduleForm is the fields of the form that makes or changes a
// schedule, as shown and as posted.
type scheduleForm struct {
	Name, Spec, Zone, Workflow, Queue, Input, Overlap, Catchup string
}

// formOfSchedule is the form holding s's settings.
func formOfSchedule(s record.Schedule) scheduleForm {
	return scheduleForm{Name: s.Name, Spec: s.Spec, Zone: s.Zone, Workflow: s.Workflow, Queue: s.Queue, Input: string(s.Input),
		Overlap: s.Overlap, Catchup: s.Catchup}
}

// formValues reads the schedule form of r.
func formValues(r *http.Request) scheduleForm {
	v := func(k string) string { return strings.TrimSpace(r.PostFormValue(k)) }
	return scheduleForm{Name: v("name"), Spec: v("spec"), Zone: v("zone"), Workflow: v("workflow"), Queue: v("queue"),
		Input: v("input"), Overlap: v("overlap"), Catchup: v("catchup")}
}

// declaration is the form as a declaration, or why it is not one. It
// keeps what the form does not show of base (the bounds, the jitter, the
// buffer and catch-up bounds).
func (f scheduleForm) declaration(base schedule.Declaration) (schedule.Declaration, error) {
	d := base
	d.Name, d.Spec, d.Zone, d.Workflow, d.Queue, d.Overlap, d.Catchup = f.Name, f.Spec, f.Zone, f.Workflow, f.Queue, f.Overlap, f.Catchup
	d.Input = nil
	if f.Input != "" {
		if !json.Valid([]byte(f.Input)) {
			return d, fmt.Errorf("the input is not JSON: %s", f.Input)
		}
		d.Input = []byte(f.Input)
	}
	if f.Spec == "" || f.Workflow == "" || f.Name == "" {
		return d, errors.New("a schedule needs a name, a spec and a workflow")
	}
	_, err := d.Checked()
	return d, err
}

// schedulePage is the Data of one schedule's page.
type schedulePage struct {
	S     scheduleView
	Ticks []tickView
	// Form is the change form: the schedule's settings, or as posted.
	Form scheduleForm
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
	p := schedulesPage{Done: scheduleDone[r.URL.Query().Get("done")], Form: scheduleForm{Zone: "UTC", Queue: "default"}}
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
	"paused":     "The schedule is paused: no tick is decided until it is resumed. Declarations in code no longer change it.",
	"resumed":    "The schedule is resumed: the ticks due while it was paused are decided as its catch-up policy says.",
	"triggered":  "A run is started now, outside the spec and the overlap policy.",
	"set":        "The schedule is saved: declarations in code no longer change it.",
	"unchanged":  "The schedule has these settings already: nothing changed.",
	"backfilled": "The backfill started a run for each tick of the range that had none (see the ticks below; the audit log counts them).",
	"nothing":    "No tick of the range lacked a run: nothing was started.",
	"deleted":    "The schedule and its ticks are deleted (not their runs).",
}

// showSchedule renders the page of the schedule the path names, with what a
// write did or why it was refused.
func (h *handler) showSchedule(w http.ResponseWriter, r *http.Request, status int, done, refused string) {
	h.showScheduleForm(w, r, status, done, refused, nil)
}

// showScheduleForm is showSchedule with the change form as posted (nil: as
// the schedule is).
func (h *handler) showScheduleForm(w http.ResponseWriter, r *http.Request, status int, done, refused string, form *scheduleForm) {
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
	p := schedulePage{S: scheduleView{Schedule: s, Path: url.PathEscape(s.Name)}, Done: done, Error: refused, Max: maxTicks,
		Form: formOfSchedule(s)}
	if form != nil {
		p.Form = *form
	}
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
		var bad badSchedule
		switch {
		case errors.As(err, &bad):
			h.showSchedule(w, r, http.StatusUnprocessableEntity, "", bad.Error())
			return
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

// createSchedule makes a schedule from the Schedules page's form, as a
// person, audited; a name taken already is refused.
func (h *handler) createSchedule(w http.ResponseWriter, r *http.Request, who string) {
	form := formValues(r)
	refuse := func(why string) {
		list, err := h.op.Schedules(r.Context())
		if err != nil {
			h.fail(w, r, http.StatusInternalServerError, "Schedules", err)
			return
		}
		p := schedulesPage{Form: form, Error: why}
		for _, s := range list {
			p.Schedules = append(p.Schedules, scheduleView{Schedule: s, Path: url.PathEscape(s.Name)})
		}
		h.render(w, r, http.StatusUnprocessableEntity, "schedules", page{Title: "Schedules", Nav: "schedules", Data: p})
	}
	note := strings.TrimSpace(r.PostFormValue("note"))
	if note == "" {
		refuse(noteRequired)
		return
	}
	d, err := form.declaration(schedule.Declaration{})
	if err != nil {
		refuse(err.Error())
		return
	}
	switch _, err := h.op.Schedule(r.Context(), d.Name); {
	case err == nil:
		refuse(fmt.Sprintf("A schedule is named %q already: change it on its page.", d.Name))
		return
	case !errors.Is(err, operator.ErrNoSchedule):
		h.fail(w, r, http.StatusInternalServerError, "New schedule", err)
		return
	}
	if _, err := h.op.SetSchedule(r.Context(), d, auditNote(who, note)); err != nil {
		h.fail(w, r, http.StatusInternalServerError, "New schedule", err)
		return
	}
	h.log.Info("ui: set schedule", "who", who, "schedule", d.Name, "note", note)
	redirect(w, root(r)+"schedules/"+url.PathEscape(d.Name)+"?done=set")
}

// setSchedule changes the schedule the path names to the change form's
// settings (its name is the path's).
func (h *handler) setSchedule(w http.ResponseWriter, r *http.Request, who string) {
	name := r.PathValue("name")
	form := formValues(r)
	form.Name = name
	note := strings.TrimSpace(r.PostFormValue("note"))
	if note == "" {
		h.showScheduleForm(w, r, http.StatusUnprocessableEntity, "", noteRequired, &form)
		return
	}
	cur, err := h.op.Schedule(r.Context(), name)
	if errors.Is(err, operator.ErrNoSchedule) {
		h.fail(w, r, http.StatusNotFound, "Change schedule", fmt.Errorf("no schedule is named %q", name))
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Change schedule", err)
		return
	}
	base := schedule.Declaration{Jitter: cur.Jitter, StartsAt: cur.StartsAt, EndsAt: cur.EndsAt, Priority: cur.Priority,
		BufferMax: cur.BufferMax, CatchupWindow: cur.CatchupWindow, CatchupMax: cur.CatchupMax}
	d, err := form.declaration(base)
	if err != nil {
		h.showScheduleForm(w, r, http.StatusUnprocessableEntity, "", err.Error(), &form)
		return
	}
	changed, err := h.op.SetSchedule(r.Context(), d, auditNote(who, note))
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Change schedule", err)
		return
	}
	done := "unchanged"
	if changed {
		done = "set"
	}
	h.log.Info("ui: change schedule", "who", who, "schedule", name, "done", done, "note", note)
	redirect(w, root(r)+"schedules/"+url.PathEscape(name)+"?done="+done)
}

// backfillSchedule starts the ticks of the form's range that have no run.
func (h *handler) backfillSchedule(r *http.Request, name, note string) (string, error) {
	from, err := scheduleTime(r.PostFormValue("from"))
	if err != nil || from.IsZero() {
		return "", badSchedule{fmt.Errorf("the range's start %q is not a time such as 2026-12-01 or 2026-12-01T03:00:00Z", r.PostFormValue("from"))}
	}
	to, err := scheduleTime(r.PostFormValue("to"))
	if err != nil {
		return "", badSchedule{fmt.Errorf("the range's end %q is not a time such as 2026-12-02 or 2026-12-02T03:00:00Z (empty: now)", r.PostFormValue("to"))}
	}
	ticks, err := h.op.BackfillSchedule(r.Context(), name, from, to, false, note)
	if errors.Is(err, operator.ErrBackfillRange) || errors.Is(err, operator.ErrNotComputed) {
		return "", badSchedule{err}
	}
	if err == nil && len(ticks) == 0 {
		return "nothing", nil
	}
	return "backfilled", err
}

// scheduleTime reads a time of a form: RFC 3339, or a date (midnight UTC); ""
// is the zero time.
func scheduleTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Parse(time.DateOnly, s)
}

// badSchedule is a form the write refuses: shown again, with why (422).
type badSchedule struct{ error }

// deleteSchedule deletes the schedule the path names, audited, and goes
// back to the list.
func (h *handler) deleteSchedule(w http.ResponseWriter, r *http.Request, who string) {
	name := r.PathValue("name")
	note := strings.TrimSpace(r.PostFormValue("note"))
	if note == "" {
		h.showSchedule(w, r, http.StatusUnprocessableEntity, "", noteRequired)
		return
	}
	err := h.op.DeleteSchedule(r.Context(), name, auditNote(who, note))
	switch {
	case errors.Is(err, operator.ErrNoSchedule):
		h.fail(w, r, http.StatusNotFound, "Delete schedule", fmt.Errorf("no schedule is named %q", name))
		return
	case err != nil:
		h.fail(w, r, http.StatusInternalServerError, "Delete schedule", err)
		return
	}
	h.log.Info("ui: delete schedule", "who", who, "schedule", name, "note", note)
	redirect(w, root(r)+"schedules?done=deleted")
}
