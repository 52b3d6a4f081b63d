package browser_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tenurehq/tenure/sdk"
)

// Selectors of the at-most-once warnings and checks (package ui's
// indeterminate.go).
const (
	groupLost    = `[data-testid="group-indeterminate"]`
	bulkLost     = `[data-testid="bulk-indeterminate"]`
	bulkRequeue  = `[data-testid="bulk-requeue"]`
	runWarning   = `[data-testid="requeue-warning"]`
	lostWarning  = `[data-testid="indeterminate-warning"]`
	lostCheck    = `input[data-testid="indeterminate-check"]`
	othersOnly   = `[data-testid="requeue-others"]`
	confirmForm  = `form[data-testid="requeue-confirm-form"]`
	requeuedNote = `[data-testid="requeued"]`
)

// TestUI_LostPaymentsAreRequeuedOnlyOnceTheyAreChecked: the bank fell
// silent while two payouts were being paid, and the worker was cut off: the
// runs failed indeterminate, since nobody knows whether the suppliers were
// paid. Every way the UI offers to requeue them names pay-supplier and how
// many runs, and puts them back only after the engineer ticks that they
// checked the payment did not happen; a failed checkout requeued with them
// needs no such check.
func TestUI_LostPaymentsAreRequeuedOnlyOnceTheyAreChecked(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	s.bankSilent.Store(true)
	payouts := map[string]*sdk.Run[string]{}
	for _, p := range []payment{{"payout-7", "Acme Tools", 1200}, {"payout-8", "Borealis Paper", 640}} {
		run, err := sdk.Start(t.Context(), s.client, s.payout, p, sdk.WithKey(p.ID))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case id := <-s.paying:
			if id != p.ID {
				t.Fatalf("the bank is paying %s, want %s", id, p.ID)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("pay-supplier did not start for %s in 30s", p.ID)
		}
		s.cutOff(run.ID)
		payouts[p.ID] = run
	}
	for id, run := range payouts {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		_, err := run.Result(ctx)
		cancel()
		if !errors.Is(err, sdk.ErrIndeterminate) {
			t.Fatalf("payout %s ended with %v, want indeterminate", id, err)
		}
	}
	if _, err := s.order(order{"order-44", 300, "XTS"}); err == nil {
		t.Fatal("the checkout of order-44 in XTS succeeded before the fix")
	}
	// The bank answers again, and the card processor's fix is deployed.
	s.bankSilent.Store(false)
	s.fixed.Store(true)
	b := s.browse()

	// The failures page marks the group whose requeue may pay twice, and
	// says that "Requeue all" holds it.
	b.open("failures")
	groups := b.texts(failureGroup)
	if len(groups) != 2 || !strings.Contains(groups[0], "pay-supplier") || !strings.Contains(groups[0], "did it take effect?") {
		t.Fatalf("failure groups %q, want the 2 pay-supplier failures first, marked", groups)
	}
	if marks := b.texts(groupLost); len(marks) != 1 {
		t.Fatalf("%d groups marked at most once, want 1", len(marks))
	}
	if note := b.text(bulkLost); !strings.Contains(note, "2 of them failed indeterminate") || !strings.Contains(note, "pay-supplier") {
		t.Fatalf("beside Requeue all: %q, want it to name pay-supplier and its 2 runs", note)
	}

	// Requeue all: the preview names pay-supplier and its two runs, and
	// the browser does not send the confirm until their box is ticked.
	b.follow(bulkRequeue)
	if rows := b.texts(previewRow); len(rows) != 3 {
		t.Fatalf("the preview of Requeue all lists %q, want 3 runs", rows)
	}
	if w := b.text(lostWarning); !strings.Contains(w, "2 of these 3 runs") || !strings.Contains(w, "pay-supplier") || !strings.Contains(w, "happens twice") {
		t.Fatalf("the preview's warning reads %q, want it to name pay-supplier and its 2 runs", w)
	}
	if label := b.text(`label:has(` + lostCheck + `)`); label != "I have checked that pay-supplier did not take effect for these 2 runs (marked ⚠)" {
		t.Fatalf("the box to tick reads %q", label)
	}
	if b.confirmable() {
		t.Fatal("the browser would send the confirm without the check of pay-supplier")
	}
	b.screenshot("requeue-indeterminate")

	// Only the checkout, for now: it goes back without any check.
	b.follow(othersOnly)
	if got := b.text(requeuedNote); !strings.HasPrefix(got, "Requeued 1 run. Left 2 indeterminate failed") {
		t.Fatalf("after requeueing the others: %q", got)
	}

	// The bank says payout-7 never reached it. From its run page, found by
	// its key: the warning, the dry run, the check, the confirm.
	b.followNav("Runs")
	b.fill(runSearch+` input[name="key"]`, "payout-7")
	b.follow(runSearch + ` [type="submit"]`)
	b.follow(runRow + ` ` + runLink)
	if got := b.text(runWarning); !strings.Contains(got, "pay-supplier is at most once") {
		t.Fatalf("the run page's requeue says %q, want a warning naming pay-supplier", got)
	}
	// Its one attempt was lost, and nothing rescued it.
	if got := b.text(`[data-testid="failure-attempts"]`); got != "1 attempt, lost" {
		t.Fatalf("the failure's attempts read %q, want 1 attempt, lost", got)
	}
	b.fill(requeueForm+` [name="note"]`, "INC-12: the bank has no payout-7")
	b.follow(dryRun)
	if w := b.text(lostWarning); !strings.HasPrefix(w, "Requeueing runs an at-most-once activity again. This run failed indeterminate in pay-supplier") {
		t.Fatalf("the run's preview warns %q", w)
	}
	b.tick(lostCheck)
	b.follow(confirm)
	s.awaitPaid(b, payouts["payout-7"], "paid 1200 to Acme Tools")

	// And payout-8, from its group.
	b.followNav("Failures")
	b.follow(`[data-testid="group-requeue"]`) // the one group left
	if w := b.text(lostWarning); !strings.Contains(w, "This run failed indeterminate in pay-supplier") {
		t.Fatalf("the group's preview warns %q", w)
	}
	b.tick(lostCheck)
	b.follow(confirm)
	if got := b.text(requeuedNote); got != "Requeued 1 run." {
		t.Fatalf("after the group's requeue: %q", got)
	}
	s.awaitPaid(b, payouts["payout-8"], "paid 640 to Borealis Paper")

	// Each payment was attempted twice: the lost attempt, and the requeue's.
	for id := range payouts {
		if n := s.calls(id); n != 2 {
			t.Errorf("pay-supplier ran %d times for %s, want 2 (the lost attempt, then the requeue)", n, id)
		}
	}
	audit, err := s.op.AuditLog(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, a := range audit {
		notes = append(notes, a.Note)
	}
	wantNotes := []string{
		"ui:token: left 2 indeterminate runs failed",
		"ui:token: INC-12: the bank has no payout-7; checked that pay-supplier did not take effect for 1 indeterminate run",
		"ui:token: checked that pay-supplier did not take effect for 1 indeterminate run",
	}
	for _, n := range wantNotes {
		if !strings.Contains(strings.Join(notes, "\n"), n) {
			t.Errorf("audit notes %q lack %q", notes, n)
		}
	}
}

// confirmable reports whether the browser would send the preview's confirm
// form as it is now (every required box ticked).
func (b *browser) confirmable() bool {
	b.t.Helper()
	return run(b, "validate the confirm", chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector(%q).checkValidity()`, confirmForm)))
}

// tick ticks the box sel selects.
func (b *browser) tick(sel string) {
	b.t.Helper()
	b.do("tick "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
	if !b.confirmable() {
		b.t.Fatalf("ticking %s left the confirm invalid", sel)
	}
}

// awaitPaid waits for the requeued payout to complete with the bank's
// receipt.
func (s *shop) awaitPaid(b *browser, run *sdk.Run[string], receipt string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), 30*time.Second)
	defer cancel()
	if out, err := run.Result(ctx); err != nil || out != receipt {
		s.t.Fatalf("the requeued payout %s ended with %q, %v; want %q (page %s)", run.ID, out, err, receipt, b.location())
	}
}
