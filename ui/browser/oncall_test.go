package browser_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/sdk"
)

// Selectors of the UI's stable hooks (package ui's data-testid attributes).
const (
	runSearch    = `form[data-testid="run-search"]`
	runRow       = `tr[data-testid="run-row"]`
	runLink      = `a[data-testid="run-link"]`
	runStatus    = `[data-testid="run-status"]`
	timeline     = `svg[data-testid="timeline"]`
	requeueForm  = `form[data-testid="requeue-form"]`
	dryRun       = `[data-testid="requeue-dry-run"]`
	previewRow   = `tr[data-testid="preview-row"]`
	confirm      = `[data-testid="requeue-confirm"]`
	failureGroup = `tr[data-testid="failure-group"]`
	workerRow    = `tr[data-testid="worker-row"]`
	orphan       = `[data-testid="orphan-warning"]`
)

// TestUI_OnCallEngineerRequeuesAFailedRun is the page of the runbook: a
// customer's checkout failed for good; the engineer finds it by its key,
// reads its timeline, deploys the fix, requeues the run with a note after a
// dry run, and watches it complete.
func TestUI_OnCallEngineerRequeuesAFailedRun(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	var failed *sdk.Run[string]
	orders := []order{
		{"order-37", 0, "EUR"}, {"order-38", 1500, "XTS"}, {"order-39", 300, "XTS"},
		{"order-40", 1200, "EUR"}, {"order-41", 800, "USD"}, {"order-42", 4200, "XTS"},
	}
	for _, o := range orders {
		run, err := s.order(o)
		wantFail := o.Currency == "XTS" || o.Amount <= 0
		if re := (*sdk.RunError)(nil); wantFail != errors.As(err, &re) {
			t.Fatalf("checkout of %+v ended with %v", o, err)
		}
		if o.ID == "order-42" {
			failed = run
		}
	}
	b := s.browse()

	// The alert says checkouts fail: the Failures page groups them by
	// cause, the XTS orders together.
	b.open("failures")
	b.checkNav()
	groups := b.texts(failureGroup)
	if len(groups) != 2 || !strings.HasPrefix(groups[0], "3") || !strings.Contains(groups[0], `unknown currency "XTS"`) {
		t.Fatalf("failure groups %q, want two, the first of the 3 XTS orders", groups)
	}
	b.screenshot("failures")

	// Every run, then the customer's, by its key.
	b.followNav("Runs")
	if rows := b.texts(runRow); len(rows) != len(orders) {
		t.Fatalf("the Runs page lists %d runs, want %d: %q", len(rows), len(orders), rows)
	}
	if b.has(orphan) {
		t.Errorf("the Runs page warns of orphaned runs, and there are none: %q", b.text(orphan))
	}
	b.screenshot("runs")
	b.fill(runSearch+` input[name="key"]`, "order-42")
	b.follow(runSearch + ` [type="submit"]`)
	rows := b.texts(runRow)
	if len(rows) != 1 || !strings.Contains(rows[0], "order-42") {
		t.Fatalf("searching the key order-42 lists %q, want its run alone", rows)
	}
	b.follow(runRow + ` ` + runLink)
	if loc := b.location(); !strings.Contains(loc, failed.ID.String()) {
		t.Fatalf("the run link led to %s, want the page of run %s", loc, failed.ID)
	}
	b.checkNav()
	if got := b.text(runStatus); got != "failed" {
		t.Fatalf("run status %q, want failed", got)
	}
	b.waitFor(timeline)
	b.screenshot("run")

	// Why was it not retried? The step's policy, explained.
	b.followLink(`//tr[@data-testid="step-row"][contains(., "charge-card")]//a[normalize-space(.)="explain"]`)
	b.checkNav()
	if got := b.text(`[data-testid="policy"]`); !strings.Contains(got, "exponential") {
		t.Errorf("charge-card's policy reads %q, want its exponential backoff", got)
	}
	b.screenshot("policy")
	b.followLink(fmt.Sprintf(`//main//a[contains(@href, "runs/%s")]`, failed.ID))

	// A dry run first: it names what the requeue would put back.
	note := "INC-7: the card processor accepts XTS again"
	b.fill(requeueForm+` [name="note"]`, note)
	b.follow(dryRun)
	preview := b.texts(previewRow)
	if len(preview) != 1 || !strings.Contains(preview[0], failed.ID.String()) {
		t.Fatalf("the dry run previews %q, want run %s alone", preview, failed.ID)
	}
	b.screenshot("requeue-preview")

	// Deploy the fix, then confirm: the run is queued again with a fresh
	// budget for the step that failed, and completes.
	s.fixed.Store(true)
	b.follow(confirm)
	if loc := b.location(); !strings.Contains(loc, "runs/"+failed.ID.String()) {
		t.Fatalf("confirming led to %s, want back to the page of run %s", loc, failed.ID)
	}
	deadline := time.Now().Add(30 * time.Second)
	for status := b.text(runStatus); status != "completed"; status = b.text(runStatus) {
		if time.Now().After(deadline) {
			t.Fatalf("run status is still %q 30s after the requeue, want completed", status)
		}
		time.Sleep(100 * time.Millisecond)
		b.load("reload the run page", chromedp.Reload())
	}
	if history := b.texts(`tr[data-testid="audit-row"]`); len(history) != 1 || !strings.Contains(history[0], note) {
		t.Errorf("the run's requeue history %q, want the requeue with its note", history)
	}
	if n := eval[int](b, "count the requeues drawn", `document.querySelectorAll('svg[data-testid="timeline"] [data-testid="timeline-requeue"]').length`); n != 1 {
		t.Errorf("the timeline marks %d requeues, want 1", n)
	}

	// Had the fix taken ten minutes, the attempts before the requeue would
	// still be drawn to scale: the ten minutes are a break of the axis.
	if _, err := s.pool.Exec(t.Context(), strings.ReplaceAll(`
		WITH r AS (SELECT at FROM {schema}.audit_log WHERE $1 = ANY (run_ids))
		UPDATE {schema}.attempts a SET started_at = a.started_at - interval '10 minutes', ended_at = a.ended_at - interval '10 minutes'
		FROM r WHERE a.run_id = $1 AND a.started_at < r.at`, "{schema}", pgx.Identifier{s.schema}.Sanitize()), failed.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(t.Context(), strings.ReplaceAll(`
		UPDATE {schema}.runs SET created_at = created_at - interval '10 minutes' WHERE id = $1;`, "{schema}", pgx.Identifier{s.schema}.Sanitize()), failed.ID); err != nil {
		t.Fatal(err)
	}
	b.load("reload the run page", chromedp.Reload())
	gaps := eval[[]string](b, "read the breaks", `Array.from(document.querySelectorAll('svg[data-testid="timeline"] [data-testid="timeline-gap"] text'), e => e.lastChild.textContent)`)
	if len(gaps) == 0 || gaps[0] != "10m" {
		t.Errorf("the timeline's breaks %q, want the first of 10m", gaps)
	}
	widths := eval[[]float64](b, "measure the attempts", `Array.from(document.querySelectorAll('svg[data-testid="timeline"] rect[class^="a-"]'), r => r.getBBox().width)`)
	for _, w := range widths {
		if w < 2 {
			t.Errorf("an attempt is %.1f px wide on the timeline: %v", w, widths)
		}
	}
	b.fits("the page of a requeued run")
	b.screenshot("run-requeued")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if out, err := failed.Result(ctx); err != nil || out != "receipt: charged 4200 XTS" {
		t.Fatalf("the requeued run's result is %q, %v; want the receipt", out, err)
	}
	audit, err := s.op.AuditLog(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) != 1 || audit[0].Note != "ui:token: "+note {
		t.Fatalf("audit log %+v, want the requeue by the token's holder with the note %q", audit, note)
	}
}

// TestUI_WorkersPageNamesAWorkflowNoWorkerServes: a run of a workflow that
// no live worker registers waits in the queue for ever, so every page warns
// of it, naming the workflow, and the Workers page shows it beside the
// workers that are alive.
func TestUI_WorkersPageNamesAWorkflowNoWorkerServes(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	if _, err := s.order(order{"order-43", 990, "EUR"}); err != nil {
		t.Fatalf("checkout of order-43: %v", err)
	}
	if _, err := sdk.Start(t.Context(), s.client, s.reconcile, "2026-11-30"); err != nil {
		t.Fatal(err)
	}
	b := s.browse()

	b.open("runs")
	if warning := b.text(orphan); !strings.Contains(warning, "reconcile-ledger") {
		t.Fatalf("the Runs page's orphan warning %q does not name reconcile-ledger", warning)
	}
	b.followNav("Workers")
	b.checkNav()
	if warning := b.text(orphan); !strings.Contains(warning, "reconcile-ledger") {
		t.Fatalf("the Workers page's orphan warning %q does not name reconcile-ledger", warning)
	}
	workers := b.texts(workerRow)
	if len(workers) != 1 || !strings.Contains(workers[0], s.worker.Label()) || !strings.Contains(workers[0], "checkout") {
		t.Fatalf("worker rows %q, want %s, serving checkout, alone", workers, s.worker.Label())
	}
	b.screenshot("workers")
}
