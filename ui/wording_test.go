package ui_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/ui"
)

// Counts read right in the singular, an error leads with its message and
// names its Go type only when the type says more, and a failure that lost
// its only attempt says so rather than counting a rescue.
func TestPages_SayCountsAndErrorsRight(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	id := f.fabricate(storetest.Outcome{Workflow: "payout", Activity: "pay-supplier", Errors: 1, Reason: sdk.ReasonIndeterminate})[0]
	if _, err := f.pool.Exec(t.Context(), `UPDATE `+f.schema+`.failures SET attempts = 1, errors = 0, rescues = 0,
		error_message = 'attempt lost', error_type = 'tenure.Indeterminate' WHERE run_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	want(t, f.get("failures"), http.StatusOK, `data-testid="failure-total">1</b> open failure in 1 group,`,
		`data-testid="group-message"[^>]*>attempt lost</span><br><span class="errtype mono" data-testid="group-type">tenure.Indeterminate<`)
	want(t, f.get("runs/"+id.String()), http.StatusOK, `data-testid="failure-attempts">1 attempt, lost<`,
		`attempt lost <span class="errtype mono">tenure.Indeterminate</span>`)

	// errors.New's type is no news: the message alone.
	other := f.fabricate(storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 2, Reason: sdk.ReasonRetriesExhausted})[0]
	body := want(t, f.get("failures"), http.StatusOK, `data-testid="failure-total">2</b> open failures in 2 groups,`)
	if strings.Contains(body, "*errors.errorString") {
		t.Fatalf("the failures page names *errors.errorString:\n%s", firstLines(body, 80))
	}
	body = want(t, f.get("runs/"+other.String()), http.StatusOK, `data-testid="failure-attempts">2 attempts \(2 errors, 0 rescues\)<`)
	if strings.Contains(body, "*errors.errorString") {
		t.Fatal("the run page names *errors.errorString")
	}

	// Out of rescues: the attempts, the rescue made, the last one lost.
	if _, err := f.pool.Exec(t.Context(), `UPDATE `+f.schema+`.failures SET reason = 'rescues_exhausted', attempts = 2, errors = 0, rescues = 1
		WHERE run_id = $1`, other); err != nil {
		t.Fatal(err)
	}
	want(t, f.get("runs/"+other.String()), http.StatusOK, `data-testid="failure-attempts">2 attempts \(0 errors, 1 rescue\), the last lost<`)
	want(t, f.get("workers"), http.StatusOK, `0 live of 0 registered workers`)
}
