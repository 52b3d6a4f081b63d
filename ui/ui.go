package ui

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
)

// DefaultMaxPayload is the number of bytes of a run's input or output a
// page shows when Config.MaxPayload is 0.
const DefaultMaxPayload = 2048

// Config configures the handler New returns. The zero value of every field
// but Operator is usable: a read-only UI that shows payloads up to
// DefaultMaxPayload bytes and links to no tracing system.
type Config struct {
	// Operator runs every query and action. Required.
	Operator *operator.Operator
	// Writes enables the write actions (requeue, purge, cancel; a
	// downstream's limits set or reset, its breaker opened or closed).
	// Default false: the UI is read-only and refuses every POST with 403.
	Writes bool
	// Token, when Writes is set and Authorize is nil, is what a write needs:
	// "Authorization: Bearer <Token>", or the session cookie that the
	// login page (or the link /login?token=<Token>) sets; a login from
	// another site is refused before it is counted. With Writes, one of
	// Token and Authorize is required. New logs a warning for a token of
	// fewer than MinTokenBits bits (CheckToken), and wrong tokens are
	// throttled, answered 429 with Retry-After: per client address, 10 at
	// once, then one every 6 seconds; for all addresses together but the
	// loopback one, 60 at once, then one a second.
	Token string
	// Authorize, when set, is the host application's own authentication:
	// it decides every write (ok false refuses it with 403) and who is
	// recorded in the audit log note ("ui:<who>: <note>"). Token is then
	// not consulted.
	Authorize func(r *http.Request) (who string, ok bool)
	// HidePayloads never shows a run's input or output, nor a step's.
	HidePayloads bool
	// MaxPayload is the number of bytes of a payload shown (0:
	// DefaultMaxPayload); the rest is cut and its size said.
	MaxPayload int
	// TraceURL, when set, links each attempt to its trace: "{trace_id}" and
	// "{span_id}" are replaced by the attempt's recorded IDs, e.g.
	// "https://tempo.example/trace/{trace_id}?span={span_id}".
	TraceURL string
	// AllowedHosts, when not empty, are the only Host headers the UI
	// answers (with or without a port): a UI on a loopback address must
	// refuse the others, or any web page its user visits could read it
	// through DNS rebinding. tenure ui sets it to its own address, the
	// loopback names and those of --allowed-host; the 421 answer to another
	// name says so. Empty: every host (the host application decides).
	AllowedHosts []string
	// Logger receives the write actions (who, what, how many) and errors;
	// nil discards them.
	Logger *slog.Logger
}

//go:embed templates/*.html static/*
var assets embed.FS

// orphanTTL and replicationTTL are how long the banners' query results are
// reused.
const (
	orphanTTL      = 5 * time.Second
	replicationTTL = time.Minute
)

// handler is the UI: one mux of pages over one Operator.
type handler struct {
	cfg   Config
	op    *operator.Operator
	log   *slog.Logger
	mux   *http.ServeMux
	pages map[string]*template.Template
	css   []byte

	orphans     cached[[]record.Orphans]
	replication cached[record.Replication]
	guesses     *throttle // of the write token, per client address and in all
}

// New returns the UI as an http.Handler that serves its pages at the root
// of whatever path it is mounted on: mount it with http.StripPrefix, e.g.
//
//	mux.Handle("/tenure/", http.StripPrefix("/tenure", h))
//
// Every link it writes is relative, so it works under any prefix. New
// returns an error for a nil Operator, and for Writes with neither Token nor
// Authorize (a write UI open to anyone who can reach it).
func New(cfg Config) (http.Handler, error) {
	if cfg.Operator == nil {
		return nil, errors.New("ui.New: nil Operator")
	}
	if cfg.Writes && cfg.Token == "" && cfg.Authorize == nil {
		return nil, errors.New("ui.New: Writes needs a Token or an Authorize function")
	}
	if cfg.MaxPayload < 0 {
		return nil, fmt.Errorf("ui.New: negative MaxPayload %d", cfg.MaxPayload)
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = DefaultMaxPayload
	}
	h := &handler{cfg: cfg, op: cfg.Operator, log: cfg.Logger, guesses: newThrottle(time.Now)}
	if h.log == nil {
		h.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Writes && cfg.Authorize == nil {
		if err := CheckToken(cfg.Token); err != nil {
			h.log.Warn("ui: weak token: " + err.Error())
		}
	}
	var err error
	if h.pages, err = parsePages(); err != nil {
		return nil, err
	}
	if h.css, err = fs.ReadFile(assets, "static/style.css"); err != nil {
		return nil, err
	}
	h.routes()
	return h, nil
}

func (h *handler) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", h.failures)
	m.HandleFunc("GET /failures", h.failures)
	m.HandleFunc("POST /failures/requeue", h.write(h.requeueFailures))
	m.HandleFunc("POST /failures/purge", h.write(h.purgeFailures))
	m.HandleFunc("GET /runs", h.runs)
	m.HandleFunc("GET /runs/{id}", h.run)
	m.HandleFunc("POST /runs/{id}/requeue", h.write(h.requeueRun))
	m.HandleFunc("POST /runs/{id}/cancel", h.write(h.cancelRun))
	m.HandleFunc("GET /workers", h.workers)
	m.HandleFunc("GET /downstreams", h.downstreams)
	m.HandleFunc("GET /downstreams/{name}", h.downstream)
	m.HandleFunc("POST /downstreams/{name}/limits", h.downstreamWrite("Set limits", h.setLimits))
	m.HandleFunc("POST /downstreams/{name}/reset", h.downstreamWrite("Reset limits", h.resetLimits))
	m.HandleFunc("POST /downstreams/{name}/breaker/open", h.downstreamWrite("Open breaker", h.openBreaker))
	m.HandleFunc("POST /downstreams/{name}/breaker/close", h.downstreamWrite("Close breaker", h.closeBreaker))
	m.HandleFunc("GET /schedules", h.schedules)
	m.HandleFunc("GET /schedules/{name}", h.schedule)
	m.HandleFunc("POST /schedules/{name}/pause", h.scheduleWrite("Pause schedule", h.pauseSchedule))
	m.HandleFunc("POST /schedules/{name}/resume", h.scheduleWrite("Resume schedule", h.resumeSchedule))
	m.HandleFunc("POST /schedules/{name}/trigger", h.scheduleWrite("Trigger schedule", h.triggerSchedule))
	m.HandleFunc("POST /schedules/{name}/backfill", h.scheduleWrite("Backfill schedule", h.backfillSchedule))
	m.HandleFunc("POST /schedules", h.write(h.createSchedule))
	m.HandleFunc("POST /schedules/{name}/set", h.write(h.setSchedule))
	m.HandleFunc("POST /schedules/{name}/delete", h.write(h.deleteSchedule))
	m.HandleFunc("GET /policy", h.policy)
	m.HandleFunc("GET /login", h.login)
	m.HandleFunc("POST /login", h.login)
	m.HandleFunc("GET /static/style.css", h.style)
	m.HandleFunc("/", h.notFound)
	h.mux = m
}

// ServeHTTP sets the headers every answer carries and dispatches.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.hostAllowed(r.Host) {
		name := hostName(r.Host)
		http.Error(w, fmt.Sprintf("This UI does not answer to the host name %q (against DNS rebinding). "+
			"To allow it, start tenure ui with --allowed-host %q; a UI mounted in your own server lists it in ui.Config.AllowedHosts.",
			name, name), http.StatusMisdirectedRequest)
		return
	}
	hd := w.Header()
	// No script at all; styles from the embedded sheet only; forms post
	// back here; no framing (clickjacking of the write buttons).
	hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'none'; style-src 'self'; img-src 'self' data:; "+
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	// Same-origin requests keep their Referer (the write check reads it);
	// nothing of the UI's URLs leaks to the trace links.
	hd.Set("Referrer-Policy", "same-origin")
	if r.URL.Path == "" {
		// Mounted as StripPrefix("/tenure", h) and asked for "/tenure":
		// the pages' relative links need the trailing slash.
		seg := r.URL.RawPath
		if seg == "" {
			p := strings.TrimSuffix(requestPath(r), "/")
			seg = p[strings.LastIndex(p, "/")+1:]
		}
		redirect(w, seg+"/")
		return
	}
	h.mux.ServeHTTP(w, r)
}

// hostAllowed reports whether the UI answers requests for host.
func (h *handler) hostAllowed(host string) bool {
	if len(h.cfg.AllowedHosts) == 0 {
		return true
	}
	name := hostName(host)
	for _, a := range h.cfg.AllowedHosts {
		if strings.EqualFold(strings.Trim(a, "[]"), name) || strings.EqualFold(a, host) {
			return true
		}
	}
	return false
}

// hostName is a Host header without its port and brackets.
func hostName(host string) string {
	name := host
	if n, _, err := net.SplitHostPort(host); err == nil {
		name = n
	}
	return strings.Trim(name, "[]")
}

func (h *handler) style(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	_, _ = w.Write(h.css)
}

func (h *handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.fail(w, r, http.StatusNotFound, "No such page", fmt.Errorf("nothing lives at %s", r.URL.Path))
}

// requestPath is the path the client asked for, before any StripPrefix.
func requestPath(r *http.Request) string {
	p := r.RequestURI
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if p == "" || p[0] != '/' { // absolute-form request, or a test's bare request
		return r.URL.Path
	}
	return p
}

// prefix is the path the handler is mounted at, with its trailing slash:
// the cookies' path.
func prefix(r *http.Request) string {
	full := requestPath(r)
	p, ok := strings.CutSuffix(full, r.URL.Path)
	if !ok {
		return "/"
	}
	return p + "/"
}

// root is the relative path from the page asked for to the handler's root:
// "" for /failures, "../" for /runs/{id}, so that links need no prefix. It
// counts the segments of the path as the browser sent it: a downstream's
// name may hold an escaped slash (%2F), one segment.
func root(r *http.Request) string {
	return strings.Repeat("../", max(strings.Count(r.URL.EscapedPath(), "/")-1, 0))
}

// redirect answers 303 See Other with a relative Location, which the
// browser resolves against the URL it asked for, prefix included
// (http.Redirect would make it absolute from the stripped path).
func redirect(w http.ResponseWriter, location string) {
	w.Header().Set("Location", location)
	w.WriteHeader(http.StatusSeeOther)
}
