package ui

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
)

// downstreamView is a downstream as the pages show it: its row of
// downstream_status, and what its numbers say in words.
type downstreamView struct {
	record.UIDownstream
	// Path is its name as a path segment, escaped.
	Path string
}

func newDownstreamView(d record.UIDownstream) downstreamView {
	return downstreamView{UIDownstream: d, Path: url.PathEscape(d.Name)}
}

// BreakerText is the breaker's state in words: closed, open, half open.
func (d downstreamView) BreakerText() string { return strings.ReplaceAll(d.Breaker, "_", " ") }

// InUseText is the slots in use against the concurrency limit, "1 / 2", "3
// / 2 per key" when more than one key shares the count; "" without a
// concurrency limit.
func (d downstreamView) InUseText() string {
	if d.Limits.Concurrency == 0 {
		return ""
	}
	s := fmt.Sprintf("%s / %s", num(d.InUse), num(d.Limits.Concurrency))
	if d.Keys > 1 {
		s += " per key"
	}
	return s
}

// RateText is the rate limit, "50 per 1s, burst 10"; "" for none.
func (d downstreamView) RateText() string {
	r := d.Limits.Rate
	if r == nil {
		return ""
	}
	return fmt.Sprintf("%s per %s, burst %s", num(r.N), r.Per, num(r.Burst))
}

// TokensText is the retry budget's balance against what it holds at most,
// "9.0 of 10"; "full (10)" before its first retry; "" without a budget.
func (d downstreamView) TokensText() string {
	b := d.Limits.RetryBudget
	if b == nil {
		return ""
	}
	most := max(b.PerSecond, 1)
	if d.RetryTokens == nil {
		return fmt.Sprintf("full (%g)", most)
	}
	return fmt.Sprintf("%.1f of %g", *d.RetryTokens, most)
}

// DeclaredText is the limits code declared, or "" when none did.
func (d downstreamView) DeclaredText() string {
	if d.Declared == nil {
		return ""
	}
	return d.Declared.String()
}

// limitChangeView is a change of limits with its limits in words.
type limitChangeView struct {
	record.UILimitChange
	BeforeText, AfterText string
}

// limitsForm is the set-limits form's fields, as shown and as posted.
type limitsForm struct {
	Concurrency, Rate, Per, Burst string
}

// formOf is the form holding d's limits now.
func formOf(l flow.Limits) limitsForm {
	var f limitsForm
	if l.Concurrency > 0 {
		f.Concurrency = strconv.Itoa(l.Concurrency)
	}
	f.Per = "1s"
	if r := l.Rate; r != nil {
		f.Rate, f.Per, f.Burst = strconv.Itoa(r.N), r.Per.String(), strconv.Itoa(r.Burst)
	}
	return f
}

// downstreamsPage is the Data of the Downstreams page.
type downstreamsPage struct {
	Downstreams []downstreamView
}

// downstreamPage is the Data of one downstream's page.
type downstreamPage struct {
	D        downstreamView
	Breakers []record.UIBreakerChange
	Changes  []limitChangeView
	Waiting  []record.UIWaitingRun
	HideKeys bool
	Form     limitsForm
	// Done says what the last write did; Error why a write was refused.
	Done, Error string
}

// maxHistory is how many breaker changes, limit changes and waiting runs a
// downstream's page lists: the latest, and the oldest waits.
const maxHistory = 50

func (h *handler) downstreams(w http.ResponseWriter, r *http.Request) {
	list, err := h.op.UIDownstreams(r.Context())
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Downstreams", err)
		return
	}
	p := downstreamsPage{}
	for _, d := range list {
		p.Downstreams = append(p.Downstreams, newDownstreamView(d))
	}
	h.render(w, r, http.StatusOK, "downstreams", page{Title: "Downstreams", Nav: "downstreams", Data: p})
}

func (h *handler) downstream(w http.ResponseWriter, r *http.Request) {
	h.showDownstream(w, r, http.StatusOK, nil, doneText[r.URL.Query().Get("done")], "")
}

// doneText is what the page says after each write (the redirect's done=).
var doneText = map[string]string{
	"limits":    "The limits are changed: the downstream's workers apply them at the next admission. Declarations no longer apply until it is reset.",
	"unchanged": "The limits were already those: nothing changed.",
	"reset":     "The limits are back to the declaration.",
	"opened":    "The breaker is open: no attempt calls the downstream until it is closed by hand.",
	"closed":    "The breaker is closed: the runs waiting on it are woken.",
}

// showDownstream renders the page of the downstream the path names, with
// the set-limits form as posted (nil: as the limits are), what a write
// did, or why it was refused.
func (h *handler) showDownstream(w http.ResponseWriter, r *http.Request, status int, form *limitsForm, done, refused string) {
	ctx := r.Context()
	name := r.PathValue("name")
	d, err := h.op.UIDownstream(ctx, name)
	if errors.Is(err, operator.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, "Downstream", fmt.Errorf("no downstream is named %q: a downstream exists once a worker whose code declares it has started", name))
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Downstream", err)
		return
	}
	p := downstreamPage{D: newDownstreamView(d), HideKeys: h.cfg.HidePayloads, Form: formOf(d.Limits), Done: done, Error: refused}
	if form != nil {
		p.Form = *form
	}
	if p.Breakers, err = h.op.UIBreakerHistory(ctx, name, maxHistory); err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Downstream", err)
		return
	}
	changes, err := h.op.UILimitChanges(ctx, name, maxHistory)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Downstream", err)
		return
	}
	for _, c := range changes {
		v := limitChangeView{UILimitChange: c, BeforeText: "none", AfterText: "none"}
		if c.Before != nil {
			v.BeforeText = c.Before.String()
		}
		if c.After != nil {
			v.AfterText = c.After.String()
		}
		p.Changes = append(p.Changes, v)
	}
	if p.Waiting, err = h.op.UIWaitingOn(ctx, name, maxHistory); err != nil {
		h.fail(w, r, http.StatusInternalServerError, "Downstream", err)
		return
	}
	h.render(w, r, status, "downstream", page{Title: "Downstream " + name, Nav: "downstreams", Data: p})
}

// noteRequired is why a write without a note is refused: the audit log's
// row of a change of limits or of a breaker says why through it.
const noteRequired = "A note is required: the audit log records it as the reason for the change (an incident, a ticket)."

// downstreamWrite guards a write to the downstream the path names: a
// write action (writes enabled, the caller authenticated, CSRF) whose note
// is required, then do, whose error ErrNotFound is a 404; on success the
// browser goes back to the downstream's page, which says done.
func (h *handler) downstreamWrite(title string, do func(r *http.Request, name, note string) (done string, refused error)) http.HandlerFunc {
	return h.write(func(w http.ResponseWriter, r *http.Request, who string) {
		name := r.PathValue("name")
		note := strings.TrimSpace(r.PostFormValue("note"))
		if note == "" {
			h.refuseDownstreamWrite(w, r, noteRequired)
			return
		}
		done, err := do(r, name, auditNote(who, note))
		var bad badLimits
		switch {
		case errors.As(err, &bad):
			h.refuseDownstreamWrite(w, r, err.Error())
			return
		case errors.Is(err, operator.ErrNotFound):
			h.fail(w, r, http.StatusNotFound, title, fmt.Errorf("no downstream is named %q", name))
			return
		case err != nil:
			h.fail(w, r, http.StatusInternalServerError, title, err)
			return
		}
		h.log.Info("ui: "+strings.ToLower(title), "who", who, "downstream", name, "done", done, "note", note)
		redirect(w, root(r)+"downstreams/"+url.PathEscape(name)+"?done="+done)
	})
}

// refuseDownstreamWrite shows the downstream's page again with why the
// write was refused (422) and the limits form as posted.
func (h *handler) refuseDownstreamWrite(w http.ResponseWriter, r *http.Request, why string) {
	var form *limitsForm
	if strings.HasSuffix(r.URL.Path, "/limits") {
		form = &limitsForm{Concurrency: r.PostFormValue("concurrency"), Rate: r.PostFormValue("rate"),
			Per: r.PostFormValue("per"), Burst: r.PostFormValue("burst")}
	}
	h.showDownstream(w, r, http.StatusUnprocessableEntity, form, "", why)
}

// badLimits is a set-limits form that does not parse, or limits that make
// no sense.
type badLimits struct{ error }

// setLimits changes the concurrency and rate limits to the form's, those
// that differ from the limits in force, through set_downstream (audited).
func (h *handler) setLimits(r *http.Request, name, note string) (string, error) {
	want, err := parseLimits(r.PostForm)
	if err != nil {
		return "", badLimits{err}
	}
	d, err := h.op.UIDownstream(r.Context(), name)
	if err != nil {
		return "", err
	}
	c := operator.UILimitsChange{}
	if want.Concurrency != d.Limits.Concurrency {
		c.SetConcurrency, c.Concurrency = true, want.Concurrency
	}
	if !sameRate(want.Rate, d.Limits.Rate) {
		c.SetRate, c.Rate = true, want.Rate
	}
	if !c.SetConcurrency && !c.SetRate {
		return "unchanged", nil
	}
	_, err = h.op.UISetLimits(r.Context(), name, c, note)
	return "limits", err
}

func sameRate(a, b *flow.RateLimit) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// parseLimits reads the set-limits form: an empty concurrency is no
// concurrency limit, an empty rate no rate limit (its interval then
// defaults to a second, its burst to 1).
func parseLimits(v url.Values) (flow.Limits, error) {
	var l flow.Limits
	count := func(field, what string) (int, error) {
		s := strings.TrimSpace(v.Get(field))
		if s == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("the %s %q is not a whole number of at least 1 (empty: no limit)", what, s)
		}
		return n, nil
	}
	var err error
	if l.Concurrency, err = count("concurrency", "concurrency"); err != nil {
		return l, err
	}
	n, err := count("rate", "rate")
	if err != nil || n == 0 {
		return l, err
	}
	rate := flow.RateLimit{N: n, Per: time.Second, Burst: 1}
	if s := strings.TrimSpace(v.Get("per")); s != "" {
		if rate.Per, err = time.ParseDuration(s); err != nil || rate.Per < time.Millisecond {
			return l, fmt.Errorf("the rate's interval %q is not a duration of at least 1ms, such as 1s or 1m", s)
		}
	}
	if b, err := count("burst", "burst"); err != nil {
		return l, err
	} else if b > 0 {
		rate.Burst = b
	}
	l.Rate = &rate
	return l, l.Validate()
}

// resetLimits gives the downstream back to its declaration.
func (h *handler) resetLimits(r *http.Request, name, note string) (string, error) {
	_, err := h.op.UIResetLimits(r.Context(), name, note)
	return "reset", err
}

// openBreaker opens the downstream's breaker by hand.
func (h *handler) openBreaker(r *http.Request, name, note string) (string, error) {
	return "opened", h.op.UIOpenBreaker(r.Context(), name, note)
}

// closeBreaker closes the downstream's breaker by hand.
func (h *handler) closeBreaker(r *http.Request, name, note string) (string, error) {
	return "closed", h.op.UICloseBreaker(r.Context(), name, note)
}
