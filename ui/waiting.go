package ui

import (
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
)

// waiting is what a run that is not running an attempt waits for, in the
// words of the run page: a sleep until a time, a signal, a child run, the
// end of a backoff after a failed attempt, its due time, a worker, and
// whether any live worker serves its workflow on its queue at all; or a
// downstream's limit (runs.waiting_for 'limit:<downstream>'), with the
// cause of its step's last denial.
type waiting struct {
	// Kind is sleep, signal, child, backoff, due (not before a time it was
	// given), turn (due now: the next free worker takes it) or limit.
	Kind  string
	Until time.Time // the sleep's or backoff's end, the signal's timeout, the due time; zero: none
	Step  int
	Name  string // the signal's name; the activity of a backoff; the downstream of a limit

	// Cause, Since and Denials are a limit's wait: the cause of its last
	// denial (a flow.Cause* constant; "" when its throttle was not read),
	// its first denial and how many; Path is the downstream's name as a
	// link's path segment.
	Cause   string
	Since   time.Time
	Denials int
	Path    string
	// Woken is set for a limit's wait that is over (a slot given back, the
	// rate's time come): the run is due and waits for a free worker.
	Woken bool

	Child       uuid.UUID
	ChildName   string // its workflow
	ChildStatus record.RunStatus

	// Attempt, Error, Delay and Source are the failed attempt a backoff
	// follows, and the delay chosen after it.
	Attempt int
	Error   string
	Delay   time.Duration
	Source  string
	// Held is set for a backoff the worker that holds the run sleeps
	// (short delays), rather than one the run waits for queued.
	Held bool

	// Unserved: no live worker serves Workflow on Queue, so the run waits
	// for one to start even once it is due.
	Unserved        bool
	Build           string // with Unserved: the build the run is pinned to, of which no worker is live
	Workflow, Queue string
}

// Due reports whether the wait is over and the run waits for a worker only.
func (w waiting) Due() bool { return w.Kind == "turn" }

// waitingFor says what run waits for, from its row, its steps and
// attempts, its waits on limits (throttles) and the (workflow, queue)
// pairs no live worker serves; nil for a run that is finished, or running
// an attempt or its workflow code.
func waitingFor(run record.Run, steps []record.Step, attempts []record.Attempt, throttles []record.UIThrottle, orphans []record.Orphans, now time.Time) *waiting {
	switch run.Status {
	case record.RunQueued, record.RunRunning:
	default:
		return nil
	}
	w := &waiting{Workflow: run.Workflow, Queue: run.Queue}
	if run.Status == record.RunQueued {
		for _, o := range orphans {
			if o.Workflow == run.Workflow && o.Queue == run.Queue && o.Build == run.PinnedTo {
				w.Unserved, w.Build = true, o.Build
			}
		}
	}
	var last *record.Attempt // the latest attempt to start
	for i := range attempts {
		if last == nil || attempts[i].StartedAt.After(last.StartedAt) {
			last = &attempts[i]
		}
	}
	backoff := func() bool {
		if last == nil || last.EndedAt == nil || last.Delay == nil || *last.Delay <= 0 ||
			(last.Status != record.AttemptFailed && last.Status != record.AttemptTimedOut) {
			return false
		}
		for _, s := range steps {
			if s.Step == last.Step && s.Status != record.StepRunning {
				return false // the step ended since: no attempt follows
			}
		}
		w.Kind, w.Step, w.Name, w.Attempt = "backoff", last.Step, last.Activity, last.Attempt
		w.Error, w.Delay, w.Source = errorText(last.ErrorType, truncate(160, last.ErrorMessage)), *last.Delay, last.DelaySource
		w.Until = last.EndedAt.Add(*last.Delay)
		return true
	}
	if run.Status == record.RunRunning {
		if last != nil && last.EndedAt != nil && backoff() && w.Until.After(now) {
			w.Held = true
			return w
		}
		return nil // an attempt, or the workflow's own code, runs
	}
	if ds, ok := strings.CutPrefix(run.WaitingFor, "limit:"); ok {
		w.limit(ds, run.RunAfter, throttles, now)
		return w
	}
	wait := operator.WaitingFor(run) // what the run's row says; the steps and attempts say more
	waitStep := func(k record.StepKind) {
		for _, s := range steps {
			if s.Kind == k && s.Status == record.StepWaiting {
				w.Step = s.Step
				if k == record.KindChild {
					w.ChildName, w.ChildStatus = s.Activity, s.ChildStatus
				}
			}
		}
	}
	switch wait.Kind {
	case operator.WaitSleep:
		w.Kind, w.Until = "sleep", wait.Until
		waitStep(record.KindSleep)
	case operator.WaitSignal:
		w.Kind, w.Name, w.Until = "signal", wait.Signal, wait.Until
		waitStep(record.KindSignal)
	case operator.WaitChild:
		w.Kind, w.Until, w.Child = "child", wait.Until, wait.Child
		waitStep(record.KindChild)
	default: // operator.WaitDue
		switch {
		case wait.Until.After(now) && backoff():
			w.Until = wait.Until // the durable backoff: the run is due then
		case wait.Until.After(now):
			w.Kind, w.Until = "due", wait.Until
		default:
			w.Kind, w.Until = "turn", wait.Until
		}
	}
	return w
}

// limit makes w the wait of a run on downstream ds, due at due (zero:
// when a release wakes it), told by its step's open throttle.
func (w *waiting) limit(ds string, due time.Time, throttles []record.UIThrottle, now time.Time) {
	w.Kind, w.Name, w.Path, w.Until = "limit", ds, url.PathEscape(ds), due
	w.Woken = !due.IsZero() && !due.After(now)
	for _, t := range throttles {
		if t.Ended == nil && t.Downstream == ds {
			w.Step, w.Cause, w.Since, w.Denials = t.Step, t.Cause, t.Began, t.Denials
		}
	}
}
