package ui_test

import (
	"context"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/ui"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const testToken = "s3cret-token"

// fixture is one migrated schema, its operator, and the UI mounted under
// /tenure/ of a mux, as an application would mount it.
type fixture struct {
	t      testing.TB
	pool   *pgxpool.Pool
	schema string
	st     *store.Store
	op     *operator.Operator
	mux    *http.ServeMux
	csrf   string
	cookie []*http.Cookie
}

func newFixture(t testing.TB, cfg ui.Config) *fixture {
	t.Helper()
	return newFixtureOn(t, pgtest.Pool(t), pgtest.Schema(t), cfg)
}

// newFixtureOn is newFixture on pool, in schema.
func newFixtureOn(t testing.TB, pool *pgxpool.Pool, schema string, cfg ui.Config) *fixture {
	t.Helper()
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(pool, store.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, pool: pool, schema: schema, st: st, op: op}
	f.mount(cfg)
	return f
}

// mount (re)builds the handler with cfg on the fixture's operator.
func (f *fixture) mount(cfg ui.Config) {
	f.t.Helper()
	cfg.Operator = f.op
	h, err := ui.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mux = http.NewServeMux()
	f.mux.Handle("/tenure/", http.StripPrefix("/tenure", h))
}

// fabricate writes runs the way workers leave them.
func (f *fixture) fabricate(outcomes ...storetest.Outcome) []uuid.UUID {
	f.t.Helper()
	ids := make([]uuid.UUID, len(outcomes))
	for i, o := range outcomes {
		id, err := storetest.Run(context.Background(), f.st, o)
		if err != nil {
			f.t.Fatalf("fabricate %+v: %v", o, err)
		}
		ids[i] = id
	}
	return ids
}

// queue records a run no worker claims.
func (f *fixture) queue(workflow string) uuid.UUID {
	f.t.Helper()
	id := uuid.New()
	if _, _, _, err := f.st.InsertRun(f.t.Context(), f.pool, store.NewRun{ID: id, Workflow: workflow, Queue: "default", Input: []byte(`{"q":1}`)}); err != nil {
		f.t.Fatal(err)
	}
	return id
}

func (f *fixture) do(req *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	f.mux.ServeHTTP(w, req)
	return w
}

// get asks for path under the mount and keeps the CSRF cookie it sets.
func (f *fixture) get(path string) *httptest.ResponseRecorder {
	f.t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/tenure/"+path, nil)
	for _, c := range f.cookie {
		req.AddCookie(c)
	}
	w := f.do(req)
	for _, c := range w.Result().Cookies() {
		if c.Name == "tenure_csrf" {
			f.csrf = c.Value
			f.cookie = append(f.cookie, c)
		}
	}
	return w
}

// postOpts says what a POST carries; the zero value is a well-formed write
// from the UI's own page with the token.
type postOpts struct {
	noToken, noCSRF bool
	token           string // instead of testToken
	csrf            string // instead of the session's
	origin          string // instead of http://example.com
}

func (f *fixture) post(path string, form url.Values, o postOpts) *httptest.ResponseRecorder {
	f.t.Helper()
	if f.csrf == "" {
		f.get("failures")
	}
	if form == nil {
		form = url.Values{}
	}
	if !o.noCSRF {
		v := f.csrf
		if o.csrf != "" {
			v = o.csrf
		}
		form.Set("csrf", v)
	}
	req := httptest.NewRequest(http.MethodPost, "/tenure/"+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	origin := "http://example.com" // httptest.NewRequest's host
	if o.origin != "" {
		origin = o.origin
	}
	req.Header.Set("Origin", origin)
	if !o.noToken {
		tok := testToken
		if o.token != "" {
			tok = o.token
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for _, c := range f.cookie {
		if c.Name != "tenure_csrf" || !o.noCSRF || o.csrf != "" {
			req.AddCookie(c)
		}
	}
	return f.do(req)
}

// want fails unless the answer has status and every pattern in its body.
func want(t testing.TB, w *httptest.ResponseRecorder, status int, patterns ...string) string {
	t.Helper()
	body := w.Body.String()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body:\n%s", w.Code, status, firstLines(body, 60))
	}
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(body) {
			t.Fatalf("body lacks %q:\n%s", p, firstLines(body, 200))
		}
	}
	return body
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// count counts the matches of pattern in body.
func count(body, pattern string) int {
	return len(regexp.MustCompile(pattern).FindAllStringIndex(body, -1))
}

// auditRows reads the audit log.
func (f *fixture) auditRows() []record.AuditEntry {
	f.t.Helper()
	rows, err := f.op.AuditLog(f.t.Context(), 100)
	if err != nil {
		f.t.Fatal(err)
	}
	return rows
}

func (f *fixture) status(id uuid.UUID) record.RunStatus {
	f.t.Helper()
	r, err := f.op.Run(f.t.Context(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return r.Status
}

// beat registers a live worker serving workflows on the default queue.
func (f *fixture) beat(label string, workflows ...string) {
	f.t.Helper()
	err := f.st.Beat(f.t.Context(), f.pool, store.WorkerBeat{ID: uuid.New(), Label: label, Host: "host-1", PID: 42, Version: "test",
		Workflows: workflows, Queues: []string{"default"}, Concurrency: 8, Interval: time.Second, TTL: 30 * time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
}

var failedOrder = storetest.Outcome{Workflow: "orders", Activity: "charge", Key: "order-42", Errors: 3, Reason: sdk.ReasonRetriesExhausted}

type httptestRecorder = httptest.ResponseRecorder

// newPost is a form POST from the UI's own page (Origin set).
func newPost(target string, form url.Values) *http.Request {
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://example.com")
	return req
}

func htmlUnescape(s string) string { return html.UnescapeString(s) }

// A UI with AllowedHosts refuses other host names (DNS rebinding); a
// script with the bearer token writes without the browser's CSRF dance.
func TestUI_AllowedHostsAndBearerScripts(t *testing.T) {
	t.Parallel()
	op := newFixture(t, ui.Config{}).op
	h, err := ui.New(ui.Config{Operator: op, Writes: true, Token: testToken, AllowedHosts: []string{"127.0.0.1", "localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	get := func(host string) int {
		req := httptest.NewRequest(http.MethodGet, "/workers", nil)
		req.Host = host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	if code := get("127.0.0.1:8080"); code != http.StatusOK {
		t.Fatalf("loopback host: %d", code)
	}
	if code := get("rebind.attacker.example:8080"); code != http.StatusMisdirectedRequest {
		t.Fatalf("another host name: %d, want 421", code)
	}
	req := httptest.NewRequest(http.MethodPost, "/runs/"+uuid.NewString()+"/cancel", strings.NewReader("confirm=1"))
	req.Host = "127.0.0.1:8080"
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+testToken)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code == http.StatusForbidden {
		t.Fatalf("a bearer script was refused: %d\n%s", w.Code, w.Body.String())
	}
}

// A page whose query fails shows a generic message: the database's words
// (its host, user, schema, SQL) go to the log, not to whoever reads the page.
func TestUI_ADatabaseErrorIsNotShownOnThePage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	// Drop a table the runs page reads: its query now fails in the database.
	if _, err := f.pool.Exec(t.Context(), "DROP VIEW "+f.schema+".in_flight"); err != nil {
		t.Fatal(err)
	}
	w := f.get("runs")
	body := w.Body.String()
	if w.Code < 500 || strings.Contains(body, "in_flight") || strings.Contains(body, "SQLSTATE") {
		t.Fatalf("status %d, body shows the database's error:\n%s", w.Code, firstLines(body, 60))
	}
	if !strings.Contains(body, "log has the details") {
		t.Fatalf("no generic message:\n%s", firstLines(body, 60))
	}
}
