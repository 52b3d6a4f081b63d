package ui_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/ui"
)

var writes = ui.Config{Writes: true, Token: testToken}

func TestReadOnly_RefusesEveryPost(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	id := f.fabricate(failedOrder)[0].String()
	want(t, f.get("runs/"+id), http.StatusOK, `data-testid="run-status">failed<`)
	if strings.Contains(f.get("runs/"+id).Body.String(), "requeue-form") {
		t.Fatal("read-only run page offers a requeue")
	}
	for _, path := range []string{"failures/requeue", "failures/purge", "runs/" + id + "/requeue", "runs/" + id + "/cancel",
		"downstreams/payments/limits", "downstreams/payments/reset", "downstreams/payments/breaker/open", "downstreams/payments/breaker/close"} {
		want(t, f.post(path, url.Values{"confirm": {"1"}, "workflow": {"orders"}}, postOpts{}), http.StatusForbidden, `read-only`)
	}
	if f.status(uuidOf(t, id)) != record.RunFailed {
		t.Fatal("a refused POST changed a run")
	}
	if n := len(f.auditRows()); n != 0 {
		t.Fatalf("%d audit rows after refused posts", n)
	}
}

func TestWrites_NeedTheToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	id := f.fabricate(failedOrder)[0]
	path := "runs/" + id.String() + "/requeue"
	confirm := url.Values{"confirm": {"1"}}

	w := f.post(path, confirm, postOpts{noToken: true})
	want(t, w, http.StatusUnauthorized)
	if !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("401 without WWW-Authenticate: %q", w.Header().Get("WWW-Authenticate"))
	}
	want(t, f.post(path, confirm, postOpts{token: "wrong"}), http.StatusForbidden, `wrong token`)

	// login?token= sets a session cookie that then stands for the token.
	want(t, f.get("login?token=wrong"), http.StatusForbidden)
	w = f.get("login?token=" + testToken)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "./" {
		t.Fatalf("login: %d %q", w.Code, w.Header().Get("Location"))
	}
	var session *http.Cookie
	for _, c := range w.Result().Cookies() {
		if c.Name == "tenure_session" {
			session = c
		}
	}
	if session == nil || session.Value == testToken || !session.HttpOnly {
		t.Fatalf("session cookie %+v", session)
	}
	f.cookie = append(f.cookie, session)
	want(t, f.post(path, nil, postOpts{noToken: true}), http.StatusOK, `data-testid="preview-row"`)
	f.cookie[len(f.cookie)-1] = &http.Cookie{Name: "tenure_session", Value: strings.Repeat("0", 64)}
	want(t, f.post(path, nil, postOpts{noToken: true}), http.StatusForbidden)

	if f.status(id) != record.RunFailed || len(f.auditRows()) != 0 {
		t.Fatal("a refused write changed something")
	}
}

func TestWrites_NeedCSRFAndSameOrigin(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	id := f.fabricate(failedOrder)[0]
	path := "runs/" + id.String() + "/requeue"
	confirm := url.Values{"confirm": {"1"}}
	// A browser's session (the cookie /login sets), not a script's bearer
	// token: only a browser can be made to post by another site.
	for _, c := range f.get("login?token=" + testToken).Result().Cookies() {
		if c.Name == "tenure_session" {
			f.cookie = append(f.cookie, c)
		}
	}
	browser := func(o postOpts) postOpts { o.noToken = true; return o }
	want(t, f.post(path, confirm, browser(postOpts{noCSRF: true})), http.StatusForbidden, `CSRF`)
	want(t, f.post(path, confirm, browser(postOpts{csrf: strings.Repeat("ab", 32)})), http.StatusForbidden, `CSRF`)
	want(t, f.post(path, confirm, browser(postOpts{origin: "https://evil.example"})), http.StatusForbidden, `evil.example`)
	if f.status(id) != record.RunFailed || len(f.auditRows()) != 0 {
		t.Fatal("a refused write changed something")
	}
}

func TestWrites_AuthorizeDecidesAndNamesWho(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{Writes: true, Authorize: func(r *http.Request) (string, bool) {
		return "alice", r.Header.Get("X-User") == "alice"
	}})
	id := f.fabricate(failedOrder)[0]
	want(t, f.post("runs/"+id.String()+"/requeue", nil, postOpts{}), http.StatusForbidden) // no X-User
	req := url.Values{"note": {"INC-7"}}
	w := f.postAs("alice", "runs/"+id.String()+"/requeue", req)
	set := hidden(t, want(t, w, http.StatusOK, `data-testid="preview-row"`), "set")
	w = f.postAs("alice", "runs/"+id.String()+"/requeue", url.Values{"note": {"INC-7"}, "confirm": {"1"}, "set": {set}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("confirm: %d\n%s", w.Code, w.Body)
	}
	rows := f.auditRows()
	if len(rows) != 1 || rows[0].Note != "ui:alice: INC-7" {
		t.Fatalf("audit rows %+v, want one with note ui:alice: INC-7", rows)
	}
}

// postAs posts as the Authorize test's user.
func (f *fixture) postAs(user, path string, form url.Values) *httptestRecorder {
	f.t.Helper()
	if f.csrf == "" {
		f.get("failures")
	}
	form.Set("csrf", f.csrf)
	req := newPost("/tenure/"+path, form)
	req.Header.Set("X-User", user)
	for _, c := range f.cookie {
		req.AddCookie(c)
	}
	return f.do(req)
}

func TestRequeueRun_DryRunThenConfirm(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	id := f.fabricate(failedOrder)[0]
	run := "runs/" + id.String()
	want(t, f.get(run), http.StatusOK, `<form data-testid="requeue-form"`, `<textarea name="note"`, `data-testid="requeue-dry-run"`)

	body := want(t, f.post(run+"/requeue", url.Values{"note": {"INC-42"}}, postOpts{}), http.StatusOK,
		`<tr data-testid="preview-row">`, `<button data-testid="requeue-confirm"`, `INC-42`, id.String())
	if n := count(body, `data-testid="preview-row"`); n != 1 {
		t.Fatalf("%d preview rows, want 1", n)
	}
	if f.status(id) != record.RunFailed || len(f.auditRows()) != 0 {
		t.Fatal("the dry run changed something")
	}
	// A confirm with another set than the preview's is refused.
	want(t, f.post(run+"/requeue", url.Values{"note": {"INC-42"}, "confirm": {"1"}, "set": {"1-stale"}}, postOpts{}), http.StatusConflict,
		`data-testid="set-changed"`)
	if f.status(id) != record.RunFailed {
		t.Fatal("a stale confirm requeued")
	}

	w := f.post(run+"/requeue", url.Values{"note": {"INC-42"}, "confirm": {"1"}, "set": {hidden(t, body, "set")}}, postOpts{})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "../../runs/"+id.String() {
		t.Fatalf("confirm: %d %q, want 303 back to the run", w.Code, w.Header().Get("Location"))
	}
	if st := f.status(id); st != record.RunQueued {
		t.Fatalf("run is %s after the requeue, want queued", st)
	}
	rows := f.auditRows()
	if len(rows) != 1 || rows[0].Action != "requeue" || rows[0].Note != "ui:token: INC-42" || len(rows[0].RunIDs) != 1 || rows[0].RunIDs[0] != id {
		t.Fatalf("audit rows %+v, want one requeue of the run with note ui:token: INC-42", rows)
	}
	// The run page shows the requeue in its history, and no requeue form.
	body = want(t, f.get(run), http.StatusOK, `data-testid="audit-row"`, `ui:token: INC-42`, `data-testid="run-status">queued<`)
	if strings.Contains(body, "requeue-form") {
		t.Fatal("requeue form on a queued run")
	}
	// Confirming again: the run is no longer failed.
	want(t, f.post(run+"/requeue", url.Values{"confirm": {"1"}, "set": {hidden(t, body, "csrf")}}, postOpts{}), http.StatusConflict)
}

func TestRequeueFailures_GroupPreviewThenConfirm(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	charge := f.fabricate(failedOrder,
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 2, Reason: sdk.ReasonRetriesExhausted})
	email := f.fabricate(storetest.Outcome{Workflow: "orders", Activity: "email", Errors: 1, Reason: sdk.ReasonNonRetryable})[0]

	page := want(t, f.get("failures"), http.StatusOK, `data-testid="group-requeue"`)
	form := groupForm(t, page, "charge")
	body := want(t, f.post("failures/requeue", form, postOpts{}), http.StatusOK, `<button data-testid="requeue-confirm"`)
	if n := count(body, `data-testid="preview-row"`); n != 2 {
		t.Fatalf("%d preview rows, want the 2 charge failures", n)
	}
	for _, id := range charge {
		if !strings.Contains(body, id.String()) {
			t.Fatalf("preview lacks run %s", id)
		}
	}
	form.Set("confirm", "1")
	previewed(t, body, form)
	form.Set("note", "INC-9")
	w := f.post("failures/requeue", form, postOpts{})
	if w.Code != http.StatusSeeOther || !strings.Contains(w.Header().Get("Location"), "requeued=2") {
		t.Fatalf("confirm: %d %q", w.Code, w.Header().Get("Location"))
	}
	for _, id := range charge {
		if f.status(id) != record.RunQueued {
			t.Fatalf("run %s not requeued", id)
		}
	}
	if f.status(email) != record.RunFailed {
		t.Fatal("a run outside the group was requeued")
	}
	var requeued int64
	for _, r := range f.auditRows() {
		if r.Action != "requeue" || r.Note != "ui:token: INC-9" {
			t.Fatalf("audit row %+v", r)
		}
		requeued += r.Runs
	}
	if requeued != 2 {
		t.Fatalf("audit rows count %d runs requeued, want 2", requeued)
	}
}

func TestRequeueFailures_FilteredSetIsOneAuditRow(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	f.fabricate(failedOrder, storetest.Outcome{Workflow: "orders", Activity: "email", Errors: 1, Reason: sdk.ReasonNonRetryable})
	other := f.fabricate(storetest.Outcome{Workflow: "billing", Activity: "charge", Errors: 1, Reason: sdk.ReasonNonRetryable})[0]
	form := url.Values{"workflow": {"orders"}}
	body := want(t, f.post("failures/requeue", form, postOpts{}), http.StatusOK)
	if n := count(body, `data-testid="preview-row"`); n != 2 {
		t.Fatalf("%d preview rows, want 2", n)
	}
	form.Set("confirm", "1")
	previewed(t, body, form)
	if w := f.post("failures/requeue", form, postOpts{}); w.Code != http.StatusSeeOther {
		t.Fatalf("confirm: %d", w.Code)
	}
	rows := f.auditRows()
	if len(rows) != 1 || rows[0].Runs != 2 || rows[0].Filter["workflow"] != "orders" {
		t.Fatalf("audit rows %+v, want one requeue_failures row of 2 runs", rows)
	}
	if f.status(other) != record.RunFailed {
		t.Fatal("a run of another workflow was requeued")
	}
}

// During an incident failures keep coming between the preview and the
// confirm: the preview fixes its window (its end is the database's now), so
// the confirm requeues the failures it counted and leaves the new ones,
// instead of refusing every confirm because the set grew. A set that
// changed within the window (a requeue meanwhile) is refused with a new
// preview, of a window until now, which can be confirmed.
func TestRequeueFailures_ConfirmActsOnThePreviewsWindowWhileFailuresKeepComing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	first := f.fabricate(failedOrder)[0]
	page := want(t, f.get("failures?age=1h"), http.StatusOK)
	form := groupForm(t, page, "charge")
	if form.Get("age") != "1h" {
		t.Fatalf("the group's form has no age filter: %v", form)
	}
	body := want(t, f.post("failures/requeue", form, postOpts{}), http.StatusOK, `data-testid="preview-count">1<`)
	// A new failure of the same group arrives between preview and confirm.
	late := f.fabricate(storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 3, Reason: sdk.ReasonRetriesExhausted})[0]
	confirm := url.Values{}
	for k, v := range form {
		confirm[k] = v
	}
	confirm.Set("confirm", "1")
	previewed(t, body, confirm)
	if w := f.post("failures/requeue", confirm, postOpts{}); w.Code != http.StatusSeeOther || !strings.Contains(w.Header().Get("Location"), "requeued=1") {
		t.Fatalf("confirm during the incident: %d %q, want the previewed run requeued\n%s", w.Code, w.Header().Get("Location"), firstLines(w.Body.String(), 40))
	}
	if f.status(first) != record.RunQueued || f.status(late) != record.RunFailed {
		t.Fatalf("after the confirm the previewed run is %s and the later one %s; want queued and failed", f.status(first), f.status(late))
	}

	// Within a window, a set that changed is refused: late is requeued by
	// someone else between this preview and its confirm.
	body = want(t, f.post("failures/requeue", form, postOpts{}), http.StatusOK, `data-testid="preview-count">1<`)
	if err := f.op.Requeue(t.Context(), late, "someone else"); err != nil {
		t.Fatal(err)
	}
	other := f.fabricate(storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 3, Reason: sdk.ReasonRetriesExhausted})[0]
	confirm = url.Values{}
	for k, v := range form {
		confirm[k] = v
	}
	confirm.Set("confirm", "1")
	previewed(t, body, confirm)
	body = want(t, f.post("failures/requeue", confirm, postOpts{}), http.StatusConflict, `data-testid="set-changed"`, other.String())
	if f.status(other) != record.RunFailed || len(f.auditRows()) != 2 {
		t.Fatal("a refused confirm requeued")
	}
	// The refusal is a new preview: confirming it works.
	previewed(t, body, confirm)
	if w := f.post("failures/requeue", confirm, postOpts{}); w.Code != http.StatusSeeOther {
		t.Fatalf("second confirm: %d", w.Code)
	}
	if f.status(other) != record.RunQueued {
		t.Fatal("the second confirm did not requeue the run of the new preview")
	}
	// A window that ends in the future, or whose start is not its age
	// before its end, was not made by a preview.
	confirm.Set("until", time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
	want(t, f.post("failures/requeue", confirm, postOpts{}), http.StatusBadRequest, `after now`)
	previewed(t, body, confirm)
	confirm.Set("since", "2001-01-01T00:00:00Z")
	want(t, f.post("failures/requeue", confirm, postOpts{}), http.StatusBadRequest, `is not the age`)
}

func TestPurgeFailures_CountThenConfirm(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	ids := f.fabricate(failedOrder, storetest.Outcome{Workflow: "billing", Activity: "charge", Errors: 1, Reason: sdk.ReasonNonRetryable})
	form := url.Values{"workflow": {"orders"}, "older_than": {"0s"}, "note": {"retention"}}
	body := want(t, f.post("failures/purge", form, postOpts{}), http.StatusOK, `data-testid="purge-runs">1<`, `data-testid="purge-confirm"`)
	if _, err := f.op.Run(t.Context(), ids[0]); err != nil {
		t.Fatal("the count deleted the run")
	}
	form.Set("confirm", "1")
	form.Set("runs", "5") // not what was counted
	form.Set("failure_rows", hidden(t, body, "failure_rows"))
	want(t, f.post("failures/purge", form, postOpts{}), http.StatusConflict, `data-testid="set-changed"`)
	form.Set("runs", hidden(t, body, "runs"))
	w := f.post("failures/purge", form, postOpts{})
	if w.Code != http.StatusSeeOther || !strings.Contains(w.Header().Get("Location"), "purged=1") {
		t.Fatalf("purge confirm: %d %q", w.Code, w.Header().Get("Location"))
	}
	if _, err := f.op.Run(t.Context(), ids[0]); err == nil {
		t.Fatal("the purged run is still there")
	}
	if _, err := f.op.Run(t.Context(), ids[1]); err != nil {
		t.Fatal("the other workflow's run was purged")
	}
	rows := f.auditRows()
	if len(rows) != 1 || rows[0].Action != "purge_failures" || rows[0].Runs != 1 || rows[0].Note != "ui:token: retention" {
		t.Fatalf("audit rows %+v", rows)
	}
}

func TestCancelRun_ConfirmThenCancelled(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	id := f.queue("orders")
	want(t, f.get("runs/"+id.String()), http.StatusOK, `data-testid="cancel-form"`)
	want(t, f.post("runs/"+id.String()+"/cancel", nil, postOpts{}), http.StatusOK, `data-testid="cancel-confirm"`)
	if f.status(id) != record.RunQueued {
		t.Fatal("the confirmation page cancelled")
	}
	w := f.post("runs/"+id.String()+"/cancel", url.Values{"confirm": {"1"}}, postOpts{})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("cancel: %d", w.Code)
	}
	if st := f.status(id); st != record.RunCancelled {
		t.Fatalf("run is %s, want cancelled", st)
	}
	want(t, f.post("runs/"+id.String()+"/cancel", url.Values{"confirm": {"1"}}, postOpts{}), http.StatusConflict)
}

// hidden reads the value of the hidden input name in body.
func hidden(t testing.TB, body, name string) string {
	t.Helper()
	m := regexp.MustCompile(`name="` + regexp.QuoteMeta(name) + `" value="([^"]*)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no hidden %s in:\n%s", name, firstLines(body, 80))
	}
	return htmlUnescape(m[1])
}

// previewed copies into form what a preview's confirm form carries to say
// which set it confirms: the digest of the set, and the window the preview
// fixed (a requeue by filter).
func previewed(t testing.TB, body string, form url.Values) {
	t.Helper()
	form.Set("set", hidden(t, body, "set"))
	for _, name := range []string{"since", "until"} {
		if m := regexp.MustCompile(`name="` + name + `" value="([^"]*)"`).FindStringSubmatch(body); m != nil {
			form.Set(name, htmlUnescape(m[1]))
		}
	}
}

// groupForm reads the requeue form of the failure group of activity.
func groupForm(t *testing.T, page, activity string) url.Values {
	t.Helper()
	for _, form := range regexp.MustCompile(`(?s)<form method="post" action="failures/requeue">.*?</form>`).FindAllString(page, -1) {
		if !strings.Contains(form, `name="fp_activity" value="`+activity+`"`) || !strings.Contains(form, `name="group"`) {
			continue
		}
		v := url.Values{}
		for _, m := range regexp.MustCompile(`name="([^"]+)" value="([^"]*)"`).FindAllStringSubmatch(form, -1) {
			if m[1] != "csrf" {
				v.Set(m[1], htmlUnescape(m[2]))
			}
		}
		return v
	}
	t.Fatalf("no requeue form for group %s", activity)
	return nil
}

func uuidOf(t *testing.T, s string) uuid.UUID {
	t.Helper()
	id, err := uuid.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
