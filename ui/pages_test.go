package ui_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/ui"
)

func TestNew_RefusesBadConfig(t *testing.T) {
	t.Parallel()
	if _, err := ui.New(ui.Config{}); err == nil {
		t.Fatal("New without Operator: no error")
	}
	f := newFixture(t, ui.Config{})
	if _, err := ui.New(ui.Config{Operator: f.op, Writes: true}); err == nil {
		t.Fatal("New with Writes and neither Token nor Authorize: no error")
	}
}

func TestPages_EveryPageAnswers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	ids := f.fabricate(failedOrder,
		storetest.Outcome{Workflow: "orders", Activity: "email", Errors: 1, Reason: sdk.ReasonNonRetryable},
		storetest.Outcome{Workflow: "orders", Activity: "charge", Key: "order-43", Errors: 2})
	f.beat("worker-a", "orders")
	failed, done := ids[0].String(), ids[2].String()

	for _, path := range []string{"", "failures"} {
		body := want(t, f.get(path), http.StatusOK, `data-testid="failure-group"`, `retries_exhausted`, `non_retryable`,
			`<nav>`, `>Failures</a>`, `>Runs</a>`, `>Workers</a>`, `>Downstreams</a>`, `<svg class="chart"`)
		if n := count(body, `data-testid="failure-group"`); n != 2 {
			t.Fatalf("/%s: %d failure groups, want 2", path, n)
		}
		if strings.Contains(body, `data-testid="group-requeue"`) {
			t.Fatal("read-only failures page offers a requeue")
		}
	}
	// Filters narrow the groups.
	body := want(t, f.get("failures?activity=email&age=24h"), http.StatusOK, `non_retryable`)
	if n := count(body, `data-testid="failure-group"`); n != 1 {
		t.Fatalf("filtered: %d groups, want 1", n)
	}
	body = want(t, f.get("failures?key=order-42"), http.StatusOK, `retries_exhausted`)
	if n := count(body, `data-testid="failure-group"`); n != 1 {
		t.Fatalf("by key: %d groups, want 1", n)
	}
	want(t, f.get("failures?age=forever"), http.StatusBadRequest)

	body = want(t, f.get("runs"), http.StatusOK, `<form data-testid="run-search" method="get" action="runs">`,
		`<input name="key"`, `<input name="workflow"`, `<select name="status">`, `type="submit"`,
		`<a data-testid="run-link" href="runs/`+failed+`"`)
	if n := count(body, `data-testid="run-row"`); n != 3 {
		t.Fatalf("runs: %d rows, want 3", n)
	}
	body = want(t, f.get("runs?status=completed"), http.StatusOK, done)
	if n := count(body, `data-testid="run-row"`); n != 1 {
		t.Fatalf("completed runs: %d rows, want 1", n)
	}
	want(t, f.get("runs?key=order-42&workflow=orders"), http.StatusOK, failed)
	want(t, f.get("runs?created_after=2000-01-01T00:00&created_before=2999-01-01T00:00"), http.StatusOK, failed)
	if w := f.get("runs?id=" + failed); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "runs/"+failed {
		t.Fatalf("search by ID: %d %q, want a redirect to runs/%s", w.Code, w.Header().Get("Location"), failed)
	}

	var epoch int64 // its first attempt's: the claim's time in milliseconds
	if err := f.pool.QueryRow(t.Context(), fmt.Sprintf(`SELECT epoch FROM %s.attempts WHERE run_id = $1 AND attempt = 1`, f.schema),
		ids[0]).Scan(&epoch); err != nil {
		t.Fatal(err)
	}
	want(t, f.get("runs/"+failed), http.StatusOK, `<svg data-testid="timeline"`, `data-testid="run-status">failed<`,
		`data-testid="failure-row"`, `retries_exhausted`, `order-42`, `class="a-failed"`, fmt.Sprintf(`epoch %d, worker test-worker`, epoch),
		`class="d-jitter"`, `policy\?run=`+failed+`&amp;step=1`, `&#34;n&#34;: 1`, `href="../failures"`)
	want(t, f.get("runs/"+done), http.StatusOK, `data-testid="run-status">completed<`, `class="a-succeeded"`)
	want(t, f.get("runs/"+strings.Repeat("0", 8)+failed[8:]), http.StatusNotFound)
	want(t, f.get("runs/nope"), http.StatusBadRequest)

	want(t, f.get("workers"), http.StatusOK, `data-testid="worker-row"`, `worker-a`, `s-live`)
	want(t, f.get("downstreams"), http.StatusOK, `data-testid="no-downstreams"`)
	want(t, f.get("downstreams/payments"), http.StatusNotFound)
	want(t, f.get("policy?run="+failed+"&step=1"), http.StatusOK, `data-testid="explain-row"`, `worst case`,
		`data-testid="policy-chart"`, `10ms \(jitter\)`)
	want(t, f.get("policy?run="+failed+"&step=9"), http.StatusNotFound)
	want(t, f.get("nothing-here"), http.StatusNotFound)
}

func TestPages_SecurityHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	w := f.get("failures")
	for k, v := range map[string]string{
		"X-Frame-Options": "DENY", "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
	} {
		if got := w.Header().Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	// Cookies are scoped to the mount.
	for _, c := range w.Result().Cookies() {
		if c.Path != "/tenure/" || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
			t.Errorf("cookie %s: path %q httpOnly %v sameSite %v", c.Name, c.Path, c.HttpOnly, c.SameSite)
		}
	}
	want(t, f.get("static/style.css"), http.StatusOK, `--fail`)
	// The mount without its slash redirects to it.
	w = f.do(mustRequest(http.MethodGet, "/tenure"))
	if w.Code/100 != 3 || w.Header().Get("Location") != "/tenure/" {
		t.Fatalf("/tenure: %d", w.Code)
	}
}

func TestPages_HidePayloads(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{HidePayloads: true})
	id := f.fabricate(storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 1})[0]
	body := want(t, f.get("runs/"+id.String()), http.StatusOK, `data-testid="payload-hidden"`)
	if strings.Contains(body, `&#34;n&#34;`) || strings.Contains(body, `data-testid="payload"`) {
		t.Fatal("HidePayloads: the input is shown")
	}
}

func TestPages_MaxPayloadCuts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{MaxPayload: 4})
	id := f.fabricate(storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 1})[0]
	want(t, f.get("runs/"+id.String()), http.StatusOK, `<pre data-testid="payload">{&#34;n&#34;</pre>`, `the first 4 of 8 bytes`)
}

func TestPages_TraceLinks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{TraceURL: "https://tempo.example/trace/{trace_id}?span={span_id}"})
	id := f.fabricate(storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 2})[0]
	body := want(t, f.get("runs/"+id.String()), http.StatusOK, `data-testid="trace-link" href="https://tempo.example/trace/trace-1\?span=`,
		`<a href="https://tempo.example/trace/trace-2\?span=`)
	if n := count(body, `data-testid="trace-link"`); n != 3 {
		t.Fatalf("%d trace links, want 3 (one per attempt)", n)
	}
	g := newFixture(t, ui.Config{})
	id = g.fabricate(storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 1})[0]
	if strings.Contains(g.get("runs/"+id.String()).Body.String(), "trace-link") {
		t.Fatal("trace links without TraceURL")
	}
}

func TestPages_OrphanWarningOnEveryPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	id := f.fabricate(failedOrder)[0]
	f.beat("worker-a", "orders")
	f.queue("ghost-workflow")
	f.queue("ghost-workflow")
	for _, path := range []string{"failures", "runs", "workers", "downstreams", "runs/" + id.String(), "policy?run=" + id.String() + "&step=1"} {
		want(t, f.get(path), http.StatusOK, `data-testid="orphan-warning"`, `<b>ghost-workflow</b>`)
	}
	want(t, f.get("workers"), http.StatusOK, `data-testid="orphan-row"`)

	// A run of a served workflow pinned to a build no live worker runs
	// (sdk.WithPinning): the banner, the Workers page and the run's page
	// name the build and how to move the run.
	pinned := f.queue("orders")
	if _, err := f.pool.Exec(t.Context(), strings.ReplaceAll(`UPDATE {schema}.runs SET pinned_to = 'gone-build', started_at = now() WHERE id = $1`,
		"{schema}", f.st.Schema()), pinned); err != nil {
		t.Fatal(err)
	}
	f.mount(ui.Config{}) // a new handler: the banner's cached orphans are read again
	want(t, f.get("failures"), http.StatusOK, `data-testid="orphan-build">gone-build</b>`, `tenure runs move --build gone-build`)
	want(t, f.get("workers"), http.StatusOK, `data-testid="orphan-build">gone-build</td>`)
	want(t, f.get("runs/"+pinned.String()), http.StatusOK, `data-testid="run-pinned">gone-build`,
		`no live worker of build <code>gone-build</code>, to which the run is pinned, serves <code>orders</code>`)

	g := newFixture(t, ui.Config{})
	if strings.Contains(g.get("failures").Body.String(), "orphan-warning") {
		t.Fatal("orphan warning without orphans")
	}
}

// Every page warns while the database has standbys that commits do not wait
// for (a failover can lose runs), and names the settings; not with a
// synchronous standby, nor with none.
func TestPages_ReplicationWarningOnEveryPageWhileAFailoverCanLoseRuns(t *testing.T) {
	t.Parallel()
	for _, sync := range []bool{false, true} {
		rep := pgtest.Replicate(t, sync)
		pool, err := pgxpool.New(t.Context(), rep.PrimaryURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		f := newFixtureOn(t, pool, "tenure", ui.Config{})
		for _, path := range []string{"failures", "runs", "workers"} {
			body := want(t, f.get(path), http.StatusOK)
			if got := strings.Contains(body, `data-testid="replication-warning"`); got == sync {
				t.Fatalf("sync %v, /%s: replication warning %v\n%s", sync, path, got, body)
			}
			if !sync && !strings.Contains(body, "1 standby that commits do not wait for") {
				t.Fatalf("/%s: the warning does not say why\n%s", path, body)
			}
		}
	}
	if body := want(t, newFixture(t, ui.Config{}).get("failures"), http.StatusOK); strings.Contains(body, "replication-warning") {
		t.Fatal("replication warning on a server without standbys")
	}
}

func mustRequest(method, target string) *http.Request {
	req, err := http.NewRequest(method, target, nil)
	if err != nil {
		panic(err)
	}
	req.RequestURI = target
	return req
}

// A run with more steps than a page shows lists the last ones and says how
// many it left out.
func TestRunPage_ShowsTheLastStepsOfALongRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	id := f.fabricate(failedOrder)[0]
	if _, err := f.pool.Exec(t.Context(), strings.ReplaceAll(`
		INSERT INTO {schema}.steps (run_id, step, activity, kind, status, output, policy, finished_at)
		SELECT $1, 100 + i, 'now', 'now', 'completed', to_jsonb(now()), '{}', now() FROM generate_series(1, 510) AS i`,
		"{schema}", f.schema), id); err != nil {
		t.Fatal(err)
	}
	body := want(t, f.get("runs/"+id.String()), http.StatusOK, `data-testid="hidden-steps"`)
	if !strings.Contains(body, "earlier steps not shown") {
		t.Fatalf("no count of the steps left out:\n%s", firstLines(body, 60))
	}
}
