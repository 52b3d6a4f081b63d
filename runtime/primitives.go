package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/engine"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// The durable primitives (engine.Executor): sleeps, signals, events,
// recorded values and children. Each is a step of its own kind, numbered
// with the activities' steps, recorded once and replayed from its record.
// A wait that cannot be served in process releases the lease: the run waits
// queued (runs.waiting_for says for what) until its due time, a send, its
// child's end or a cancel makes it due, and is replayed from its steps.

// next takes the next step number for a step of kind named name, and
// returns its record if it has one. A record of another kind or name is
// nondeterminism: the run fails and the goroutine ends.
func (e *execution) next(kind store.StepKind, name string) (int, store.Step, bool) {
	e.nextStep++
	n := e.nextStep
	rec, seen := e.steps[n]
	for seen && kindOf(rec) == store.KindPatch { // a patch the code no longer asks about: passed over
		e.nextStep++
		n = e.nextStep
		rec, seen = e.steps[n]
	}
	if seen && (kindOf(rec) != kind || rec.Activity != name) {
		e.failRun(store.Failure{
			Reason:       sdk.ReasonNondeterminism,
			Step:         n,
			Activity:     name,
			ErrorMessage: fmt.Sprintf("step %d was recorded as %s %q but the workflow now calls %s %q: workflow code changed or is not deterministic", n, kindOf(rec), rec.Activity, kind, name),
			ErrorType:    "tenure.Nondeterminism",
		})
		exit()
	}
	return n, rec, seen
}

// inputChanged handles a recorded step n, of activity or child workflow
// name (what says which), that the replay calls with another input than it
// recorded (the hashes recorded and now): by the workflow's
// sdk.InputCheck, the run fails with reason nondeterminism and the
// goroutine ends, or the difference is logged and the step replayed from
// its record.
func (e *execution) inputChanged(n int, name, what string, recorded, now uint64) {
	if ic, ok := e.w.workflowFor(e.claim.Workflow).(sdk.InputChecked); ok && ic.InputCheck() == sdk.InputCheckWarn {
		e.log.Warn("tenure: replayed step called with another input than it recorded; replaying it from its record (the workflow's input check warns)",
			"step", n, "what", what, "recorded_input_hash", fmt.Sprintf("%016x", recorded), "input_hash", fmt.Sprintf("%016x", now))
		return
	}
	e.failRun(store.Failure{
		Reason:   sdk.ReasonNondeterminism,
		Step:     n,
		Activity: name,
		ErrorMessage: fmt.Sprintf("step %d (%s) was recorded with input hash %016x but the workflow now calls it with input hash %016x: "+
			"the workflow computes the step's input differently (code changed, or not deterministic); sdk.WithInputCheck(sdk.InputCheckWarn) replays such steps from their records", n, what, recorded, now),
		ErrorType: "tenure.Nondeterminism",
	})
	exit()
}

// RunKey implements engine.Executor: the key the run was claimed with.
func (e *execution) RunKey() string { return e.claim.Key }

// Patched implements engine.Executor. A patch's record is a step of its
// own, written with the run's next write (deferMark): a crash before it
// leaves no record, and the replay reaches this point first again. A
// recorded patch of another ID is one this call does not ask about, passed
// over while looking for id's; when the answer is the old branch, those
// records are left to the calls that do ask (if Patched("v3") ... else if
// Patched("v2") ...), or to next.
func (e *execution) Patched(ctx context.Context, id string, deprecated bool) bool {
	at := e.nextStep
	for {
		n := e.nextStep + 1
		rec, seen := e.steps[n]
		switch {
		case !seen: // first here: the new branch
			if !deprecated {
				e.nextStep = n
				e.deferMark(&store.StepMark{Step: n, Kind: store.KindPatch, Name: id, Status: store.StepCompleted})
				e.steps[n] = store.Step{Step: n, Kind: store.KindPatch, Activity: id, Status: store.StepCompleted}
			}
			return true
		case kindOf(rec) != store.KindPatch: // recorded here before the patch: the old branch
			e.nextStep = at
			return false
		case rec.Activity == id:
			e.nextStep = n
			return true
		default:
			e.nextStep = n
		}
	}
}

// kindOf is a step's kind; records from before kinds existed are activities.
func kindOf(s store.Step) store.StepKind {
	if s.Kind == "" {
		return store.KindActivity
	}
	return s.Kind
}

// cancelled returns the error a step sees when the run's cancellation was
// requested and ctx is not detached (sdk.Detached), else nil.
func (e *execution) cancelled(ctx context.Context, what string, n int) error {
	if !e.cancelReq.Load() || engine.Detached(ctx) {
		return nil
	}
	return fmt.Errorf("%s (step %d): %w", what, n, sdk.ErrCancelled)
}

// requestCancel is the run's Cancel, heard by this worker: the workflow's
// context is cancelled with sdk.ErrCancelled as its cause, which cancels the
// running activity (its context derives from it) and any wait in process.
func (e *execution) requestCancel() {
	if e.cancelReq.CompareAndSwap(false, true) {
		e.log.Info("tenure: run cancelled; stopping its activity and letting the workflow clean up")
		e.wcancel(sdk.ErrCancelled)
	}
}

// shortSleep is the longest sleep recorded after it is slept (with the run's
// next write) rather than before.
const shortSleep = 100 * time.Millisecond

// Sleep implements engine.Executor.
func (e *execution) Sleep(ctx context.Context, d time.Duration, until time.Time) error {
	n, rec, seen := e.next(store.KindSleep, string(store.KindSleep))
	if seen && rec.Status == store.StepCompleted {
		return nil
	}
	if err := e.cancelled(ctx, "sleep", n); err != nil {
		return err
	}
	if !seen && until.IsZero() && d <= shortSleep {
		// A short sleep is recorded with the run's next write, after the
		// fact: a commit before it would cost more than the sleep. A crash
		// during it (which costs the run a lease TTL before its rescue)
		// replays it in full: at most shortSleep more.
		began := time.Now()
		// Handed over at shutdown, it is recorded waiting with its due
		// time, which the next worker keeps.
		waiting := &store.StepMark{Step: n, Kind: store.KindSleep, Name: string(store.KindSleep),
			Status: store.StepWaiting, Due: d, Began: began}
		if err := e.sleepInProcess(ctx, d, store.Write{Mark: waiting, Release: &store.Release{WaitFor: "sleep", UntilStep: n}}); err != nil {
			return fmt.Errorf("sleep (step %d): %w", n, err)
		}
		e.deferMark(&store.StepMark{Step: n, Kind: store.KindSleep, Name: string(store.KindSleep),
			Status: store.StepCompleted, Due: d, Began: began, Woke: time.Now()})
		return nil
	}
	var left time.Duration
	if seen {
		left = rec.DueIn - time.Since(e.loadedAt)
	} else {
		// The due time is fixed now, by the database clock, before the
		// sleep begins: a replay never extends it.
		res := e.mustWrite(store.Write{Mark: &store.StepMark{
			Step: n, Kind: store.KindSleep, Name: string(store.KindSleep), Status: store.StepWaiting, Due: d, DueAt: until,
		}}, "record sleep")
		left = res.Marked.DueIn
		e.steps[n] = store.Step{Step: n, Kind: store.KindSleep, Activity: string(store.KindSleep), Status: store.StepWaiting}
	}
	if left > e.w.cfg.MaxInProcessSleep {
		e.suspend(store.Release{WaitFor: "sleep", UntilStep: n}, "sleep", left)
	}
	if left > 0 {
		if err := e.sleepInProcess(ctx, left, store.Write{Release: &store.Release{WaitFor: "sleep", UntilStep: n}}); err != nil {
			return fmt.Errorf("sleep (step %d): %w", n, err)
		}
	}
	// The wake is recorded with the run's next write: a crash before it
	// finds the sleep due on replay, which is the same.
	e.deferMark(&store.StepMark{Step: n, Kind: store.KindSleep, Name: string(store.KindSleep), Status: store.StepCompleted})
	return nil
}

// sleepInProcess waits d with the lease held. At shutdown the run is handed
// over with the write handover (its wait recorded, its lease released); a
// cancel returns sdk.ErrCancelled (unless ctx is detached); a lost lease
// ends the goroutine.
func (e *execution) sleepInProcess(ctx context.Context, d time.Duration, handover store.Write) error {
	if engine.Detached(ctx) {
		ctx = e.ctx // a lost lease or a shutdown still ends the wait
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-e.w.stopClaim:
		e.handBack(handover, "shutdown during a durable wait")
	case <-ctx.Done():
		switch context.Cause(ctx) {
		case sdk.ErrCancelled:
			return sdk.ErrCancelled
		case errShutdown:
			e.handBack(handover, "interrupted during a durable wait")
		default:
			e.lose("lease lost during a durable wait")
		}
	}
	exit()
	panic("unreachable")
}

// suspend releases the lease for a durable wait and ends the goroutine.
// due is how long until the run is due again (a sleep's due time, a
// receive's timeout; 0 for none): a worker's poll would find it up to a
// PollInterval late, so a near one is woken at its time (wakeAt).
func (e *execution) suspend(rel store.Release, what string, due ...time.Duration) {
	e.park(rel, "suspend run ("+what+")", due...)
	exit()
}

// park releases the lease for a durable wait (what names the write, for a
// failure's log), waking the run at due when there is one (see suspend).
func (e *execution) park(rel store.Release, what string, due ...time.Duration) {
	e.ending.Store(true)
	if _, err := e.write(store.Write{Release: &rel}); err != nil {
		e.writeFailed(what, err)
		return
	}
	if len(due) > 0 {
		e.w.wakeAt(due[0])
	}
	e.w.suspended.Add(1)
	e.end = SegmentEnd{Outcome: SegmentSuspended}
}

// Receive implements engine.Executor.
func (e *execution) Receive(ctx context.Context, name string, timeout time.Duration) ([]byte, error) {
	n, rec, seen := e.next(store.KindSignal, name)
	timedOut := &sdk.TimeoutError{What: fmt.Sprintf("signal %q", name)}
	if seen {
		switch rec.Status {
		case store.StepCompleted:
			return rec.Output, nil
		case store.StepFailed:
			return nil, timedOut
		}
	}
	if err := e.cancelled(ctx, fmt.Sprintf("receive signal %q", name), n); err != nil {
		return nil, err
	}
	// One statement consumes the oldest pending signal of the name with the
	// step's record, or records the step waiting (its timeout fixed at the
	// first execution), or timed out.
	res := e.mustWrite(store.Write{Receive: &store.SignalReceive{Step: n, Name: name, Timeout: timeout}}, "receive signal")
	m := res.Marked
	e.steps[n] = store.Step{Step: n, Kind: store.KindSignal, Activity: name, Status: m.Status, Output: m.Output}
	switch m.Status {
	case store.StepCompleted:
		return m.Output, nil
	case store.StepFailed:
		return nil, timedOut
	}
	// None yet: wait without the lease. A send wakes the run at once; a
	// send that committed before this release is seen by it (the release
	// wakes the run again at once).
	due := time.Duration(0)
	if m.DueIn != store.NoDue {
		due = m.DueIn
	}
	e.suspend(store.Release{WaitFor: "signal:" + name, UntilStep: n}, "signal", due)
	panic("unreachable")
}

// SetEvent implements engine.Executor.
func (e *execution) SetEvent(ctx context.Context, key string, value []byte) error {
	n, _, seen := e.next(store.KindEvent, key)
	if seen {
		return nil
	}
	if err := e.payloadOK(value, fmt.Sprintf("event %q", key)); err != nil {
		return err
	}
	e.mustWrite(store.Write{SetEvent: &store.EventSet{Step: n, Key: key, Value: value}}, "set event")
	e.steps[n] = store.Step{Step: n, Kind: store.KindEvent, Activity: key, Status: store.StepCompleted}
	return nil
}

// Record implements engine.Executor.
func (e *execution) Record(ctx context.Context, kind string, fn func() ([]byte, error)) ([]byte, error) {
	k := store.StepKind(kind)
	n, rec, seen := e.next(k, kind)
	if seen && rec.Status == store.StepCompleted {
		return rec.Output, nil
	}
	var out []byte
	if fn != nil {
		var err error
		if out, err = fn(); err == nil {
			err = e.payloadOK(out, kind)
		}
		if err != nil {
			// Nothing recorded, and the step number is given back: a call
			// that fails leaves no trace, now as on a replay, where the
			// function may succeed and the workflow go on from this step.
			e.nextStep--
			return nil, err
		}
	}
	res := e.mustWrite(store.Write{Mark: &store.StepMark{Step: n, Kind: k, Name: kind, Status: store.StepCompleted, Output: out}}, "record "+kind)
	e.steps[n] = store.Step{Step: n, Kind: k, Activity: kind, Status: store.StepCompleted, Output: res.Marked.Output}
	return res.Marked.Output, nil
}

// payloadOK checks a value the workflow records against what the table
// takes.
func (e *execution) payloadOK(b []byte, what string) error {
	switch {
	case len(b) > e.w.cfg.MaxPayload:
		return fmt.Errorf("%s is %d bytes, limit %d: %w", what, len(b), e.w.cfg.MaxPayload, sdk.ErrPayloadTooLarge)
	case hasNULEscape(b):
		return fmt.Errorf("%s holds a NUL character (\\u0000), which PostgreSQL's jsonb cannot store", what)
	}
	return nil
}

// StartChild implements engine.Executor.
func (e *execution) StartChild(ctx context.Context, workflow string, input []byte, queue string, priority int) (uuid.UUID, int, error) {
	n, rec, seen := e.next(store.KindChild, workflow)
	id := store.ChildID(e.claim.ID, n)
	hash := store.InputHash(input)
	if seen && rec.InputHash != 0 && rec.InputHash != hash {
		e.inputChanged(n, workflow, fmt.Sprintf("child of workflow %q", workflow), rec.InputHash, hash)
	}
	if seen {
		if rec.Child != nil {
			id = rec.Child.ID
		}
		return id, n, nil
	}
	if err := e.cancelled(ctx, fmt.Sprintf("start child %q", workflow), n); err != nil {
		return uuid.Nil, n, err
	}
	if err := e.payloadOK(input, fmt.Sprintf("child %q input", workflow)); err != nil {
		return uuid.Nil, n, err
	}
	e.mustWrite(store.Write{StartChild: &store.ChildStart{
		Step: n, ID: id, Workflow: workflow, Queue: queue, Priority: priority, Input: input, Traceparent: e.claim.Traceparent,
		InputHash: hash,
	}}, "start child")
	e.steps[n] = store.Step{Step: n, Kind: store.KindChild, Activity: workflow, Status: store.StepWaiting,
		Child: &store.ChildState{ID: id, Status: store.RunQueued}}
	return id, n, nil
}

// AwaitChild implements engine.Executor.
func (e *execution) AwaitChild(ctx context.Context, step int) ([]byte, error) {
	rec, ok := e.steps[step]
	if !ok || kindOf(rec) != store.KindChild {
		return nil, fmt.Errorf("step %d started no child in this run", step)
	}
	switch rec.Status {
	case store.StepCompleted:
		return rec.Output, nil
	case store.StepFailed:
		return nil, childError(rec)
	}
	if err := e.cancelled(ctx, fmt.Sprintf("wait for child %q", rec.Activity), step); err != nil {
		return nil, err
	}
	var c store.ChildState
	if rec.Child != nil {
		c = *rec.Child
	}
	if c.ID == uuid.Nil {
		c.ID = store.ChildID(e.claim.ID, step)
	}
	// A child not known to have ended is waited for: the suspension wakes
	// the run again at once when the child ended before it committed.
	if !c.Status.Terminal() {
		e.suspend(store.Release{WaitFor: "child:" + c.ID.String(), UntilStep: step}, "child")
	}
	mark := &store.StepMark{Step: step, Kind: store.KindChild, Name: rec.Activity, Status: store.StepCompleted, Output: c.Output}
	if c.Status != store.RunCompleted {
		mark.Status, mark.Output = store.StepFailed, nil
		mark.Reason, mark.ErrorMessage, mark.ErrorType = string(c.Reason), c.ErrorMessage, c.ErrorType
		if c.Status == store.RunCancelled {
			mark.Reason = string(sdk.ReasonCancelled)
		}
	}
	e.mustWrite(store.Write{Mark: mark}, "record child's end")
	done := store.Step{Step: step, Kind: store.KindChild, Activity: rec.Activity, Status: mark.Status, Output: mark.Output,
		Reason: sdk.Reason(mark.Reason), ErrorMessage: mark.ErrorMessage, ErrorType: mark.ErrorType, Child: &c}
	e.steps[step] = done
	if done.Status == store.StepFailed {
		return nil, childError(done)
	}
	return done.Output, nil
}

// childError is the error of a child step that recorded its child's
// failure or cancellation.
func childError(rec store.Step) error {
	ce := &sdk.ChildError{Workflow: rec.Activity, Status: record.RunFailed, Reason: rec.Reason, Message: rec.ErrorMessage, Type: rec.ErrorType}
	if rec.Child != nil {
		ce.RunID = rec.Child.ID
	}
	if rec.Reason == sdk.ReasonCancelled {
		ce.Status, ce.Reason = record.RunCancelled, ""
	}
	return ce
}

// mustWrite writes w (see execution.write). When the write fails, the run
// stops (writeFailed) and the workflow goroutine unwinds.
func (e *execution) mustWrite(w store.Write, what string) store.WriteResult {
	res, err := e.write(w)
	if err != nil {
		e.writeFailed(what, err)
		exit()
	}
	return res
}

// deferMark holds a step's mark to ride with the run's next write.
func (e *execution) deferMark(m *store.StepMark) { e.deferredMarks = append(e.deferredMarks, m) }

// cancelRun ends a run whose workflow returned after its Cancel.
func (e *execution) cancelRun(err error) {
	e.ending.Store(true)
	msg := "cancelled"
	if err != nil && !errors.Is(err, sdk.ErrCancelled) {
		msg = "cancelled; the workflow returned: " + err.Error()
	}
	res, werr := e.write(store.Write{CancelRun: &store.RunCancel{Message: msg}})
	if werr != nil {
		e.writeFailed("cancel run", werr)
		return
	}
	e.w.cancelled.Add(1)
	e.end = SegmentEnd{Outcome: SegmentCancelled, RunDuration: res.Age}
	e.log.Info("tenure: run cancelled", "message", msg)
}
