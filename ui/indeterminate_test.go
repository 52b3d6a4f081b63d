package ui_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// lostPayout is a run whose at-most-once pay-supplier attempt was lost: it
// failed indeterminate, and nobody knows whether the supplier was paid.
var lostPayout = storetest.Outcome{Workflow: "payouts", Activity: "pay-supplier", Errors: 1, Reason: sdk.ReasonIndeterminate}

func TestRequeueRun_IndeterminateIsRequeuedOnlyOnceItsActivityIsChecked(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	id := f.fabricate(lostPayout)[0]
	run := "runs/" + id.String()
	want(t, f.get(run), http.StatusOK, `data-testid="requeue-warning"><b>⚠ pay-supplier</b> is at most once`)

	body := want(t, f.post(run+"/requeue", url.Values{"note": {"INC-8"}}, postOpts{}), http.StatusOK,
		`data-testid="indeterminate-warning"`, `This run failed <code>indeterminate</code> in\s*<b data-testid="indeterminate-activity">pay-supplier</b>`,
		`<input type="checkbox" name="checked" value="pay-supplier" required data-testid="indeterminate-check"><span>I have checked that <b>pay-supplier</b> did not take effect for this run<`)
	if strings.Contains(body, `data-testid="requeue-others"`) {
		t.Fatal("the preview of one indeterminate run offers to requeue the others: there are none")
	}
	confirm := func(extra url.Values) url.Values {
		v := url.Values{"note": {"INC-8"}, "confirm": {"1"}, "set": {hidden(t, body, "set")}}
		for k, vs := range extra {
			v[k] = vs
		}
		return v
	}
	for name, extra := range map[string]url.Values{
		"without the check":          nil,
		"with another activity's":    {"checked": {"charge"}},
		"skipping it, with no other": {"skip_indeterminate": {"1"}},
	} {
		want(t, f.post(run+"/requeue", confirm(extra), postOpts{}), http.StatusUnprocessableEntity,
			`data-testid="unchecked">Nothing was requeued: 1 run failed indeterminate in at-most-once pay-supplier\.`)
		if f.status(id) != record.RunFailed || len(f.auditRows()) != 0 {
			t.Fatalf("a confirm %s requeued the run", name)
		}
	}

	w := f.post(run+"/requeue", confirm(url.Values{"checked": {"pay-supplier"}}), postOpts{})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("checked confirm: %d\n%s", w.Code, firstLines(w.Body.String(), 60))
	}
	if st := f.status(id); st != record.RunQueued {
		t.Fatalf("run is %s after the checked requeue, want queued", st)
	}
	rows := f.auditRows()
	if len(rows) != 1 || rows[0].Note != "ui:token: INC-8; checked that pay-supplier did not take effect for 1 indeterminate run" {
		t.Fatalf("audit rows %+v, want one whose note says who checked pay-supplier", rows)
	}
}

func TestRequeueFailures_OnlyTheIndeterminateRowsNeedTheCheck(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	payouts := f.fabricate(lostPayout, lostPayout)
	charge := f.fabricate(failedOrder)[0]

	// The failures page marks the group, and says what "Requeue all" holds.
	page := want(t, f.get("failures"), http.StatusOK, `data-testid="bulk-indeterminate">⚠ 2 of them failed <code>indeterminate</code> in at-most-once\s*<b>pay-supplier</b>`)
	if n := count(page, `data-testid="group-indeterminate"`); n != 1 {
		t.Fatalf("%d groups marked indeterminate, want the pay-supplier one", n)
	}
	// A group with no indeterminate run asks for no check.
	body := want(t, f.post("failures/requeue", groupForm(t, page, "charge"), postOpts{}), http.StatusOK, `data-testid="requeue-confirm"`)
	for _, hook := range []string{"indeterminate-warning", "indeterminate-check", "requeue-others"} {
		if strings.Contains(body, `data-testid="`+hook+`"`) {
			t.Fatalf("the preview of the charge group alone has %s", hook)
		}
	}

	// Requeue all: the preview names pay-supplier and its two runs.
	all := url.Values{}
	body = want(t, f.post("failures/requeue", all, postOpts{}), http.StatusOK,
		`2 of these 3 runs \(marked ⚠\) failed <code>indeterminate</code> in\s*<b data-testid="indeterminate-activity">pay-supplier</b>:`,
		`I have checked that <b>pay-supplier</b> did not take effect for these 2 runs \(marked ⚠\)<`,
		`data-testid="requeue-others" type="submit" class="quiet" name="skip_indeterminate" value="1" formnovalidate>Requeue only the 1 other run, leave the 2 indeterminate failed<`)
	if n := count(body, `<tr data-testid="preview-row" class="lost">`); n != 2 {
		t.Fatalf("%d preview rows marked indeterminate, want 2", n)
	}
	all.Set("confirm", "1")
	previewed(t, body, all)
	want(t, f.post("failures/requeue", all, postOpts{}), http.StatusUnprocessableEntity,
		`data-testid="unchecked">Nothing was requeued: 2 runs failed indeterminate in at-most-once pay-supplier\. .* or requeue only the 1 other run\.`)
	if f.status(charge) != record.RunFailed || f.status(payouts[0]) != record.RunFailed || len(f.auditRows()) != 0 {
		t.Fatal("a confirm without the check requeued")
	}

	// Only the others: the charge goes back, the payouts stay failed.
	all.Set("skip_indeterminate", "1")
	w := f.post("failures/requeue", all, postOpts{})
	if w.Code != http.StatusSeeOther || !strings.Contains(w.Header().Get("Location"), "requeued=1") || !strings.Contains(w.Header().Get("Location"), "kept=2") {
		t.Fatalf("confirm of the others: %d %q", w.Code, w.Header().Get("Location"))
	}
	if f.status(charge) != record.RunQueued || f.status(payouts[0]) != record.RunFailed || f.status(payouts[1]) != record.RunFailed {
		t.Fatal("requeueing the others did not requeue exactly the charge")
	}
	want(t, f.get("failures?requeued=1&kept=2"), http.StatusOK, `data-testid="requeued">Requeued 1 run\. Left 2 indeterminate failed`)

	// The group's preview, checked: both payouts go back.
	form := groupForm(t, want(t, f.get("failures"), http.StatusOK), "pay-supplier")
	body = want(t, f.post("failures/requeue", form, postOpts{}), http.StatusOK, `All 2 runs failed <code>indeterminate</code>`)
	if strings.Contains(body, `data-testid="requeue-others"`) {
		t.Fatal("the preview of an indeterminate group offers to requeue others: there are none")
	}
	form.Set("confirm", "1")
	previewed(t, body, form)
	form.Set("checked", "pay-supplier")
	if w := f.post("failures/requeue", form, postOpts{}); w.Code != http.StatusSeeOther || !strings.Contains(w.Header().Get("Location"), "requeued=2") {
		t.Fatalf("checked confirm: %d %q", w.Code, w.Header().Get("Location"))
	}
	for _, id := range payouts {
		if f.status(id) != record.RunQueued {
			t.Fatalf("payout %s not requeued after the check", id)
		}
	}
	notes := map[string]int64{}
	for _, r := range f.auditRows() {
		notes[r.Note] += r.Runs
	}
	if len(notes) != 2 || notes["ui:token: left 2 indeterminate runs failed"] != 1 ||
		notes["ui:token: checked that pay-supplier did not take effect for 2 indeterminate runs"] != 2 {
		t.Fatalf("audit notes %v, want the skip of 1 run and the check of 2", notes)
	}
}

func TestRequeueFailures_EachAtMostOnceActivityIsCheckedOnItsOwn(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	ids := f.fabricate(lostPayout, storetest.Outcome{Workflow: "payouts", Activity: "send-parcel", Errors: 1, Reason: sdk.ReasonIndeterminate})
	all := url.Values{}
	body := want(t, f.post("failures/requeue", all, postOpts{}), http.StatusOK,
		`<b data-testid="indeterminate-activity">pay-supplier</b> \(1\), <b data-testid="indeterminate-activity">send-parcel</b> \(1\):`)
	if n := count(body, `data-testid="indeterminate-check"`); n != 2 {
		t.Fatalf("%d boxes to tick, want one per activity", n)
	}
	all.Set("confirm", "1")
	previewed(t, body, all)
	all.Set("checked", "pay-supplier")
	want(t, f.post("failures/requeue", all, postOpts{}), http.StatusUnprocessableEntity,
		`data-testid="unchecked">Nothing was requeued: 1 run failed indeterminate in at-most-once send-parcel\.`)
	if f.status(ids[0]) != record.RunFailed || f.status(ids[1]) != record.RunFailed {
		t.Fatal("a confirm that checked one activity of two requeued")
	}
	all["checked"] = []string{"pay-supplier", "send-parcel"}
	if w := f.post("failures/requeue", all, postOpts{}); w.Code != http.StatusSeeOther {
		t.Fatalf("confirm with both checked: %d", w.Code)
	}
	rows := f.auditRows()
	if len(rows) != 1 || rows[0].Note != "ui:token: checked that pay-supplier did not take effect for 1 indeterminate run and send-parcel did not take effect for 1 indeterminate run" {
		t.Fatalf("audit rows %+v", rows)
	}
}
