package ui_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/ui"
)

// The Schedules page lists each schedule with its next tick, last run and
// state; a schedule's page its settings and its ticks; pause, resume and
// trigger are writes like the others: guarded, a note required, audited.
func TestSchedules_PagesAndGuardedWrites(t *testing.T) {
	t.Parallel()
	ro := newFixture(t, ui.Config{})
	want(t, ro.get("schedules"), http.StatusOK, `data-testid="no-schedules"`, `aria-current="page">Schedules</a>`)
	if err := ro.st.DeclareSchedules(t.Context(), []store.ScheduleDecl{{Name: "nightly/eu", Spec: "0 3 * * *", Zone: "Europe/Berlin", Workflow: "report"}}, "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := ro.st.DecideTicks(t.Context(), "worker-1", 10, true); err != nil {
		t.Fatal(err)
	}
	want(t, ro.get("schedules"), http.StatusOK, `data-testid="schedule-row"`, `href="schedules/nightly%2Feu"`, `0 3 * * *`,
		`Europe/Berlin`, `data-testid="schedule-state">active`)
	body := want(t, ro.get("schedules/nightly%2Feu"), http.StatusOK, `declared by w`, `data-testid="no-ticks"`)
	if strings.Contains(body, "pause-form") {
		t.Fatal("the read-only page offers a write")
	}
	want(t, ro.post("schedules/nightly%2Feu/pause", url.Values{"note": {"INC-1"}}, postOpts{}), http.StatusForbidden, `read-only`)
	// A tick due: started, its run the schedule's last.
	if _, err := ro.pool.Exec(t.Context(), strings.ReplaceAll(`UPDATE {schema}.schedules SET next_at = now() - interval '1 minute'`, "{schema}", ro.st.Schema())); err != nil {
		t.Fatal(err)
	}
	if _, err := ro.st.DecideTicks(t.Context(), "worker-1", 10, true); err != nil {
		t.Fatal(err)
	}
	want(t, ro.get("schedules"), http.StatusOK, `<span class="status s-queued">queued</span>`)
	want(t, ro.get("schedules/nightly%2Feu"), http.StatusOK, `data-testid="tick-decision">started`, `worker-1`)

	f := newFixture(t, writes)
	if err := f.st.DeclareSchedules(t.Context(), []store.ScheduleDecl{{Name: "nightly", Spec: "@daily", Workflow: "report"}}, "w"); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.get("login?token=" + testToken).Result().Cookies() {
		if c.Name == "tenure_session" {
			f.cookie = append(f.cookie, c)
		}
	}
	browser := postOpts{noToken: true}
	for _, path := range []string{"schedules/nightly/pause", "schedules/nightly/resume", "schedules/nightly/trigger"} {
		want(t, f.post(path, url.Values{"note": {"x"}}, postOpts{noToken: true, noCSRF: true}), http.StatusForbidden, `CSRF`)
		want(t, f.post(path, url.Values{}, browser), http.StatusUnprocessableEntity, `data-testid="refused">A note is required`)
	}
	want(t, f.get("schedules/nightly"), http.StatusOK, `data-testid="pause-form"`, `data-testid="trigger-form"`)
	for _, step := range []struct{ path, done, page string }{
		{"schedules/nightly/pause", "paused", `data-testid="resume-form"`},
		{"schedules/nightly/trigger", "triggered", `data-testid="tick-decision">triggered`},
		{"schedules/nightly/resume", "resumed", `data-testid="pause-form"`},
	} {
		w := f.post(step.path, url.Values{"note": {"INC-2"}}, browser)
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "../../schedules/nightly?done="+step.done {
			t.Fatalf("%s: %d %q\n%s", step.path, w.Code, w.Header().Get("Location"), firstLines(w.Body.String(), 20))
		}
		want(t, f.get("schedules/nightly?done="+step.done), http.StatusOK, `data-testid="done">`, step.page)
	}
	notes := ""
	if err := f.pool.QueryRow(t.Context(), strings.ReplaceAll(`SELECT string_agg(filter->>'change' || ' ' || note, ', ' ORDER BY id)
		FROM {schema}.audit_log WHERE action = 'schedule' AND note IS NOT NULL`, "{schema}", f.st.Schema())).Scan(&notes); err != nil {
		t.Fatal(err)
	}
	if notes != "paused ui:token: INC-2, triggered ui:token: INC-2, resumed ui:token: INC-2" {
		t.Fatalf("audit: %s", notes)
	}
	// Made, changed, backfilled and deleted from the pages.
	want(t, f.get("schedules"), http.StatusOK, `data-testid="new-schedule-form"`)
	form := url.Values{"name": {"hourly"}, "spec": {"61 * * * *"}, "zone": {"UTC"}, "workflow": {"sync"}, "input": {`{"n": 1}`},
		"overlap": {"skip"}, "catchup": {"latest"}, "note": {"INC-3"}}
	want(t, f.post("schedules", form, browser), http.StatusUnprocessableEntity, `data-testid="refused">`, `out of range`, `value="61 \* \* \* \*"`)
	form.Set("spec", "15 * * * *")
	if w := f.post("schedules", form, browser); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "schedules/hourly?done=set" {
		t.Fatalf("new schedule: %d %q\n%s", w.Code, w.Header().Get("Location"), firstLines(w.Body.String(), 20))
	}
	want(t, f.get("schedules/hourly?done=set"), http.StatusOK, `data-testid="done">The schedule is saved`, `by hand`, `value="15 \* \* \* \*"`)
	want(t, f.post("schedules", form, browser), http.StatusUnprocessableEntity, `is named &#34;hourly&#34; already`)
	form.Set("zone", "Europe/Berlin")
	if w := f.post("schedules/hourly/set", form, browser); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "../../schedules/hourly?done=set" {
		t.Fatalf("change: %d %q\n%s", w.Code, w.Header().Get("Location"), firstLines(w.Body.String(), 20))
	}
	if w := f.post("schedules/hourly/set", form, browser); w.Header().Get("Location") != "../../schedules/hourly?done=unchanged" {
		t.Fatalf("the same settings again: %d %q", w.Code, w.Header().Get("Location"))
	}
	want(t, f.post("schedules/hourly/backfill", url.Values{"from": {"yesterday"}, "note": {"x"}}, browser), http.StatusUnprocessableEntity, `is not a time`)
	want(t, f.post("schedules/hourly/backfill", url.Values{"from": {"2026-01-01"}, "note": {"x"}}, browser), http.StatusUnprocessableEntity, `not computed yet`)
	if _, err := f.st.DecideTicks(t.Context(), "worker-1", 10, true); err != nil {
		t.Fatal(err)
	}
	w := f.post("schedules/hourly/backfill", url.Values{"from": {time.Now().Add(-3 * time.Hour).UTC().Format(time.RFC3339)}, "note": {"INC-4"}}, browser)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "../../schedules/hourly?done=backfilled" {
		t.Fatalf("backfill: %d %q\n%s", w.Code, w.Header().Get("Location"), firstLines(w.Body.String(), 20))
	}
	want(t, f.get("schedules/hourly"), http.StatusOK, `data-testid="tick-decision">backfilled`)
	if w := f.post("schedules/hourly/delete", url.Values{"note": {"INC-5"}}, browser); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "../../schedules?done=deleted" {
		t.Fatalf("delete: %d %q", w.Code, w.Header().Get("Location"))
	}
	want(t, f.get("schedules/hourly"), http.StatusNotFound, `no schedule is named`)
	want(t, f.get("schedules/nope"), http.StatusNotFound, `no schedule is named &#34;nope&#34;`)
	want(t, f.post("schedules/nope/pause", url.Values{"note": {"x"}}, browser), http.StatusNotFound, `no schedule is named`)
}
