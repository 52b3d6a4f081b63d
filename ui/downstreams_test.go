package ui_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/ui"
)

// payments is a worker whose activity charge calls the downstream
// payments, one call at a time, and answers each call when the test lets
// it (gate).
type payments struct {
	f      *fixture
	client *sdk.Client
	wf     *sdk.Workflow[string, string]
	gate   chan struct{}
	label  string
}

// payments starts the payments worker on f's schema; it stops when the
// test ends, its calls answered.
func (f *fixture) payments() *payments {
	f.t.Helper()
	p := &payments{f: f, gate: make(chan struct{}), label: "pay-worker"}
	ds := flow.New("payments", flow.Concurrency(1), flow.Breaker(flow.BreakerPolicy{MinCalls: 3}))
	charge := activities.New("charge", func(ctx context.Context, account string) (string, error) {
		select {
		case <-p.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "charged " + account, nil
	}, policy.MaxAttempts(3)).Calls(ds, nil)
	p.wf = sdk.NewWorkflow("pay", func(ctx context.Context, account string) (string, error) {
		return sdk.Execute(ctx, charge, account)
	})
	w, err := runtime.NewWorker(f.pool, runtime.Config{Schema: f.schema, Label: p.label, LeaseTTL: 5 * time.Second,
		HeartbeatInterval: time.Second, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := w.Register(p.wf); err != nil {
		f.t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	if p.client, err = sdk.NewClient(f.pool, sdk.WithSchema(f.schema), sdk.WithPollInterval(20*time.Millisecond),
		sdk.WithLogger(slog.New(slog.DiscardHandler))); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		close(p.gate)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil {
			f.t.Errorf("payments worker: Shutdown: %v", err)
		}
		p.client.Close()
	})
	return p
}

// pay starts a payment of account.
func (p *payments) pay(account string) *sdk.Run[string] {
	p.f.t.Helper()
	r, err := sdk.Start(p.f.t.Context(), p.client, p.wf, account)
	if err != nil {
		p.f.t.Fatal(err)
	}
	return r
}

// done waits for r to complete.
func (p *payments) done(r *sdk.Run[string]) {
	p.f.t.Helper()
	ctx, cancel := context.WithTimeout(p.f.t.Context(), 20*time.Second)
	defer cancel()
	if _, err := r.Result(ctx); err != nil {
		p.f.t.Fatalf("run %s: %v", r.ID, err)
	}
}

// until polls the scalar query (with {schema}) until it answers want.
func (f *fixture) until(want, query string, args ...any) {
	f.t.Helper()
	q := strings.ReplaceAll(query, "{schema}", pgx.Identifier{f.schema}.Sanitize())
	deadline := time.Now().Add(20 * time.Second)
	for {
		var got string
		if err := f.pool.QueryRow(f.t.Context(), q, args...).Scan(&got); err != nil {
			f.t.Fatalf("%s: %v", q, err)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s answers %q after 20s, want %q", q, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitingLine is the run page's "what it waits for", unescaped.
func waitingLine(t *testing.T, body string) string {
	t.Helper()
	i := strings.Index(body, `data-testid="waiting-for">`)
	if i < 0 {
		t.Fatalf("no waiting-for:\n%s", firstLines(body, 40))
	}
	return htmlUnescape(body[i : i+strings.Index(body[i:], "</dd>")])
}

// The Downstreams page lists each downstream with its limits, what is in
// use and waiting, its breaker and counters; a downstream's page lists the
// runs that wait on it, its breaker's history and its limits' changes; a
// run that waits on a limit says which and why, and its timeline draws
// the wait before the attempt it delayed.
func TestDownstreams_ShowLimitsWaitsAndTheBreaker(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	want(t, f.get("downstreams"), http.StatusOK, `data-testid="no-downstreams"`, `aria-current="page">Downstreams</a>`)
	p := f.payments()
	first := p.pay("acct-1")
	f.until("1", `SELECT coalesce((SELECT in_use::text FROM {schema}.downstream_status WHERE name = 'payments'), '')`)
	second := p.pay("acct-2")
	f.until("1", `SELECT waiting::text FROM {schema}.downstream_status WHERE name = 'payments'`)

	body := want(t, f.get("downstreams"), http.StatusOK, `data-testid="downstream-row"`,
		`<a data-testid="downstream-link" href="downstreams/payments"><b>payments</b></a>`,
		`concurrency 1, retries 20%&#43;10/s, breaker 50% of 3 in 10s, open 5s`, `as declared by pay-worker`,
		`data-testid="in-use">1 / 1<`, `data-testid="waiting"><a href="downstreams/payments#waiting"><b>1</b>`,
		`class="status b-closed" data-testid="breaker-state">closed<`, `1 concurrency`)
	if n := count(body, `data-testid="downstream-row"`); n != 1 {
		t.Fatalf("%d downstream rows, want 1", n)
	}
	want(t, f.get("downstreams/payments"), http.StatusOK, `data-testid="waiting-count">1 step<`,
		`<a data-testid="waiting-run-link" class="mono id" title="`+second.ID.String()+`" href="../runs/`+second.ID.String()+`">`,
		`class="status w-concurrency">concurrency<`, `when woken`,
		`data-testid="limit-change-row"`, `declaration by pay-worker`, `data-testid="no-breaker-history"`)

	run := want(t, f.get("runs/"+second.ID.String()), http.StatusOK, `<dt>Now</dt>`, `class="k-throttle"`, `1 waits on payments`,
		`waits on downstream payments \(concurrency\) since`)
	line := waitingLine(t, run)
	for _, w := range []string{`waiting on downstream <a data-testid="waiting-downstream" href="../downstreams/payments"><b>payments</b></a>`,
		`(<b data-testid="waiting-cause">concurrency</b>), step 1, since`, `1 denial: until a call of its key ends and gives its slot back`} {
		if !strings.Contains(line, w) {
			t.Errorf("the waiting run says %q, want %q", line, w)
		}
	}

	p.gate <- struct{}{} // the first call ends: the second run is admitted
	p.done(first)
	p.gate <- struct{}{}
	p.done(second)
	want(t, f.get("runs/"+second.ID.String()), http.StatusOK, `data-testid="attempt-throttled">after [^<]+ on <a href="../downstreams/payments">payments</a> \(concurrency\)<`,
		`class="k-throttle"`, `waited [^ ]+ on downstream payments \(concurrency, 1 denial\) before attempt 1`, `wait on a limit`)

	// Opened by hand: the next run waits on the breaker until it is closed.
	if err := f.op.UIOpenBreaker(t.Context(), "payments", "INC-3: the bank is down"); err != nil {
		t.Fatal(err)
	}
	third := p.pay("acct-3")
	f.until("breaker", `SELECT coalesce((SELECT cause FROM {schema}.throttles WHERE run_id = $1 AND ended_at IS NULL), '')`, third.ID)
	line = waitingLine(t, want(t, f.get("runs/"+third.ID.String()), http.StatusOK))
	if !strings.Contains(line, `(<b data-testid="waiting-cause">breaker</b>)`) || !strings.Contains(line, "until the breaker closes") {
		t.Errorf("the run waiting on the breaker says %q", line)
	}
	want(t, f.get("downstreams"), http.StatusOK, `class="status b-open" data-testid="breaker-state">open</span> <b class="by-hand" data-testid="breaker-manual">by hand</b>`, `1 breaker`)
	want(t, f.get("downstreams/payments"), http.StatusOK, `data-testid="breaker-row"`, `INC-3: the bank is down`,
		`<span class="status b-closed">closed</span></td><td><span class="status b-open">open</span>`, `it stays open until a person closes it`)
	if err := f.op.UICloseBreaker(t.Context(), "payments", "INC-3: the bank is back"); err != nil {
		t.Fatal(err)
	}
	p.gate <- struct{}{}
	p.done(third)
}

// Every write to a downstream is refused unless writes are enabled, the
// caller holds the token, and the request comes from the UI's own page
// with its CSRF token; each needs a note, and goes through the SQL
// functions, which audit it with the UI's database role and the note.
func TestDownstreams_WritesAreGuardedAndAudited(t *testing.T) {
	t.Parallel()
	ro := newFixture(t, ui.Config{})
	declare(t, ro, "payments", `{"concurrency": 2}`)
	body := want(t, ro.get("downstreams/payments"), http.StatusOK, `concurrency 2`)
	if strings.Contains(body, "set-limits-form") || strings.Contains(body, "open-breaker") {
		t.Fatal("the read-only page offers a write")
	}
	paths := []string{"downstreams/payments/limits", "downstreams/payments/reset", "downstreams/payments/breaker/open", "downstreams/payments/breaker/close"}
	for _, path := range paths {
		want(t, ro.post(path, url.Values{"note": {"INC-1"}, "concurrency": {"9"}}, postOpts{}), http.StatusForbidden, `read-only`)
	}

	f := newFixture(t, writes)
	declare(t, f, "payments", `{"concurrency": 2}`)
	for _, c := range f.get("login?token=" + testToken).Result().Cookies() {
		if c.Name == "tenure_session" {
			f.cookie = append(f.cookie, c)
		}
	}
	browser := postOpts{noToken: true}
	for _, path := range paths {
		form := url.Values{"note": {"INC-1"}, "concurrency": {"9"}}
		want(t, f.post(path, form, postOpts{noToken: true, noCSRF: true}), http.StatusForbidden, `CSRF`)
		want(t, f.post(path, form, postOpts{noToken: true, origin: "https://evil.example"}), http.StatusForbidden, `evil.example`)
		want(t, f.post(path, form, postOpts{token: "wrong"}), http.StatusForbidden, `wrong token`)
		want(t, f.post(path, url.Values{"concurrency": {"9"}}, browser), http.StatusUnprocessableEntity, `data-testid="refused">A note is required`)
	}
	if n := len(limitRows(t, f)); n != 1 {
		t.Fatalf("%d limit changes after refused writes, want the declaration's alone", n)
	}
	want(t, f.get("downstreams/payments"), http.StatusOK, `data-testid="set-limits-form"`, `name="concurrency" type="number" min="1" size="6" value="2"`,
		`<textarea name="note" required`, `data-testid="open-breaker"`)
	want(t, f.post("downstreams/payments/limits", url.Values{"note": {"INC-7"}, "concurrency": {"0"}}, browser), http.StatusUnprocessableEntity,
		`the concurrency &#34;0&#34; is not a whole number of at least 1`, `value="0"`)
	want(t, f.post("downstreams/payments/limits", url.Values{"note": {"INC-7"}, "rate": {"10"}, "per": {"soon"}}, browser), http.StatusUnprocessableEntity,
		`the rate&#39;s interval &#34;soon&#34; is not a duration`)

	// Set: concurrency 5, a rate of 10 a second in bursts of 2.
	w := f.post("downstreams/payments/limits", url.Values{"note": {"INC-7"}, "concurrency": {"5"}, "rate": {"10"}, "per": {"1s"}, "burst": {"2"}}, browser)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "../../downstreams/payments?done=limits" {
		t.Fatalf("set limits: %d %q\n%s", w.Code, w.Header().Get("Location"), firstLines(w.Body.String(), 30))
	}
	rows := limitRows(t, f)
	if len(rows) != 2 || rows[0].By != "person" || rows[0].Note != "ui:token: INC-7" || rows[0].Actor == "" ||
		rows[0].After.String() != "concurrency 5, rate 10/1s burst 2" || rows[0].Before.String() != "concurrency 2" {
		t.Fatalf("limit changes %+v, want the person's with note ui:token: INC-7 first", rows)
	}
	want(t, f.get("downstreams/payments?done=limits"), http.StatusOK, `data-testid="done">The limits are changed`, `data-testid="overridden"`,
		`set by a person`, `data-testid="reset-limits-form"`, `<td class="text mono">concurrency 2</td><td class="text mono">concurrency 5, rate 10/1s burst 2</td>`,
		`ui:token: INC-7`, `10 per 1s, burst 2`)
	// The same limits again change nothing and write nothing.
	w = f.post("downstreams/payments/limits", url.Values{"note": {"INC-7"}, "concurrency": {"5"}, "rate": {"10"}, "per": {"1s"}, "burst": {"2"}}, browser)
	if w.Header().Get("Location") != "../../downstreams/payments?done=unchanged" || len(limitRows(t, f)) != 2 {
		t.Fatalf("the same limits again: %d %q, %d limit changes", w.Code, w.Header().Get("Location"), len(limitRows(t, f)))
	}

	// Reset: back to the declaration.
	if w := f.post("downstreams/payments/reset", url.Values{"note": {"INC-7 over"}}, browser); w.Code != http.StatusSeeOther {
		t.Fatalf("reset: %d\n%s", w.Code, w.Body)
	}
	if rows := limitRows(t, f); len(rows) != 3 || rows[0].By != "reset to the declaration" || rows[0].After.String() != "concurrency 2" || rows[0].Note != "ui:token: INC-7 over" {
		t.Fatalf("after the reset: %+v", rows[0])
	}
	want(t, f.get("downstreams/payments"), http.StatusOK, `data-testid="as-declared"`)

	// The breaker, opened and closed by hand.
	for _, step := range []struct{ path, note, to string }{
		{"downstreams/payments/breaker/open", "INC-8: bank down", "open"},
		{"downstreams/payments/breaker/close", "INC-8: bank back", "closed"},
	} {
		if w := f.post(step.path, url.Values{"note": {step.note}}, browser); w.Code != http.StatusSeeOther {
			t.Fatalf("%s: %d\n%s", step.path, w.Code, w.Body)
		}
		hist, err := f.op.UIBreakerHistory(t.Context(), "payments", 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(hist) != 1 || hist[0].To != step.to || hist[0].Why != "ui:token: "+step.note || hist[0].By != "person" || hist[0].Actor == "" {
			t.Fatalf("after %s, breaker history %+v", step.path, hist)
		}
		if step.to == "open" {
			want(t, f.get("downstreams/payments?done=opened"), http.StatusOK, `data-testid="breaker-manual">by hand<`, `data-testid="close-breaker"`)
		}
	}
	want(t, f.post("downstreams/nope/breaker/open", url.Values{"note": {"x"}}, browser), http.StatusNotFound, `no downstream is named`)
	want(t, f.get("downstreams/nope"), http.StatusNotFound, `no downstream is named &#34;nope&#34;`)
}

// Authorize names who acted in each note, as it does for the other writes.
func TestDownstreams_AuthorizeNamesWho(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{Writes: true, Authorize: func(r *http.Request) (string, bool) {
		return "alice", r.Header.Get("X-User") == "alice"
	}})
	declare(t, f, "payments", `{"concurrency": 2}`)
	if w := f.postAs("alice", "downstreams/payments/limits", url.Values{"note": {"INC-9"}, "concurrency": {"3"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("set limits as alice: %d\n%s", w.Code, w.Body)
	}
	if rows := limitRows(t, f); rows[0].Note != "ui:alice: INC-9" {
		t.Fatalf("note %q, want ui:alice: INC-9", rows[0].Note)
	}
}

// A downstream's name is one segment of its links, whatever it holds.
func TestDownstreams_ANameWithASlashIsOneSegment(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	declare(t, f, "bank/eu", `{}`)
	want(t, f.get("downstreams"), http.StatusOK, `href="downstreams/bank%2Feu"`, `no limits`)
	want(t, f.get("downstreams/bank%2Feu"), http.StatusOK, `Downstream <span class="mono">bank/eu</span>`,
		`action="../downstreams/bank%2Feu/limits"`, `href="../static/style.css"`)
	w := f.post("downstreams/bank%2Feu/limits", url.Values{"note": {"INC-1"}, "concurrency": {"4"}}, postOpts{})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "../../downstreams/bank%2Feu?done=limits" {
		t.Fatalf("set limits of bank/eu: %d %q", w.Code, w.Header().Get("Location"))
	}
	d, err := f.op.UIDownstream(t.Context(), "bank/eu")
	if err != nil || d.Limits.Concurrency != 4 {
		t.Fatalf("bank/eu: %+v, %v", d.Limits, err)
	}
}

// declare makes the downstream name as a worker's code would declare it.
func declare(t *testing.T, f *fixture, name, limits string) {
	t.Helper()
	if _, err := f.pool.Exec(t.Context(), fmt.Sprintf(`SELECT %s.declare_downstream($1, $2::jsonb, 'worker-x')`, pgx.Identifier{f.schema}.Sanitize()),
		name, limits); err != nil {
		t.Fatal(err)
	}
}

// limitRows is the limit changes of payments, newest first.
func limitRows(t *testing.T, f *fixture) []record.UILimitChange {
	t.Helper()
	d, err := f.op.UIDownstreams(t.Context())
	if err != nil || len(d) == 0 {
		t.Fatalf("downstreams: %v, %v", d, err)
	}
	rows, err := f.op.UILimitChanges(t.Context(), d[0].Name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
