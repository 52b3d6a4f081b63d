package ui_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

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
	want(t, f.get("schedules/nope"), http.StatusNotFound, `no schedule is named &#34;nope&#34;`)
	want(t, f.post("schedules/nope/pause", url.Values{"note": {"x"}}, browser), http.StatusNotFound, `no schedule is named`)
}
