package ui

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tenurehq/tenure/record"
)

// timeline is a run's steps and attempts on one time axis, drawn as SVG by
// the "timeline" template: one lane per step, attempts as bars coloured by
// status, the delay chosen after each as a line coloured by its source,
// lost attempts and rescues marked, sleeps, signals, events and children as
// marks of their own, requeues as lines across the lanes. Every element has
// a <title> (the tooltip) with the attempt's epoch and worker.
//
// The axis is linear but for long idle gaps (a run failed for an hour
// before its requeue, a durable backoff of ten minutes, a sleep of a day):
// each is drawn as a break of gapWidth pixels with its length written in
// it, so that the attempts on either side keep their width.
type timeline struct {
	W, H   float64
	Left   float64 // where the axis starts, after the lane labels
	Ticks  []tick
	Lanes  []lane
	Gaps   []tlGap
	Bars   []tlBar
	Delays []tlDelay
	Marks  []tlMark
	Lines  []tlLine // requeues
	NowX   float64
	HasNow bool
	// Legend is what this timeline draws, in the legend's order.
	Legend []legendItem
}

type tick struct {
	X      float64 // of its line
	TextX  float64 // of its label
	Label  string
	Anchor string // text-anchor: start, middle or end, so that no label is cut
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

// tlGap is a compressed stretch of the axis.
type tlGap struct {
	X, W  float64
	Label string // its length, roughly
	Title string
}

// tlLine is a vertical line across the lanes: a requeue.
type tlLine struct {
	X     float64
	Class string
	Title string
}

// legendItem is one entry of the legend: a swatch drawn with the same class
// as the timeline's element, and what it means.
type legendItem struct {
	Kind  string // rect, line, glyph, gap, vline
	Class string
	Glyph string
	Label string
}

const (
	tlWidth    = 1100.0
	tlLeft     = 170.0
	tlRight    = 12.0 // room after the axis for the last mark and label
	tlTop      = 22.0
	tlLane     = 26.0
	tlBarH     = 14.0
	maxDrawn   = 2000 // attempts drawn at most, whatever the caller passes (the run page passes its last 500)
	minBarSize = 2.0

	// gapWidth is the width of a compressed gap; a gap is compressed when it
	// is at least minGap long and takes at least gapShare of what the axis
	// would draw linearly, at most maxGaps of them.
	gapWidth = 44.0
	minGap   = time.Second
	gapShare = 0.2
	maxGaps  = 8

	charWidth = 6.2 // of an 11px label, roughly, to keep labels apart
)

// span is a stretch of time on the axis, linear or compressed.
type span struct {
	from, to time.Time
	x1, x2   float64
	gap      bool
}

// axis maps times to x.
type axis struct{ spans []span }

func (a axis) x(t time.Time) float64 {
	s := a.spans[0]
	if !t.After(s.from) {
		return s.x1
	}
	for _, s = range a.spans {
		if !t.After(s.to) {
			break
		}
	}
	if !t.Before(s.to) || !s.to.After(s.from) {
		return s.x2
	}
	return s.x1 + (s.x2-s.x1)*float64(t.Sub(s.from))/float64(s.to.Sub(s.from))
}

// interval is a stretch of time during which something happened (an
// attempt ran), or an instant (an event, a requeue): what a gap is not.
type interval struct{ from, to time.Time }

// newAxis lays [t0, t1] out on [x1, x2], compressing the long gaps between
// the busy intervals.
func newAxis(t0, t1 time.Time, busy []interval, x1, x2 float64) axis {
	slices.SortFunc(busy, func(a, b interval) int { return a.from.Compare(b.from) })
	var gaps []interval
	end := t0
	for _, b := range busy {
		if b.from.After(end) {
			gaps = append(gaps, interval{end, b.from})
		}
		if b.to.After(end) {
			end = b.to
		}
	}
	if t1.After(end) {
		gaps = append(gaps, interval{end, t1})
	}
	// The longest gaps first, while each still takes a good share of what
	// is left linear and is wider than a break would be.
	slices.SortFunc(gaps, func(a, b interval) int { return cmp.Compare(b.to.Sub(b.from), a.to.Sub(a.from)) })
	linear, px := t1.Sub(t0), x2-x1
	var cut []interval
	for _, g := range gaps {
		d := g.to.Sub(g.from)
		if len(cut) == maxGaps || d < minGap || float64(d) < gapShare*float64(linear) ||
			float64(d)/float64(linear)*(px-gapWidth) < 2*gapWidth {
			break
		}
		cut = append(cut, g)
		linear -= d
		px -= gapWidth
	}
	slices.SortFunc(cut, func(a, b interval) int { return a.from.Compare(b.from) })
	if linear <= 0 {
		linear = time.Nanosecond
	}
	scale := px / float64(linear)
	var a axis
	x, at := x1, t0
	for _, g := range cut {
		w := float64(g.from.Sub(at)) * scale
		a.spans = append(a.spans, span{from: at, to: g.from, x1: x, x2: x + w}, span{from: g.from, to: g.to, x1: x + w, x2: x + w + gapWidth, gap: true})
		x, at = x+w+gapWidth, g.to
	}
	a.spans = append(a.spans, span{from: at, to: t1, x1: x, x2: x2})
	return a
}

// buildTimeline lays out run's steps and attempts, its waits on limits
// (throttles) and its requeues (from audit); now is the database clock's
// reading of the page (for bars still running).
func (h *handler) buildTimeline(run record.Run, steps []record.Step, attempts []record.Attempt, audit []record.AuditEntry,
	throttles []record.UIThrottle, now time.Time) timeline {
	if len(attempts) > maxDrawn {
		attempts = attempts[len(attempts)-maxDrawn:]
	}
	running := !run.Status.Terminal()
	var requeues []record.AuditEntry
	for _, e := range audit {
		if e.Action == "requeue" && !e.At.Before(run.CreatedAt) {
			requeues = append(requeues, e)
		}
	}
	t0, t1, busy := timeSpan(run, steps, attempts, requeues, now)
	for _, th := range throttles {
		// A wait that ended is idle time: the axis holds it, and may break
		// it. One going on is what the run does now, drawn to scale as a
		// running attempt is.
		t0, t1 = minTime(t0, th.Began), maxTime(t1, th.Began)
		if th.Ended != nil {
			t1 = maxTime(t1, *th.Ended)
		} else if running {
			busy = append(busy, interval{th.Began, now})
		}
	}
	tl := timeline{W: tlWidth, Left: tlLeft}
	ax := newAxis(t0, t1, busy, tlLeft, tlWidth-tlRight)
	x := ax.x
	used := map[string]bool{}

	laneY := map[int]float64{}
	for i, s := range steps {
		y := tlTop + float64(i)*tlLane
		laneY[s.Step] = y
		label := fmt.Sprintf("%d %s", s.Step, s.Activity)
		if s.Kind != record.KindActivity {
			label = fmt.Sprintf("%d %s %s", s.Step, s.Kind, s.Activity)
		}
		tl.Lanes = append(tl.Lanes, lane{Y: y, Label: truncate(26, label),
			Title: fmt.Sprintf("step %d: %s %s, %s", s.Step, s.Kind, s.Activity, s.Status)})
		h.stepMarks(&tl, used, s, y, x, now)
	}
	if running {
		waitingLanes(&tl, laneY, throttles)
	}
	tl.H = tlTop + float64(max(len(tl.Lanes), 1))*tlLane + 8
	for _, s := range ax.spans {
		if s.gap {
			d := s.to.Sub(s.from)
			tl.Gaps = append(tl.Gaps, tlGap{X: s.x1, W: s.x2 - s.x1, Label: rounded(d),
				Title: fmt.Sprintf("%s from %s to %s, not to scale", dur(d), ts(s.from), ts(s.to))})
			used["gap"] = true
		}
	}
	for _, th := range throttles {
		if y, ok := laneY[th.Step]; ok {
			throttleBar(&tl, used, th, y, x, now, running)
		}
	}
	for _, a := range attempts {
		if y, ok := laneY[a.Step]; ok {
			h.attemptBar(&tl, used, a, y, x, now)
		}
	}
	fixed := requeueLines(&tl, used, requeues, x) // labels placed before the ticks, which give way to them
	for _, g := range tl.Gaps {
		fixed = append(fixed, tick{X: g.X + g.W/2, Label: g.Label, Anchor: "middle"})
	}
	tl.Ticks = ticks(ax, t0, fixed)
	if running {
		tl.NowX, tl.HasNow = x(now), true
	}
	tl.Legend = legendOf(used)
	return tl
}

// timeSpan is the time axis of run's timeline, from t0 to t1 (at least
// 10 ms), and the moments something happened in it (busy): the ends of the
// run, of its steps and attempts (those still running end now), its
// requeues, and, while it runs, now and its steps' due times.
func timeSpan(run record.Run, steps []record.Step, attempts []record.Attempt, requeues []record.AuditEntry, now time.Time) (t0, t1 time.Time, busy []interval) {
	running := !run.Status.Terminal()
	t0, t1 = run.CreatedAt, run.CreatedAt
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
	busy = []interval{{run.CreatedAt, run.CreatedAt}}
	point := func(t time.Time) {
		if !t.IsZero() {
			extend(t)
			busy = append(busy, interval{t, t})
		}
	}
	if run.FinishedAt != nil {
		point(*run.FinishedAt)
	}
	for _, s := range steps {
		point(s.FirstStartedAt)
		if s.FinishedAt != nil {
			point(*s.FinishedAt)
		}
		if s.DueAt != nil && running {
			extend(*s.DueAt)
		}
	}
	for _, a := range attempts {
		end := now
		if a.EndedAt != nil {
			end = *a.EndedAt
			if a.Delay != nil {
				extend(end.Add(*a.Delay))
			}
		}
		extend(a.StartedAt)
		extend(end)
		busy = append(busy, interval{a.StartedAt, end})
	}
	for _, e := range requeues {
		point(e.At)
	}
	if running {
		point(now)
	}
	// The axis fits the run, however short: a run of 50 ms fills it too.
	if t1.Sub(t0) < 10*time.Millisecond {
		t1 = t0.Add(10 * time.Millisecond)
	}
	return t0, t1, busy
}

// waitingLanes adds a lane for each step that waits on a limit and has no
// lane: a step denied at its first attempt has no row yet.
func waitingLanes(tl *timeline, laneY map[int]float64, throttles []record.UIThrottle) {
	for _, th := range throttles {
		if _, ok := laneY[th.Step]; ok || th.Ended != nil {
			continue
		}
		y := tlTop + float64(len(tl.Lanes))*tlLane
		laneY[th.Step] = y
		tl.Lanes = append(tl.Lanes, lane{Y: y, Label: truncate(26, fmt.Sprintf("%d waits on %s", th.Step, th.Downstream)),
			Title: fmt.Sprintf("step %d: not started, waiting on downstream %s", th.Step, th.Downstream)})
	}
}

// throttleBar draws a wait of a step on a limit in its lane at y: from its
// first denial to the start of the attempt it waited for, or to now while
// the run waits (a wait left open by a run that ended is not drawn).
func throttleBar(tl *timeline, used map[string]bool, th record.UIThrottle, y float64, x func(time.Time) float64, now time.Time, running bool) {
	end := now
	title := fmt.Sprintf("waits on downstream %s (%s) since %s, %s", th.Downstream, th.Cause, ts(th.Began), plural(th.Denials, "denial"))
	if th.Ended != nil {
		end = *th.Ended
		title = fmt.Sprintf("waited %s on downstream %s (%s, %s)", dur(end.Sub(th.Began)), th.Downstream, th.Cause, plural(th.Denials, "denial"))
		if th.Attempt > 0 {
			title += fmt.Sprintf(" before attempt %d", th.Attempt)
		}
	} else if !running {
		return
	}
	used["k-throttle"] = true
	mid := y + tlLane/2 - 4
	tl.Bars = append(tl.Bars, tlBar{X: x(th.Began), Y: mid - 3, W: max(x(end)-x(th.Began), minBarSize), H: 6,
		Class: "k-throttle", Title: title})
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// attemptBar draws attempt a in its step's lane at y: its bar, its marks
// (a rescue, a lost attempt) and the delay before the next attempt.
func (h *handler) attemptBar(tl *timeline, used map[string]bool, a record.Attempt, y float64, x func(time.Time) float64, now time.Time) {
	end := now
	if a.EndedAt != nil {
		end = *a.EndedAt
	}
	x1, x2 := x(a.StartedAt), x(end)
	class := "a-" + string(a.Status)
	used[class] = true
	if !a.InBudget {
		class += " old"
		used["old"] = true
	}
	tl.Bars = append(tl.Bars, tlBar{X: x1, Y: y + (tlLane-tlBarH)/2 - 4, W: max(x2-x1, minBarSize), H: tlBarH,
		Class: class, Title: attemptTitle(a, end), Href: h.traceLink(a)})
	if a.Rescue {
		used["m-rescue"] = true
		tl.Marks = append(tl.Marks, tlMark{X: x1, Y: y - 6, Class: "m-rescue", Glyph: "R",
			Title: fmt.Sprintf("attempt %d is a rescue (epoch %d, worker %s)", a.Attempt, a.Epoch, a.Worker)})
	}
	if a.Status == record.AttemptLost {
		used["m-lost"] = true
		tl.Marks = append(tl.Marks, tlMark{X: x2, Y: y - 6, Class: "m-lost", Glyph: "✕",
			Title: fmt.Sprintf("attempt %d lost: its lease expired while it ran (epoch %d, worker %s)", a.Attempt, a.Epoch, a.Worker)})
	}
	if a.Delay != nil && a.EndedAt != nil && *a.Delay > 0 {
		src := a.DelaySource
		if src == "" {
			src = "policy"
		}
		used["d-"+src] = true
		tl.Delays = append(tl.Delays, tlDelay{X1: x2, X2: max(x(a.EndedAt.Add(*a.Delay)), x2+minBarSize), Y: y + tlLane/2 - 4,
			Class: "d-" + src, Title: fmt.Sprintf("delay %s after attempt %d, from %s", dur(*a.Delay), a.Attempt, src)})
	}
}

// attemptTitle is the tooltip of attempt a's bar, which ends at end.
func attemptTitle(a record.Attempt, end time.Time) string {
	title := fmt.Sprintf("step %d attempt %d: %s, %s\nstarted %s\nepoch %d, worker %s", a.Step, a.Attempt, a.Status,
		dur(end.Sub(a.StartedAt)), ts(a.StartedAt), a.Epoch, a.Worker)
	if !a.InBudget {
		title += "\nbefore a requeue: not charged to the budget"
	}
	if a.Rescue {
		title += "\nrescue: follows a lost attempt"
	}
	if a.ErrorMessage != "" {
		title += "\n" + errorText(a.ErrorType, truncate(200, a.ErrorMessage))
	}
	if a.Delay != nil {
		title += fmt.Sprintf("\nnext attempt after %s (%s)", dur(*a.Delay), a.DelaySource)
	}
	return title
}

// requeueLines draws a line and a mark at each requeue and returns their
// labels on the time axis.
func requeueLines(tl *timeline, used map[string]bool, requeues []record.AuditEntry, x func(time.Time) float64) []tick {
	var fixed []tick
	for _, e := range requeues {
		title := fmt.Sprintf("requeued %s by %s", ts(e.At), e.Actor)
		if e.Note != "" {
			title += ": " + e.Note
		}
		tl.Lines = append(tl.Lines, tlLine{X: x(e.At), Class: "requeue", Title: title})
		tl.Marks = append(tl.Marks, tlMark{X: x(e.At), Y: 11, Class: "m-requeue", Glyph: "↻", Title: title})
		fixed = append(fixed, tick{X: x(e.At), Label: "↻", Anchor: "middle"})
		used["requeue"] = true
	}
	return fixed
}

// rounded is d in one unit, rounded to the nearest: "10m" for 9m59.8s.
func rounded(d time.Duration) string {
	switch {
	case d < time.Minute:
		return roughly(d.Round(time.Second))
	case d < time.Hour:
		return roughly(d.Round(time.Minute))
	case d < 48*time.Hour:
		return roughly(d.Round(time.Hour))
	}
	return roughly(d.Round(24 * time.Hour))
}

// ticks labels the axis: its start (the time, written left of the axis,
// over the lane labels), its end, the start of each stretch after a gap,
// and evenly spaced times in between where they fit, each as an offset from
// the start to the precision its stretch needs. No label overlaps another,
// or the labels of fixed (drawn elsewhere: the gaps' lengths, the
// requeues), and none runs past either end of the timeline.
func ticks(ax axis, t0 time.Time, fixed []tick) []tick {
	type box struct{ from, to float64 }
	boxOf := func(t tick) box {
		w := float64(len([]rune(t.Label))) * charWidth
		switch t.Anchor {
		case "start":
			return box{t.X, t.X + w}
		case "end":
			return box{t.X - w, t.X}
		}
		return box{t.X - w/2, t.X + w/2}
	}
	var taken []box
	for _, f := range fixed {
		taken = append(taken, boxOf(f))
	}
	first, last := ax.spans[0], ax.spans[len(ax.spans)-1]
	out := []tick{{X: first.x1, TextX: first.x1 - 6, Label: ts(t0), Anchor: "end"}}
	seen := map[string]bool{}
	place := func(t tick) {
		if t.Anchor == "" {
			t.Anchor = "middle"
		}
		b := boxOf(t)
		if b.from < first.x1 { // the time of the start is written there
			t.Anchor, b = "start", boxOf(tick{X: t.X, Label: t.Label, Anchor: "start"})
		}
		if b.to > tlWidth {
			t.Anchor, b = "end", boxOf(tick{X: t.X, Label: t.Label, Anchor: "end"})
		}
		if seen[t.Label] {
			return
		}
		for _, o := range taken {
			if b.from < o.to+8 && o.from < b.to+8 {
				return
			}
		}
		taken = append(taken, b)
		seen[t.Label] = true
		t.TextX = t.X
		out = append(out, t)
	}
	label := func(t time.Time, s span) string { return "+" + t.Sub(t0).Round(precision(s.to.Sub(s.from))).String() }
	place(tick{X: last.x2, Label: label(last.to, last), Anchor: "end"})
	for _, s := range ax.spans[1:] {
		if !s.gap {
			place(tick{X: s.x1, Label: label(s.from, s)})
		}
	}
	for _, s := range ax.spans {
		if s.gap || s.x2-s.x1 < 60 {
			continue
		}
		n := int((s.x2 - s.x1) / 150) // a tick every 150 px or so
		for i := 1; i < n; i++ {
			at := s.from.Add(s.to.Sub(s.from) * time.Duration(i) / time.Duration(n))
			place(tick{X: ax.x(at), Label: label(at, s)})
		}
	}
	slices.SortFunc(out, func(a, b tick) int { return cmp.Compare(a.X, b.X) })
	return out
}

// precision is the unit offsets in a stretch of length d are rounded to:
// the power of ten (from a microsecond to a second) at most a hundredth of
// it.
func precision(d time.Duration) time.Duration {
	p := time.Second
	for p > time.Microsecond && p > d/100 {
		p /= 10
	}
	return p
}

// legend is every entry the legend can have, in its order.
var legend = []legendItem{
	{Kind: "rect", Class: "a-succeeded", Label: "succeeded"},
	{Kind: "rect", Class: "a-failed", Label: "failed"},
	{Kind: "rect", Class: "a-timed_out", Label: "timed out"},
	{Kind: "rect", Class: "a-lost", Label: "lost"},
	{Kind: "rect", Class: "a-interrupted", Label: "interrupted"},
	{Kind: "rect", Class: "a-cancelled", Label: "cancelled"},
	{Kind: "rect", Class: "a-snoozed", Label: "snoozed"},
	{Kind: "rect", Class: "a-running", Label: "running"},
	{Kind: "rect", Class: "a-failed old", Label: "before a requeue"},
	{Kind: "glyph", Class: "m-lost", Glyph: "✕", Label: "lost attempt"},
	{Kind: "glyph", Class: "m-rescue", Glyph: "R", Label: "rescue"},
	{Kind: "line", Class: "d-policy", Label: "delay (policy)"},
	{Kind: "line", Class: "d-jitter", Label: "delay (jitter)"},
	{Kind: "line", Class: "d-retry-after", Label: "delay (Retry-After)"},
	{Kind: "line", Class: "d-deadline", Label: "delay (deadline)"},
	{Kind: "rect", Class: "k-sleep", Label: "sleep"},
	{Kind: "rect", Class: "k-wait", Label: "wait for a signal"},
	{Kind: "rect", Class: "k-child", Label: "child run"},
	{Kind: "rect", Class: "k-throttle", Label: "wait on a limit"},
	{Kind: "glyph", Class: "m-signal", Glyph: "◆", Label: "signal"},
	{Kind: "glyph", Class: "m-event", Glyph: "●", Label: "event, now, side effect, patch"},
	{Kind: "vline", Class: "requeue", Label: "requeue ↻"},
	{Kind: "gap", Class: "gap", Label: "gap, not to scale"},
}

// legendOf returns the entries of the legend for what was drawn: used
// holds the classes of the elements.
func legendOf(used map[string]bool) []legendItem {
	var out []legendItem
	for _, it := range legend {
		key := it.Class
		if key == "a-failed old" {
			key = "old"
		}
		if used[key] {
			out = append(out, it)
		}
	}
	return out
}

// stepMarks draws the steps of other kinds than activity.
func (h *handler) stepMarks(tl *timeline, used map[string]bool, s record.Step, y float64, x func(time.Time) float64, now time.Time) {
	mid := y + tlLane/2 - 4
	end := now
	if s.FinishedAt != nil {
		end = *s.FinishedAt
	}
	switch s.Kind {
	case record.KindSleep:
		due := end
		if s.DueAt != nil {
			due = *s.DueAt
		}
		title := fmt.Sprintf("sleep until %s", ts(due))
		if s.FinishedAt != nil {
			title += ", woke " + ts(*s.FinishedAt)
		}
		used["k-sleep"] = true
		tl.Bars = append(tl.Bars, tlBar{X: x(s.FirstStartedAt), Y: mid - 4, W: max(x(due)-x(s.FirstStartedAt), minBarSize), H: 8,
			Class: "k-sleep", Title: title})
		tl.Marks = append(tl.Marks, tlMark{X: x(due), Y: mid + 4, Class: "m-sleep", Glyph: "z", Title: title})
	case record.KindSignal:
		title := fmt.Sprintf("wait for signal %q", s.Activity)
		if s.SignalID != 0 {
			title += fmt.Sprintf(": received signal #%d at %s", s.SignalID, ts(end))
		} else if s.DueAt != nil {
			title += ", timeout " + ts(*s.DueAt)
		}
		used["k-wait"], used["m-signal"] = true, true
		tl.Bars = append(tl.Bars, tlBar{X: x(s.FirstStartedAt), Y: mid - 1, W: max(x(end)-x(s.FirstStartedAt), minBarSize), H: 2,
			Class: "k-wait", Title: title})
		tl.Marks = append(tl.Marks, tlMark{X: x(end), Y: mid + 4, Class: "m-signal", Glyph: "◆", Title: title})
	case record.KindChild:
		title := fmt.Sprintf("child run %s (%s): %s", s.ChildRunID, s.Activity, s.ChildStatus)
		href := ""
		if s.ChildRunID != [16]byte{} {
			href = "../runs/" + s.ChildRunID.String() // the timeline is drawn on runs/{id}
		}
		used["k-child"] = true
		tl.Bars = append(tl.Bars, tlBar{X: x(s.FirstStartedAt), Y: mid - 4, W: max(x(end)-x(s.FirstStartedAt), minBarSize), H: 8,
			Class: "k-child c-" + string(s.ChildStatus), Title: title, Href: href})
	case record.KindEvent, record.KindNow, record.KindSideEffect, record.KindPatch:
		used["m-event"] = true // one entry of the legend for the four
		tl.Marks = append(tl.Marks, tlMark{X: x(s.FirstStartedAt), Y: mid + 4, Class: "m-" + string(s.Kind), Glyph: "●",
			Title: fmt.Sprintf("%s %s at %s", s.Kind, s.Activity, ts(s.FirstStartedAt))})
	}
}

// traceLink is the attempt's trace URL, or "" without TraceURL or IDs.
func (h *handler) traceLink(a record.Attempt) string {
	if h.cfg.TraceURL == "" || a.TraceID == "" {
		return ""
	}
	return strings.NewReplacer("{trace_id}", url.QueryEscape(a.TraceID), "{span_id}", url.QueryEscape(a.SpanID)).Replace(h.cfg.TraceURL)
}
