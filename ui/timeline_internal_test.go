package ui

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/record"
)

// A run that failed, was requeued ten minutes later and then completed:
// the ten minutes are a break of the axis, not nine tenths of it, the
// requeue is a line of its own, and no label runs past the edge or over
// another.
func TestTimeline_CompressesTheGapBeforeARequeueAndMarksIt(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ptr := func(t time.Time) *time.Time { return &t }
	delay := 50 * time.Millisecond
	requeued := at(10 * time.Minute)
	run := record.Run{ID: uuid.New(), Workflow: "checkout", Status: record.RunCompleted, CreatedAt: t0,
		FinishedAt: ptr(requeued.Add(1300 * time.Millisecond)), Requeues: 1}
	steps := []record.Step{{Step: 1, Activity: "charge-card", Kind: record.KindActivity, Status: record.StepCompleted,
		FirstStartedAt: at(10 * time.Millisecond), FinishedAt: run.FinishedAt, BudgetFrom: 2}}
	attempts := []record.Attempt{
		{Step: 1, Attempt: 1, Status: record.AttemptFailed, StartedAt: at(10 * time.Millisecond), EndedAt: ptr(at(60 * time.Millisecond)),
			Delay: &delay, DelaySource: "jitter", ErrorMessage: "HTTP 503", ErrorType: "*errors.errorString"},
		{Step: 1, Attempt: 2, Status: record.AttemptFailed, StartedAt: at(110 * time.Millisecond), EndedAt: ptr(at(160 * time.Millisecond)),
			ErrorMessage: "HTTP 503", ErrorType: "*errors.errorString"},
		{Step: 1, Attempt: 3, Status: record.AttemptSucceeded, StartedAt: requeued.Add(time.Second), EndedAt: ptr(requeued.Add(1200 * time.Millisecond)), InBudget: true},
	}
	audit := []record.AuditEntry{{Action: "requeue", At: requeued, Actor: "postgres", Note: "ui:token: INC-7"}}
	h := &handler{}
	tl := h.buildTimeline(run, steps, attempts, audit, nil, requeued.Add(time.Hour))

	// Ten minutes failed, then a second from the requeue to the claim: both
	// idle, both breaks.
	if len(tl.Gaps) != 2 || tl.Gaps[0].Label != "10m" || tl.Gaps[1].Label != "1s" {
		t.Fatalf("gaps %+v, want one of 10m, then one of 1s", tl.Gaps)
	}
	if len(tl.Lines) != 1 || tl.Lines[0].Class != "requeue" {
		t.Fatalf("requeue lines %+v, want one", tl.Lines)
	}
	for _, b := range tl.Bars {
		if b.W < 60 { // to scale over 10 minutes, 50 ms would be 0.08 px
			t.Errorf("bar %q is %.1f px wide: the attempts shrank to a sliver", b.Title, b.W)
		}
	}
	if tl.Lines[0].X <= tl.Gaps[0].X {
		t.Errorf("the requeue (x %.1f) is drawn before the gap it ends (x %.1f)", tl.Lines[0].X, tl.Gaps[0].X)
	}
	checkLabels(t, tl)
	for _, want := range []string{"requeue", "gap", "a-failed old", "a-succeeded", "d-jitter"} {
		found := false
		for _, it := range tl.Legend {
			found = found || it.Class == want
		}
		if !found {
			t.Errorf("the legend %+v lacks %s", tl.Legend, want)
		}
	}
}

// A short run's axis is linear, and its last label ends at the edge.
func TestTimeline_ShortRunIsLinearAndItsLastLabelFits(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	end := t0.Add(439 * time.Millisecond)
	run := record.Run{Status: record.RunFailed, CreatedAt: t0, FinishedAt: &end}
	steps := []record.Step{{Step: 1, Activity: "reserve-stock", Kind: record.KindActivity, FirstStartedAt: t0}}
	attempts := []record.Attempt{{Step: 1, Attempt: 1, Status: record.AttemptFailed, StartedAt: t0, EndedAt: &end}}
	tl := (&handler{}).buildTimeline(run, steps, attempts, nil, nil, end)
	if len(tl.Gaps) != 0 {
		t.Fatalf("gaps %+v in a run of 439ms", tl.Gaps)
	}
	first, last := tl.Ticks[0], tl.Ticks[len(tl.Ticks)-1]
	if first.Label != "2026-12-01 12:00:00Z" || first.TextX > tlLeft || first.Anchor != "end" {
		t.Fatalf("first tick %+v, want the time, written left of the axis", first)
	}
	if last.Label != "+439ms" || last.Anchor != "end" {
		t.Fatalf("last tick %+v, want +439ms anchored at its end", last)
	}
	checkLabels(t, tl)
}

// checkLabels fails the test when a tick's label runs past the timeline or
// over another label.
func checkLabels(t *testing.T, tl timeline) {
	t.Helper()
	prevEnd := -1.0
	for _, tk := range tl.Ticks {
		w := float64(len([]rune(tk.Label))) * charWidth
		from := map[string]float64{"start": tk.TextX, "middle": tk.TextX - w/2, "end": tk.TextX - w}[tk.Anchor]
		if from < 0 || from+w > tl.W {
			t.Errorf("label %q at %.1f (%s) is cut by the edge", tk.Label, tk.X, tk.Anchor)
		}
		if from < prevEnd {
			t.Errorf("label %q overlaps the one before it", tk.Label)
		}
		prevEnd = from + w
	}
}
