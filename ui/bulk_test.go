package ui_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// seedFailures records n failed runs of workflow "incident" at once, as
// workers leave them: a step that failed, its attempt, the failure row;
// every tenth is an indeterminate pay-supplier, the others a charge that
// ran out of retries.
func (f *fixture) seedFailures(n int) {
	f.t.Helper()
	s := pgx.Identifier{f.schema}.Sanitize()
	id := `('00000000-0000-4000-9000-' || lpad(to_hex(i), 12, '0'))::uuid`
	for _, stmt := range []string{
		`INSERT INTO {s}.runs (id, workflow, queue, input, status, epoch, created_at, started_at, finished_at)
		 SELECT {id}, 'incident', 'default', '{}', 'failed', 1, now() - interval '1 hour', now() - interval '1 hour', now() - (n - i) * interval '1 ms'
		 FROM generate_series(1, $1) i, (SELECT $1 AS n) c`,
		`INSERT INTO {s}.steps (run_id, step, activity, status, reason, error_message, error_type, policy, first_started_at, finished_at)
		 SELECT {id}, 1, CASE WHEN i % 10 = 0 THEN 'pay-supplier' ELSE 'charge' END, 'failed',
		        CASE WHEN i % 10 = 0 THEN 'indeterminate' ELSE 'retries_exhausted' END, 'boom', 'E', '{}', now() - interval '1 hour', now()
		 FROM generate_series(1, $1) i`,
		`INSERT INTO {s}.attempts (run_id, step, attempt, activity, status, started_at, ended_at, epoch, worker)
		 SELECT {id}, 1, 1, CASE WHEN i % 10 = 0 THEN 'pay-supplier' ELSE 'charge' END, CASE WHEN i % 10 = 0 THEN 'lost' ELSE 'failed' END,
		        now() - interval '1 hour', now() - interval '1 hour', 1, 'w'
		 FROM generate_series(1, $1) i`,
		`INSERT INTO {s}.failures (run_id, workflow, reason, step, activity, attempts, errors, rescues, error_message, error_type, failed_at)
		 SELECT {id}, 'incident', CASE WHEN i % 10 = 0 THEN 'indeterminate' ELSE 'retries_exhausted' END, 1,
		        CASE WHEN i % 10 = 0 THEN 'pay-supplier' ELSE 'charge' END, 1, CASE WHEN i % 10 = 0 THEN 0 ELSE 1 END, 0,
		        format('bank %s: 503 Service Unavailable', i), '*errors.errorString', now() - (n - i) * interval '1 ms'
		 FROM generate_series(1, $1) i, (SELECT $1 AS n) c`,
	} {
		stmt = strings.NewReplacer("{s}", s, "{id}", id).Replace(stmt)
		if _, err := f.pool.Exec(f.t.Context(), stmt, n); err != nil {
			f.t.Fatalf("seed: %v\n%s", err, stmt)
		}
	}
}

// A large incident is requeued from the UI: 10,000 failures by filter, with
// a count, a breakdown, a sample, the check of the at-most-once activity,
// a confirmation, and one audit row for all of them.
func TestRequeueFailures_TenThousandByFilterInOneAuditRow(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	f.seedFailures(10_000)

	form := url.Values{"workflow": {"incident"}}
	begin := time.Now()
	body := want(t, f.post("failures/requeue", form, postOpts{}), http.StatusOK,
		`data-testid="preview-count">10,000<`, `The oldest 20 of the 10,000`, `data-testid="requeue-confirm"`,
		`Requeue these 10,000 runs`, `1,000 of these 10,000 runs failed <code>indeterminate</code>`,
		`did not take effect for these 1,000 runs</span>`, `Requeue only the 9,000 other runs, leave the 1,000 indeterminate failed`)
	t.Logf("preview of 10,000: %s", time.Since(begin).Round(time.Millisecond))
	if n := count(body, `data-testid="preview-row"`); n != 20 {
		t.Fatalf("%d sample rows, want 20", n)
	}
	if n := count(body, `data-testid="breakdown-row"`); n != 2 {
		t.Fatalf("%d breakdown rows, want 2 (charge, pay-supplier)", n)
	}
	for _, b := range []string{`incident · charge</td><td>retries_exhausted</td><td class="num">9,000<`,
		`incident · pay-supplier</td><td><b class="nowrap">⚠ indeterminate</b></td><td class="num">1,000<`} {
		if !strings.Contains(body, b) {
			t.Fatalf("the breakdown lacks %q:\n%s", b, firstLines(body, 120))
		}
	}

	// Without the check: refused, nothing requeued.
	form.Set("confirm", "1")
	previewed(t, body, form)
	want(t, f.post("failures/requeue", form, postOpts{}), http.StatusUnprocessableEntity, `data-testid="unchecked"`)
	if len(f.auditRows()) != 0 {
		t.Fatal("a refused confirm requeued")
	}
	form.Set("checked", "pay-supplier")
	form.Set("note", "INC-20")
	begin = time.Now()
	w := f.post("failures/requeue", form, postOpts{})
	if w.Code != http.StatusSeeOther || !strings.Contains(w.Header().Get("Location"), "requeued=10000") {
		t.Fatalf("confirm: %d %q\n%s", w.Code, w.Header().Get("Location"), firstLines(w.Body.String(), 40))
	}
	t.Logf("requeue of 10,000: %s", time.Since(begin).Round(time.Millisecond))
	rows := f.auditRows()
	if len(rows) != 1 || rows[0].Runs != 10_000 || len(rows[0].RunIDs) != 10_000 || rows[0].Filter["workflow"] != "incident" ||
		rows[0].Note != "ui:token: INC-20; checked that pay-supplier did not take effect for 1,000 indeterminate runs" {
		t.Fatalf("audit: %d rows, the first of %d runs, filter %v, note %q; want one of 10,000", len(rows), rows[0].Runs, rows[0].Filter["workflow"], rows[0].Note)
	}
	// It records the set as the preview counted it: its window, size and
	// digest, not its failure IDs.
	if a := rows[0].Filter; a["until"] != form.Get("until") || a["failures"] != 10_000.0 || a["digest"] != form.Get("set") || a["failure_ids"] != nil {
		t.Fatalf("audit filter %v, want the window's end %s, 10,000 failures, the digest %s, no IDs", a, form.Get("until"), form.Get("set"))
	}
	var queued int
	if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+f.schema+`.runs WHERE status = 'queued'`).Scan(&queued); err != nil || queued != 10_000 {
		t.Fatalf("%d runs queued (%v), want 10,000", queued, err)
	}
	want(t, f.get("failures?requeued=10000"), http.StatusOK, `Requeued 10,000 runs.`)
}

// A purge of any number of runs: a count against a cutoff fixed at the
// preview, the runs per workflow, the oldest runs, a confirmation, one
// audit row; and nothing to confirm when nothing qualifies.
func TestPurgeFailures_CountSampleConfirmOneAuditRow(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	f.seedFailures(2_500)
	f.fabricate(failedOrder) // of another workflow, finished now

	body := want(t, f.post("failures/purge", url.Values{"older_than": {"0s"}}, postOpts{}), http.StatusOK,
		`data-testid="purge-runs">2,501<`, `data-testid="purge-failures">2,501<`, `The oldest 20 of the 2,501`,
		`Delete these 2,501 runs`)
	if n := count(body, `data-testid="purge-row"`); n != 20 {
		t.Fatalf("%d sample rows, want 20", n)
	}
	if n := count(body, `data-testid="purge-breakdown-row"`); n != 2 {
		t.Fatalf("%d workflows, want 2", n)
	}
	before := hidden(t, body, "before")
	// A run that fails after the count is not deleted by its confirm.
	late := f.fabricate(storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 1, Reason: sdk.ReasonNonRetryable})[0]
	form := url.Values{"older_than": {"0s"}, "before": {before}, "confirm": {"1"}, "note": {"retention"},
		"runs": {hidden(t, body, "runs")}, "failure_rows": {hidden(t, body, "failure_rows")}}
	w := f.post("failures/purge", form, postOpts{})
	if w.Code != http.StatusSeeOther || !strings.Contains(w.Header().Get("Location"), "purged=2501") {
		t.Fatalf("confirm: %d %q\n%s", w.Code, w.Header().Get("Location"), firstLines(w.Body.String(), 40))
	}
	if f.status(late) != record.RunFailed {
		t.Fatal("the run that failed after the count was purged")
	}
	rows := f.auditRows()
	if len(rows) != 1 || rows[0].Action != "purge_failures" || rows[0].Runs != 2501 || rows[0].Note != "ui:token: retention" {
		t.Fatalf("audit rows %+v, want one purge of 2,501 runs", rows)
	}
	// The audit row records the cutoff the preview fixed, not an age.
	if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(rows[0].Filter["before"])); err != nil || at.Format(time.RFC3339Nano) != before ||
		rows[0].Filter["older_than"] != nil {
		t.Fatalf("audit filter %v, want the cutoff %s and no age", rows[0].Filter, before)
	}

	g := newFixture(t, writes)
	body = want(t, g.post("failures/purge", url.Values{"older_than": {"30d"}}, postOpts{}), http.StatusOK, `data-testid="purge-nothing"`,
		`Nothing to purge: no run with failure history finished more than 30d ago`)
	if strings.Contains(body, `data-testid="purge-confirm"`) || strings.Contains(body, "Delete 0") {
		t.Fatal("a purge of nothing offers to delete")
	}
}
