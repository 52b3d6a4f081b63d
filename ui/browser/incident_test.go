package browser_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
)

// seedIncident records n failed runs of workflow wf at once, as workers
// leave them, failed at most an hour ago: the step that gave up, its
// attempt, the failure row. Every tenth lost an attempt of the at-most-once
// pay-supplier (indeterminate); the others ran out of retries calling a
// bank that answered 503. ago moves their end that far back.
func (s *shop) seedIncident(wf string, n int, ago time.Duration) {
	s.t.Helper()
	id := `md5($2 || i)::uuid`
	for _, stmt := range []string{
		`INSERT INTO {s}.runs (id, workflow, queue, input, status, epoch, created_at, started_at, finished_at)
		 SELECT {id}, $2, 'default', '{}', 'failed', 1, now() - $3::interval - interval '1 hour', now() - $3::interval - interval '1 hour',
		        now() - $3::interval - (($1 - i) * interval '300 ms')
		 FROM generate_series(1, $1) i`,
		`INSERT INTO {s}.steps (run_id, step, activity, status, reason, error_message, error_type, policy, first_started_at, finished_at)
		 SELECT {id}, 1, CASE WHEN i % 10 = 0 THEN 'pay-supplier' ELSE 'settle' END, 'failed',
		        CASE WHEN i % 10 = 0 THEN 'indeterminate' ELSE 'retries_exhausted' END, 'boom', '*errors.errorString', '{}',
		        now() - $3::interval - interval '1 hour', now() - $3::interval
		 FROM generate_series(1, $1) i`,
		`INSERT INTO {s}.failures (run_id, workflow, reason, step, activity, attempts, errors, rescues, error_message, error_type, failed_at)
		 SELECT {id}, $2, CASE WHEN i % 10 = 0 THEN 'indeterminate' ELSE 'retries_exhausted' END, 1,
		        CASE WHEN i % 10 = 0 THEN 'pay-supplier' ELSE 'settle' END, 1, CASE WHEN i % 10 = 0 THEN 0 ELSE 1 END, 0,
		        CASE WHEN i % 10 = 0 THEN 'attempt lost: the worker died, froze or was cut off while it ran'
		             ELSE format('POST https://bank.example/v2/settlements/%s: 503 Service Unavailable', i) END,
		        CASE WHEN i % 10 = 0 THEN 'tenure.Indeterminate' ELSE '*url.Error' END,
		        now() - $3::interval - (($1 - i) * interval '300 ms')
		 FROM generate_series(1, $1) i`,
	} {
		stmt = strings.NewReplacer("{s}", pgx.Identifier{s.schema}.Sanitize(), "{id}", id).Replace(stmt)
		if _, err := s.pool.Exec(s.t.Context(), stmt, n, wf, ago.String()); err != nil {
			s.t.Fatalf("seed %s: %v\n%s", wf, err, stmt)
		}
	}
}

// TestUI_ALargeIncidentIsRequeuedAndOldFailuresPurged: the bank was down for
// an hour and 10,000 settlements failed; the engineer requeues them all from
// the failures page (a count, a breakdown, 20 of them, the check that the
// lost payments did not happen, one confirmation, one audit row), after
// purging an import that failed for good two months ago.
func TestUI_ALargeIncidentIsRequeuedAndOldFailuresPurged(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	s.seedIncident("settlement", 10_000, 0)
	s.seedIncident("legacy-import", 300, 60*24*time.Hour)
	b := s.browse()

	// The old import first: a purge counts it, lists its oldest runs, and
	// deletes it once confirmed.
	b.open("failures")
	if got := b.text(`[data-testid="failure-summary"]`); !strings.HasPrefix(got, "10,300 open failures in 4 groups") {
		t.Fatalf("the failures page sums up %q", got)
	}
	b.fits("the failures page of a large incident")
	// The bank's 503 is the cause: the group keeps it, and leads with the
	// message, then the error's type.
	groups := b.texts(failureGroup)
	if len(groups) != 4 || !strings.Contains(groups[0], "POST https://bank.example/v<n>/settlements/<n>: 503 Service Unavailable\n*url.Error") {
		t.Fatalf("failure groups %q, want the 9,000 settlements first, with their 503 and *url.Error", groups)
	}
	b.fill(`form[action="failures/purge"] input[name="workflow"]`, "legacy-import")
	b.follow(`[data-testid="purge"]`)
	if got := b.text(`[data-testid="purge-summary"]`); !strings.HasPrefix(got, "This deletes 300 runs with failure history of workflow legacy-import that finished more than 30d ago") {
		t.Fatalf("the purge preview says %q", got)
	}
	if rows := b.texts(`tr[data-testid="purge-row"]`); len(rows) != 20 || !strings.Contains(rows[0], "legacy-import") {
		t.Fatalf("the purge preview lists %d runs, want the oldest 20 of legacy-import: %q", len(rows), rows)
	}
	b.fits("the purge preview")
	b.screenshot("purge")
	b.fill(`textarea[name="note"]`, "RET-3: the import of October")
	b.follow(`[data-testid="purge-confirm"]`)
	if got := b.text(`[data-testid="purged"]`); got != "Purged 300 runs with their failure rows." {
		t.Fatalf("after the purge: %q", got)
	}

	// Requeue all 10,000.
	b.follow(bulkRequeue)
	if got := b.text(`[data-testid="preview-summary"]`); !strings.HasPrefix(got, "Requeueing puts 10,000 failed runs back in the queue") {
		t.Fatalf("the preview sums up %q", got)
	}
	if rows := b.texts(previewRow); len(rows) != 20 {
		t.Fatalf("the preview lists %d runs, want a sample of 20", len(rows))
	}
	breakdown := b.texts(`tr[data-testid="breakdown-row"]`)
	if len(breakdown) != 2 || !regexp.MustCompile(`settle\s+retries_exhausted\s+9,000`).MatchString(breakdown[0]) ||
		!regexp.MustCompile(`pay-supplier\s+⚠ indeterminate\s+1,000`).MatchString(breakdown[1]) {
		t.Fatalf("the preview's breakdown %q", breakdown)
	}
	if label := b.text(`label:has(` + lostCheck + `)`); label != "I have checked that pay-supplier did not take effect for these 1,000 runs" {
		t.Fatalf("the box to tick reads %q", label)
	}
	if b.confirmable() {
		t.Fatal("the browser would send the confirm without the check of pay-supplier")
	}
	b.fits("the preview of 10,000")
	b.screenshot("requeue-bulk")
	b.fill(`textarea[name="note"]`, "INC-20: the bank is back; pay-supplier checked with the bank's ledger")
	b.tick(lostCheck)
	if got := b.text(confirm); got != "Requeue these 10,000 runs" {
		t.Fatalf("the confirm button reads %q", got)
	}
	b.follow(confirm)
	if got := b.text(requeuedNote); got != "Requeued 10,000 runs." {
		t.Fatalf("after the requeue: %q", got)
	}
	audit, err := s.op.AuditLog(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var requeues []record.AuditEntry
	for _, a := range audit {
		if a.Action == "requeue" {
			requeues = append(requeues, a)
		}
	}
	if len(requeues) != 1 || requeues[0].Runs != 10_000 || !strings.Contains(requeues[0].Note, "checked that pay-supplier did not take effect for 1,000 indeterminate runs") {
		t.Fatalf("requeue audit rows %+v, want one of 10,000 runs", requeues)
	}
	if len(audit) != 2 || audit[1].Action != "purge_failures" || audit[1].Runs != 300 {
		t.Fatalf("audit rows %+v, want the requeue and the purge", audit)
	}
	st, err := s.op.Runs(t.Context(), operator.RunFilter{Workflow: "settlement", Status: record.RunQueued, Limit: 10_001})
	if err != nil || len(st) != 10_000 {
		t.Fatalf("%d settlement runs queued (%v), want 10,000", len(st), err)
	}
	b.load("the failures page", chromedp.Reload())
	if got := b.text(`[data-testid="failure-summary"]`); !strings.HasPrefix(got, "0 open failures in 0 groups") {
		t.Fatalf("after the requeue the failures page says %q", got)
	}
}
