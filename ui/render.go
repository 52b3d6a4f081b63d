package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
)

// page is what every template gets: the layout's fields and the page's own
// Data.
type page struct {
	Title   string
	Nav     string // the nav entry to mark current
	Root    string // relative path to the handler's root ("" or "../"…)
	Writes  bool
	CSRF    string // the session's CSRF token, for the forms
	Orphans []record.Orphans
	// Replication is the database's, when a failover can lose commits
	// (asynchronous standbys): a banner on every page.
	Replication *record.Replication
	Data        any
}

var funcs = template.FuncMap{
	"ago":      ago,
	"ts":       ts,
	"dur":      dur,
	"runid":    runID,
	"join":     strings.Join,
	"truncate": truncate,
	"deref":    func(t *time.Time) time.Time { return *t },
	"derefd":   func(d *time.Duration) time.Duration { return *d },
	"derefid":  func(id *uuid.UUID) uuid.UUID { return *id },
	"overlaps": func() []string { return []string{"skip", "buffer_one", "buffer_all", "allow", "cancel_other"} },
	"catchups": func() []string { return []string{"latest", "none", "all"} },
	"add":      func(a, b float64) float64 { return a + b },
	"half":     func(a float64) float64 { return a / 2 },
	"plural":   plural,
	"num":      num,
	// indeterminate reports a failure reason whose requeue invokes an
	// at-most-once activity again (see indeterminate.go).
	"indeterminate": func(r policy.Reason) bool { return r == policy.Indeterminate },
	"errtype":       errType,
	// waitingOn is what the "waiting" template renders: the wait, and the
	// path to the root for its links.
	"waitingOn": func(w *waiting, root string) any {
		return struct {
			W    *waiting
			Root string
		}{w, root}
	},
	"spent": spent,
	// breakerword is a breaker's state in words: "half_open" is "half
	// open".
	"breakerword": func(s string) string { return strings.ReplaceAll(s, "_", " ") },
	"pct":         func(r float64) string { return fmt.Sprintf("%g%%", r*100) },
	// waitlen is how long an ended wait on a limit lasted.
	"waitlen": func(t *record.UIThrottle) time.Duration { return t.Ended.Sub(t.Began) },
	// pathesc is a name as one segment of a link's path (a downstream's
	// name may hold a slash).
	"pathesc": url.PathEscape,
}

// runID is a run ID as the pages show it: its last 8 characters, the rest
// in an element of no size (class id-head) that a selection still copies.
// Run IDs are UUIDv7: their first characters are the time they were made,
// the same for runs started together, while the last are random. The link
// around it has the whole ID as its title. Safe HTML: a UUID's text is hex
// digits and hyphens.
func runID(id uuid.UUID) template.HTML {
	s := id.String()
	return template.HTML(`<span class="id-head">` + s[:28] + `</span>` + s[28:])
}

// plural is "1 error", "2 errors", "10,000 runs", for any integer n (or its
// decimal string).
func plural(n any, noun string) string {
	s := num(n)
	if s == "1" {
		return "1 " + noun
	}
	return s + " " + noun + "s"
}

// num is an integer with its thousands separated: "10,000".
func num(n any) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	digits := strings.TrimPrefix(s, "-")
	for _, c := range digits {
		if c < '0' || c > '9' {
			return s
		}
	}
	var b strings.Builder
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// uninformative are the error types that say nothing a message does not:
// what errors.New, fmt.Errorf and errors.Join return, and the wrappers a
// workflow's own error is recorded as.
var uninformative = map[string]bool{
	"": true, "*errors.errorString": true, "*fmt.wrapError": true, "*fmt.wrapErrors": true, "*errors.joinError": true,
}

// errType is the recorded Go type of an error when it tells more than its
// message ("*url.Error", "shop.DeclinedError", "tenure.Indeterminate"),
// else "": the pages lead with the message and show the type after it only
// then (an error of errors.New is a *errors.errorString, whatever it says).
func errType(t string) string {
	if uninformative[t] {
		return ""
	}
	return t
}

// errorText is an error as a tooltip says it: its message, then its type
// when that is informative.
func errorText(typ, msg string) string {
	if t := errType(typ); t != "" {
		return msg + " (" + t + ")"
	}
	return msg
}

// spent says what a failed step spent: "3 attempts (3 errors, 0
// rescues)"; for a step that gave up on a lost attempt (indeterminate, or
// out of rescues), "1 attempt, lost" or "2 attempts (0 errors, 1 rescue),
// the last lost". A rescue is an attempt that followed a lost one.
func spent(f record.Failure) string {
	lost := f.Reason == policy.Indeterminate || f.Reason == policy.RescuesExhausted
	if lost && f.Attempts == 1 && f.Errors == 0 && f.Rescues == 0 {
		return "1 attempt, lost"
	}
	s := fmt.Sprintf("%s (%s, %s)", plural(f.Attempts, "attempt"), plural(f.Errors, "error"), plural(f.Rescues, "rescue"))
	if lost {
		s += ", the last lost"
	}
	return s
}

// parsePages parses each page with the layout: one template set per page,
// so that every page can define "content".
func parsePages() (map[string]*template.Template, error) {
	names, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		base := path.Base(n)
		if base == "layout.html" || base == "svg.html" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/svg.html", n)
		if err != nil {
			return nil, fmt.Errorf("ui: parse %s: %w", n, err)
		}
		pages[strings.TrimSuffix(base, ".html")] = t
	}
	return pages, nil
}

// render writes the page name with data, status 200 unless status says
// otherwise. It renders into a buffer first, so that a template error is a
// 500 page, not half a page.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	t := h.pages[name]
	p.Root = root(r)
	p.Writes = h.cfg.Writes
	p.CSRF = h.csrfToken(w, r)
	p.Orphans = h.orphansNow(r.Context())
	if repl := h.replication.get(replicationTTL, func() (record.Replication, error) { return h.op.Replication(r.Context()) },
		func(err error) { h.log.Warn("ui: replication", "err", err) }); repl.Mode == "asynchronous" {
		p.Replication = &repl
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", p); err != nil {
		h.log.Error("ui: render", "page", name, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// Live data, and write forms carry a CSRF token: never cached.
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// orphansNow is the queued runs no live worker serves, by workflow and
// queue, as the banner of every page shows them (read at most every
// orphanTTL).
func (h *handler) orphansNow(ctx context.Context) []record.Orphans {
	return h.orphans.get(orphanTTL, func() ([]record.Orphans, error) { return h.op.Orphans(ctx) },
		func(err error) { h.log.Warn("ui: orphaned runs", "err", err) })
}

// errorPage is the Data of the error page.
type errorPage struct {
	Status  int
	Message string
}

// fail renders the error page with status and err's message.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, title string, err error) {
	if status >= 500 {
		h.log.Error("ui: "+title, "path", r.URL.Path, "err", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	msg := err.Error()
	if status >= 500 {
		// The database's words (hosts, users, SQL) stay in the log: the
		// pages are readable by whoever reaches the UI.
		msg = "the database did not answer as expected; the UI's log has the details"
		if status == http.StatusGatewayTimeout {
			msg = "the database did not answer in time; try again, or narrow the filter"
		}
	}
	h.render(w, r, status, "error", page{Title: title, Data: errorPage{Status: status, Message: msg}})
}

// cached is a banner's query result, reused for a time: one cheap query
// every few seconds, whatever the traffic. An error keeps the last result
// (the pages that own the data say it).
type cached[T any] struct {
	mu   sync.Mutex
	at   time.Time
	val  T
	busy bool // a request is refreshing val
}

// get returns the value, loaded again once it is ttl old.
func (c *cached[T]) get(ttl time.Duration, load func() (T, error), failed func(error)) T {
	c.mu.Lock()
	if time.Since(c.at) < ttl || c.busy {
		// Fresh, or being refreshed by another request: no page waits for
		// the query but the one that runs it.
		v := c.val
		c.mu.Unlock()
		return v
	}
	c.busy = true
	c.mu.Unlock()
	v, err := load()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.busy = false
	c.at = time.Now() // a failure is not retried by every page either
	if err != nil {
		failed(err)
		return c.val
	}
	c.val = v
	return v
}

// payload is a JSON value as a page shows it: indented, cut at max bytes,
// or hidden.
type payload struct {
	Text      string
	Size      int
	Shown     int
	Truncated bool
	Hidden    bool
	None      bool
}

func (h *handler) payload(b []byte) payload {
	if len(b) == 0 {
		return payload{None: true}
	}
	if h.cfg.HidePayloads {
		return payload{Hidden: true, Size: len(b)}
	}
	p := payload{Size: len(b)}
	if len(b) > h.cfg.MaxPayload {
		cut := h.cfg.MaxPayload // at a character's start: the page shows no half character
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		p.Text, p.Truncated, p.Shown = string(b[:cut]), true, cut
		return p
	}
	var out bytes.Buffer
	if json.Indent(&out, b, "", "  ") == nil && out.Len() <= h.cfg.MaxPayload {
		p.Text = out.String()
	} else {
		p.Text = string(b)
	}
	return p
}

// ago says how long before now t was, in one unit: "3m ago".
func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := time.Since(t)
	if d < 0 {
		return "in " + roughly(-d)
	}
	return roughly(d) + " ago"
}

func roughly(d time.Duration) string {
	switch {
	case d < time.Second:
		return "<1s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// ts is a time in UTC, to the second.
func ts(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// dur is a duration rounded for people.
func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + dur(-d)
	case d < time.Millisecond:
		return d.String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func truncate(n int, s string) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
