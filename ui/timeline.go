package ui

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/sdk"
)

// timeline is a run's steps and attempts on one time axis, drawn as SVG by
// the "timeline" template: one lane per step, attempts as bars coloured by
// status, the delay chosen after each as a line coloured by its source,
// lost attempts and rescues marked, sleeps, signals, events and children as
// marks of their own. Every element has a <title> (the tooltip) with the
// attempt's epoch and worker.
type timeline struct {
	W, H   float64
	Left   float64 // where the axis starts, after the lane labels
	Ticks  []tick
	Lanes  []lane
	Bars   []tlBar
	Delays []tlDelay
	Marks  []tlMark
	NowX   float64
	HasNow bool
}

type tick struct {
	X     float64
	Label string
}

type lane struct {
	Y     float64
	Label string
	Title string
}

type tlBar struct {
	X, Y, W, H float64
	Class      string
	Title      string
	Href       string // a trace link, or a child run
}

type tlDelay struct {
	X1, X2, Y float64
	Class     string
	Title     string
}

type tlMark struct {
	X, Y  float64
	Class string
	Glyph string
	Title string
	Href  string
}

const (
	tlWidth    = 960.0
	tlLeft     = 170.0
	tlTop      = 22.0
	tlLane     = 26.0
	tlBarH     = 14.0
	maxDrawn   = 2000 // attempts drawn at most, whatever the caller passes (the run page passes its last 500)
	minBarSize = 2.0
)

// buildTimeline lays out run's steps and attempts; now is the database
// clock's reading of the page (for bars still running).
func (h *handler) buildTimeline(run operator.Run, steps []operator.Step, attempts []operator.Attempt, now time.Time) timeline {
	t0, t1 := run.CreatedAt, run.CreatedAt
	extend := func(t time.Time) {
		if t.IsZero() {
			return
		}
		if t.Before(t0) {
			t0 = t
		}
		if t.After(t1) {
			t1 = t
		}
	}
	running := !run.Status.Terminal()
	if run.FinishedAt != nil {
		extend(*run.FinishedAt)
	}
	for _, s := range steps {
		extend(s.FirstStartedAt)
		if s.FinishedAt != nil {
			extend(*s.FinishedAt)
		}
		if s.DueAt != nil && running {
			extend(*s.DueAt)
		}
	}
	for i, a := range attempts {
		if i >= maxDrawn {
			break
		}
		extend(a.StartedAt)
		if a.EndedAt != nil {
			extend(*a.EndedAt)
			if a.Delay != nil {
				extend(a.EndedAt.Add(*a.Delay))
			}
		}
	}
	if running {
		extend(now)
	}
	// The axis fits the run, however short: a run of 50 ms fills it too.
	span := max(t1.Sub(t0), 10*time.Millisecond)
	tl := timeline{W: tlWidth, Left: tlLeft}
	axis := tlWidth - tlLeft - 10
	x := func(t time.Time) float64 { return tlLeft + axis*float64(t.Sub(t0))/float64(span) }
	for i := 0; i <= 4; i++ {
		at := t0.Add(span * time.Duration(i) / 4)
		label := "+" + dur(at.Sub(t0))
		if i == 0 {
			label = ts(t0)
		}
		tl.Ticks = append(tl.Ticks, tick{X: x(at), Label: label})
	}
	if running {
		tl.NowX, tl.HasNow = x(now), true
	}
	laneY := map[int]float64{}
	for i, s := range steps {
		y := tlTop + float64(i)*tlLane
		laneY[s.Step] = y
		label := fmt.Sprintf("%d %s", s.Step, s.Activity)
		if s.Kind != sdk.KindActivity {
			label = fmt.Sprintf("%d %s %s", s.Step, s.Kind, s.Activity)
		}
		tl.Lanes = append(tl.Lanes, lane{Y: y, Label: truncate(26, label),
			Title: fmt.Sprintf("step %d: %s %s, %s", s.Step, s.Kind, s.Activity, s.Status)})
		h.stepMarks(&tl, s, y, x, now)
	}
	tl.H = tlTop + float64(max(len(steps), 1))*tlLane + 8
	for i, a := range attempts {
		if i >= maxDrawn {
			break
		}
		y, ok := laneY[a.Step]
		if !ok {
			continue
		}
		end := now
		if a.EndedAt != nil {
			end = *a.EndedAt
		}
		x1, x2 := x(a.StartedAt), x(end)
		title := fmt.Sprintf("step %d attempt %d: %s, %s\nstarted %s\nepoch %d, worker %s", a.Step, a.Attempt, a.Status,
			dur(end.Sub(a.StartedAt)), ts(a.StartedAt), a.Epoch, a.Worker)
		if a.Rescue {
			title += "\nrescue: follows a lost attempt"
		}
		if a.ErrorMessage != "" {
			title += "\n" + a.ErrorType + ": " + truncate(200, a.ErrorMessage)
		}
		if a.Delay != nil {
			title += fmt.Sprintf("\nnext attempt after %s (%s)", dur(*a.Delay), a.DelaySource)
		}
		tl.Bars = append(tl.Bars, tlBar{X: x1, Y: y + (tlLane-tlBarH)/2 - 4, W: max(x2-x1, minBarSize), H: tlBarH,
			Class: "a-" + string(a.Status), Title: title, Href: h.traceLink(a)})
		if a.Rescue {
			tl.Marks = append(tl.Marks, tlMark{X: x1, Y: y - 6, Class: "m-rescue", Glyph: "R",
				Title: fmt.Sprintf("attempt %d is a rescue (epoch %d, worker %s)", a.Attempt, a.Epoch, a.Worker)})
		}
		if a.Status == sdk.AttemptLost {
			tl.Marks = append(tl.Marks, tlMark{X: x2, Y: y - 6, Class: "m-lost", Glyph: "✕",
				Title: fmt.Sprintf("attempt %d lost: its lease expired while it ran (epoch %d, worker %s)", a.Attempt, a.Epoch, a.Worker)})
		}
		if a.Delay != nil && a.EndedAt != nil && *a.Delay > 0 {
			src := a.DelaySource
			if src == "" {
				src = "policy"
			}
			tl.Delays = append(tl.Delays, tlDelay{X1: x2, X2: max(x(a.EndedAt.Add(*a.Delay)), x2+minBarSize), Y: y + tlLane/2 - 4,
				Class: "d-" + src, Title: fmt.Sprintf("delay %s after attempt %d, from %s", dur(*a.Delay), a.Attempt, src)})
		}
	}
	return tl
}

// stepMarks draws the steps of other kinds than activity.
func (h *handler) stepMarks(tl *timeline, s operator.Step, y float64, x func(time.Time) float64, now time.Time) {
	mid := y + tlLane/2 - 4
	end := now
	if s.FinishedAt != nil {
		end = *s.FinishedAt
	}
	switch s.Kind {
	case sdk.KindSleep:
		due := end
		if s.DueAt != nil {
			due = *s.DueAt
		}
		title := fmt.Sprintf("sleep until %s", ts(due))
		if s.FinishedAt != nil {
			title += ", woke " + ts(*s.FinishedAt)
		}
		tl.Bars = append(tl.Bars, tlBar{X: x(s.FirstStartedAt), Y: mid - 4, W: max(x(due)-x(s.FirstStartedAt), minBarSize), H: 8,
			Class: "k-sleep", Title: title})
		tl.Marks = append(tl.Marks, tlMark{X: x(due), Y: mid + 4, Class: "m-sleep", Glyph: "z", Title: title})
	case sdk.KindSignal:
		title := fmt.Sprintf("wait for signal %q", s.Activity)
		if s.SignalID != 0 {
			title += fmt.Sprintf(": received signal #%d at %s", s.SignalID, ts(end))
		} else if s.DueAt != nil {
			title += ", timeout " + ts(*s.DueAt)
		}
		tl.Bars = append(tl.Bars, tlBar{X: x(s.FirstStartedAt), Y: mid - 1, W: max(x(end)-x(s.FirstStartedAt), minBarSize), H: 2,
			Class: "k-wait", Title: title})
		tl.Marks = append(tl.Marks, tlMark{X: x(end), Y: mid + 4, Class: "m-signal", Glyph: "◆", Title: title})
	case sdk.KindChild:
		title := fmt.Sprintf("child run %s (%s): %s", s.ChildRunID, s.Activity, s.ChildStatus)
		href := ""
		if s.ChildRunID != [16]byte{} {
			href = "../runs/" + s.ChildRunID.String() // the timeline is drawn on runs/{id}
		}
		tl.Bars = append(tl.Bars, tlBar{X: x(s.FirstStartedAt), Y: mid - 4, W: max(x(end)-x(s.FirstStartedAt), minBarSize), H: 8,
			Class: "k-child c-" + string(s.ChildStatus), Title: title, Href: href})
	case sdk.KindEvent, sdk.KindNow, sdk.KindSideEffect:
		tl.Marks = append(tl.Marks, tlMark{X: x(s.FirstStartedAt), Y: mid + 4, Class: "m-" + string(s.Kind), Glyph: "●",
			Title: fmt.Sprintf("%s %s at %s", s.Kind, s.Activity, ts(s.FirstStartedAt))})
	}
}

// traceLink is the attempt's trace URL, or "" without TraceURL or IDs.
func (h *handler) traceLink(a operator.Attempt) string {
	if h.cfg.TraceURL == "" || a.TraceID == "" {
		return ""
	}
	return strings.NewReplacer("{trace_id}", url.QueryEscape(a.TraceID), "{span_id}", url.QueryEscape(a.SpanID)).Replace(h.cfg.TraceURL)
}
