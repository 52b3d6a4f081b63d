package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	goruntime "runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/committer"
	"github.com/tenurehq/tenure/internal/engine"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/sdk"
)

// execution is one worker's hold on one run: from claim to completion,
// failure, suspension, hand-off or lost lease.
type execution struct {
	w      *Worker
	claim  store.Claimed
	lease  store.Lease
	ctx    context.Context // cancelled on lost lease (errLeaseLost) or interrupt (errShutdown)
	cancel context.CancelCauseFunc
	log    *runLog

	mu        sync.Mutex
	lastRenew time.Time
	lostOnce  sync.Once
	lost      atomic.Bool // lose was called: the lease is no longer ours
	// ending is set before the run's last write (completion, failure,
	// hand-off). A heartbeat that then misses the lease may be seeing that
	// very write, so it leaves the verdict to the write's fenced result.
	ending atomic.Bool

	seg Segment
	end SegmentEnd // how the segment ended; set by the write that ended it

	// wctx is the workflow's context: e.ctx, also cancelled with
	// sdk.ErrCancelled when the run's Cancel is heard (requestCancel).
	wctx      context.Context
	wcancel   context.CancelCauseFunc
	cancelReq atomic.Bool

	// Workflow-goroutine state: touched only by the goroutine running the
	// workflow function (and by run before and after it).
	steps    map[int]store.Step
	counts   map[int]budget
	nextStep int
	// deferred is the last step's checkpoint, not yet written: it rides
	// with the run's next write (see recorder.checkpoint), which then calls
	// deferredEnded with whether it was recorded.
	deferred      *store.StepDone
	deferredEnded func(recorded bool)
	// deferredMarks are step marks (sleeps' wakes) riding with the run's
	// next write in the same way.
	deferredMarks []*store.StepMark
	// loadedAt is when steps were loaded: their DueIn counts from then.
	loadedAt time.Time
	// holding is what the last admitted attempt took under its
	// downstream's limits, given back by the run's next write; runHold, the
	// slot of the workflow's concurrency key, given back by the run's end.
	holding, runHold *store.FlowGive
}

// budget is what a step has spent: attempts, errors, and rescues, which
// counts its lost attempts (what DecideRescue weighs: each was rescued, or
// the step gave up on it). Its failure row counts the rescues made instead
// (rescued).
type budget struct{ attempts, errors, rescues int }

// rescued is how many of the step's attempts rescued a lost one
// (attempts.is_rescue), what its failure row counts as rescues: every lost
// attempt was rescued but the last one of a step that gave up on it,
// failing indeterminate (at most once) or rescues_exhausted. This is the
// one place of that rule; migration 13 applied it to the failure rows
// written before it.
func (b budget) rescued(reason sdk.Reason) int {
	if (reason == sdk.ReasonIndeterminate || reason == sdk.ReasonRescuesExhausted) && b.rescues > 0 {
		return b.rescues - 1
	}
	return b.rescues
}

func (w *Worker) newExecution(base context.Context, c store.Claimed, claimedAt time.Time) *execution {
	seg := Segment{
		RunID: c.ID, Workflow: c.Workflow, Queue: c.Queue, Epoch: c.Epoch, Worker: w.cfg.Label,
		Traceparent: c.Traceparent, Reclaimed: c.Reclaimed, QueueLag: c.QueueLag,
	}
	// The segment's context carries its span; cancelling it stops the run.
	ctx, cancel := context.WithCancelCause(w.cfg.Observer.SegmentStarted(base, seg))
	e := &execution{
		w: w, claim: c, lease: store.Lease{RunID: c.ID, Epoch: c.Epoch},
		ctx: ctx, cancel: cancel, lastRenew: claimedAt, seg: seg,
		log:    &runLog{base: w.cfg.Logger, attrs: []any{"run_id", c.ID, "workflow", c.Workflow, "epoch", c.Epoch, "worker", w.cfg.Label}},
		counts: map[int]budget{},
	}
	e.wctx, e.wcancel = context.WithCancelCause(ctx)
	if c.CancelRequested {
		e.cancelReq.Store(true)
		e.wcancel(sdk.ErrCancelled)
	}
	return e
}

func (e *execution) renewedAt() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastRenew
}

// leaseLeft is how long the lease can still be ours, by the worker's own
// clock: LeaseTTL since the last renewal was sent (the database set the
// expiry a little later, by its own clock), less a margin for the two
// clocks' drift and for the time it takes to stop the run, so that its
// activity is cancelled before another worker can claim it.
func (e *execution) leaseLeft() time.Duration {
	ttl := e.w.cfg.LeaseTTL
	return ttl - min(ttl/10, leaseMargin) - time.Since(e.renewedAt())
}

// leaseMargin is the most that leaseLeft keeps in hand.
const leaseMargin = 500 * time.Millisecond

func (e *execution) renewed(at time.Time) {
	e.mu.Lock()
	e.lastRenew = at
	e.mu.Unlock()
}

// lose records that the lease is gone: the run's context is cancelled, the
// event logged and counted, once.
func (e *execution) lose(why string) {
	e.lostOnce.Do(func() {
		e.lost.Store(true)
		e.w.leasesLost.Add(1)
		e.log.Warn("tenure: lease lost; abandoning the run to its new holder", "why", why)
		e.cancel(errLeaseLost)
		e.w.cfg.Observer.LeaseLost(e.ctx, e.seg)
	})
}

// outcome of the workflow goroutine.
type outcome struct {
	output []byte
	err    error
	panic  any
	stack  []byte
}

// run executes the claimed run to its next stopping point.
func (e *execution) run() {
	defer e.cancel(nil)
	defer e.wcancel(nil)
	obs := e.w.cfg.Observer
	e.end = SegmentEnd{Outcome: SegmentAbandoned}
	defer func() {
		e.dropDeferred()
		if context.Cause(e.ctx) == errLeaseLost {
			e.end = SegmentEnd{Outcome: SegmentLost}
		}
		obs.SegmentEnded(e.ctx, e.seg, e.end)
	}()
	wf := e.w.workflowFor(e.claim.Workflow)
	// Before anything can end the run (load's backstop may fail it): its
	// end gives back its concurrency key's slot, if it holds one.
	keyErr := e.holdRun(wf)
	if !e.load(wf) || !e.admitRun(wf, keyErr) {
		return
	}
	e.finish(e.invoke(wf)) // invoke does not return when the executor unwound the workflow (exit)
}

// load readies the run for its replay: attempts an earlier lease left
// running are marked lost, and the steps loaded. It reports false when the
// run ended or stopped instead (the backstop failed it, or it was abandoned).
func (e *execution) load(wf sdk.Definition) bool {
	lost, ok := e.markLost()
	if !ok {
		return false
	}
	// The backstop is for crashes outside activities: a reclaim that found a
	// lost attempt is charged to that step's rescue budget instead (MarkLost
	// reset the count).
	if e.claim.Reclaimed && len(lost) == 0 && e.claim.Reclaims > wf.MaxRescues() {
		e.failRun(store.Failure{
			Reason:       sdk.ReasonRescuesExhausted,
			ErrorMessage: fmt.Sprintf("lease reclaimed %d times in a row with no attempt started (budget %d): the workflow or its worker crashes outside activities, or its workers lost the database for longer than the lease each time (see the workers' Health and logs)", e.claim.Reclaims, wf.MaxRescues()),
			ErrorType:    "tenure.Backstop",
		})
		return false
	}
	e.steps = map[int]store.Step{}
	if !e.claim.Fresh { // a run claimed for the first time has no steps: save the round trip
		err := e.retry(e.w.writes, func(ctx context.Context) error {
			var err error
			e.steps, err = e.w.store.Steps(ctx, e.claim.ID)
			return err
		})
		if err != nil {
			e.abandon("load steps", err)
			return false
		}
	}
	e.loadedAt = time.Now()
	for n, s := range e.steps {
		e.counts[n] = budget{attempts: s.LastAttempt - s.BudgetFrom, errors: s.Errors, rescues: s.Rescues}
	}
	return true
}

// markLost marks lost the attempts left running by an earlier lease (a
// crash, or a hand-off whose attempt could not be closed): their outcome is
// unknown. It reports false when the run was abandoned instead.
func (e *execution) markLost() ([]store.LostAttempt, bool) {
	if e.claim.Fresh {
		return nil, true
	}
	var lost []store.LostAttempt
	err := e.retry(e.w.writes, func(ctx context.Context) error {
		var err error
		lost, err = e.w.store.MarkLost(ctx, e.lease)
		return err
	})
	if err != nil {
		e.abandon("mark lost attempts", err)
		return nil, false
	}
	for _, l := range lost {
		e.log.Warn("tenure: attempt lost (lease expired while it ran)", "step", l.Step, "attempt", l.Attempt)
		e.w.cfg.Observer.AttemptLost(e.ctx, Attempt{
			RunID: e.claim.ID, Workflow: e.claim.Workflow, Activity: l.Activity, Step: l.Step,
			Attempt: l.Attempt, Rescue: l.Rescue, Epoch: l.Epoch, Worker: l.Worker,
		}, l.StartedAt, TraceRef{TraceID: l.TraceID, SpanID: l.SpanID})
	}
	return lost, true
}

// finish ends the run with what its workflow returned: completed, failed,
// or cancelled.
func (e *execution) finish(o outcome) {
	switch {
	case o.err != nil && e.cancelReq.Load():
		// The workflow returned after its run's Cancel: the run ends
		// cancelled, whatever the error (it is the cancellation's doing).
		e.cancelRun(o.err)
	case o.panic != nil:
		e.failRun(store.Failure{
			Reason:       sdk.ReasonPanic,
			ErrorMessage: fmt.Sprint("workflow panicked: ", o.panic),
			ErrorType:    fmt.Sprintf("%T", o.panic),
			ErrorStack:   string(o.stack),
		})
	case o.err != nil:
		e.failRun(e.runFailure(o.err))
	case len(o.output) > e.w.cfg.MaxPayload:
		e.failRun(store.Failure{
			Reason:       sdk.ReasonWorkflowError,
			ErrorMessage: fmt.Sprintf("workflow output is %d bytes, limit %d: %v", len(o.output), e.w.cfg.MaxPayload, sdk.ErrPayloadTooLarge),
			ErrorType:    "tenure.PayloadTooLarge",
		})
	case hasNULEscape(o.output):
		e.failRun(store.Failure{
			Reason:       sdk.ReasonWorkflowError,
			ErrorMessage: "workflow output holds a NUL character (\\u0000), which PostgreSQL's jsonb cannot store",
			ErrorType:    "tenure.UnstorableOutput",
		})
	default:
		e.ending.Store(true)
		res, err := e.write(store.Write{CompleteRun: &store.RunOutput{Output: o.output}})
		if err != nil {
			e.writeFailed("complete run", err)
			return
		}
		e.w.completed.Add(1)
		e.end = SegmentEnd{Outcome: SegmentCompleted, RunDuration: res.Age}
	}
}

// invoke runs the workflow function on the run's goroutine and captures
// its panic. The executor unwinds the workflow with runtime.Goexit (exit):
// then invoke does not return, the goroutine ends, and the run's deferred
// clean-up (run's, and the claim loop's) is all that runs after it, as when
// run returns on an outcome that says so. (The workflow had a goroutine of
// its own until it was measured: a second goroutine and a channel per run,
// and, parked beside the deep workflow stacks, shallow ones that kept the
// runtime's adaptive starting stack size low, so that every run's stack
// grew several times: 17% of a worker's CPU per one-step run.)
func (e *execution) invoke(wf sdk.Definition) (o outcome) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if p := recover(); p != nil {
			o = outcome{panic: p, stack: debug.Stack()}
		}
		// Else runtime.Goexit: the goroutine ends once the defers have run.
	}()
	out, err := wf.Invoke(engine.WithExecutor(e.wctx, e), e.claim.Input)
	returned = true
	return outcome{output: out, err: err}
}

// runFailure turns the error a workflow returned into its failure row: a
// step's reason when the error is (or wraps) a step's *sdk.ActivityError,
// bad_input when the run's input did not decode, else workflow_error.
func (e *execution) runFailure(err error) store.Failure {
	f := store.Failure{Reason: sdk.ReasonWorkflowError, ErrorMessage: err.Error(), ErrorType: fmt.Sprintf("%T", err)}
	var ae *sdk.ActivityError
	switch {
	case errors.As(err, &ae):
		b := e.counts[ae.Step]
		f.Reason, f.Step, f.Activity = ae.Reason, ae.Step, ae.Activity
		f.Attempts, f.Errors, f.Rescues = b.attempts, b.errors, b.rescued(ae.Reason)
		f.ErrorType = ae.Type
		if s, ok := e.steps[ae.Step]; ok && ae.Err == nil {
			f.ErrorMessage = s.ErrorMessage
		} else {
			f.ErrorMessage = ae.Message
		}
	case errors.Is(err, activities.ErrBadInput):
		f.Reason = sdk.ReasonBadInput
	}
	return f
}

// failRun ends the run with its failure row.
func (e *execution) failRun(f store.Failure) {
	e.ending.Store(true)
	res, err := e.write(store.Write{FailRun: &f})
	if err != nil {
		e.writeFailed("fail run", err)
		return
	}
	e.w.failed.Add(1)
	e.end = SegmentEnd{Outcome: SegmentFailed, Reason: f.Reason, Error: f.ErrorMessage, RunDuration: res.Age}
	e.log.Info("tenure: run failed", "reason", f.Reason, "step", f.Step, "activity", f.Activity, "error", f.ErrorMessage)
}

// writeFailed handles a fenced write that did not go through.
func (e *execution) writeFailed(what string, err error) {
	if errors.Is(err, store.ErrLeaseLost) || context.Cause(e.ctx) == errLeaseLost {
		e.lose(what + " rejected by fencing")
		return
	}
	e.abandon(what, err)
}

// abandon stops working on the run after an infrastructure error. Nothing
// more is written: the lease expires and the run is rescued, by this worker or
// another, from what was committed.
func (e *execution) abandon(what string, err error) {
	if errors.Is(err, store.ErrLeaseLost) || context.Cause(e.ctx) == errLeaseLost {
		e.lose(what + " rejected by fencing")
		return
	}
	if context.Cause(e.ctx) == errShutdown && !e.ending.Load() {
		// Not when the write that failed was the run's last (the release
		// itself, say): it was retried for as long as the lease could be
		// ours, so another would fail the same way.
		e.release("interrupted while " + what)
		return
	}
	e.log.Error("tenure: abandoning run until its lease expires", "during", what, "error", err)
	e.end = SegmentEnd{Outcome: SegmentAbandoned, Error: fmt.Sprintf("%s: %v", what, err)}
}

// release hands the run back to the queue, due at once (shutdown).
func (e *execution) release(why string) { e.releaseAfter(0, why) }

// releaseAfter hands the run back to the queue, due after delay.
func (e *execution) releaseAfter(delay time.Duration, why string) {
	e.handBack(store.Write{Release: &store.Release{Delay: delay}}, why, "due_in", delay)
}

// handBack writes w, which releases the run (with what else it records: a
// durable wait), and counts and logs the hand-back.
func (e *execution) handBack(w store.Write, why string, attrs ...any) {
	e.ending.Store(true)
	if _, err := e.write(w); err != nil {
		e.writeFailed("release run", err)
		return
	}
	e.w.released.Add(1)
	e.end = SegmentEnd{Outcome: SegmentReleased}
	e.log.Info("tenure: run handed back", append([]any{"why", why}, attrs...)...)
}

// write sends one write of the run, with the deferred checkpoint if there is
// one, through the worker's committer, and waits for its commit. A refused
// fence is store.ErrLeaseLost.
func (e *execution) write(w store.Write) (store.WriteResult, error) {
	w.Lease = e.lease
	w.WakeParent = e.claim.Child
	w.Marks, e.deferredMarks = e.deferredMarks, nil
	ended := e.deferredEnded
	if e.deferred != nil {
		w.StepDone = e.deferred
	}
	e.deferred, e.deferredEnded = nil, nil
	if e.holding != nil { // the last attempt's capacity
		w.Gives, e.holding = append(w.Gives, *e.holding), nil
	}
	if e.runHold != nil && (w.CompleteRun != nil || w.FailRun != nil || w.CancelRun != nil) {
		w.Gives = append(w.Gives, *e.runHold)
	}
	res, err := e.commit(w)
	if ended != nil {
		ended(err == nil)
	}
	return res, err
}

// commit sends w through the committer until it is answered: committed, or
// refused by its fence (store.ErrLeaseLost). A database error, whether the
// write was refused (a permission, a full disk) or its outcome is unknown (a
// connection lost during COMMIT), is retried (see retry), the write held in
// memory: every write is idempotent (store.Commit), so a repeat of one that
// did commit is answered as a success.
func (e *execution) commit(w store.Write) (res store.WriteResult, err error) {
	err = e.retry(e.w.writes, func(ctx context.Context) error {
		var err error
		res, err = e.w.committer.Write(ctx, w)
		w.Again = true // a next try may repeat one that committed
		return err
	})
	if err == nil {
		err = res.Err
	}
	return res, err
}

// retry calls f until it succeeds or the lease can no longer be ours. A
// database error is retried with backoff, each try bounded by
// StatementTimeout (twice that: a write may wait for the flush in progress),
// for as long as the lease can still be held by the
// worker's own clock. Nothing of this is charged to the run's budgets; the
// worker's Health reports it meanwhile (path). The heartbeat keeps the lease
// while it can, so an outage shorter than the lease's TTL costs the run
// nothing but time. f must be idempotent.
func (e *execution) retry(path *trouble, f func(ctx context.Context) error) error {
	bo := newBackoff(writeRetryMin, writeRetryMax)
	waiting := false
	defer func() {
		if waiting {
			e.w.waiting.Add(-1)
		}
	}()
	for {
		// A write may wait for the flush before its own: two statement
		// timeouts.
		ctx, cancel := context.WithTimeout(e.writeCtx(), 2*e.w.cfg.StatementTimeout)
		err := f(ctx)
		cancel()
		if err == nil {
			if waiting {
				waiting = false
				e.w.waiting.Add(-1)
			}
			// The path works again only once no run still waits on it: one
			// run's success says nothing of another's refused write.
			if e.w.waiting.Load() == 0 {
				path.ok()
			}
			return nil
		}
		if errors.Is(err, committer.ErrStopped) {
			return err
		}
		if !waiting {
			waiting = true
			e.w.waiting.Add(1)
		}
		path.failed(err, "runs_waiting", e.w.waiting.Load())
		left := e.leaseLeft()
		if context.Cause(e.ctx) == errLeaseLost || left <= 0 {
			return fmt.Errorf("%w (retried while the lease could be held)", err)
		}
		// Woken early when the lease is found lost: a write past it is
		// pointless.
		lost := make(chan struct{})
		stop := context.AfterFunc(e.ctx, func() {
			if context.Cause(e.ctx) == errLeaseLost {
				close(lost)
			}
		})
		sleep(context.Background(), min(bo.delay(), left), lost)
		stop()
	}
}

// How long a run waits between tries of a write that failed.
const (
	writeRetryMin = 50 * time.Millisecond
	writeRetryMax = 2 * time.Second
)

// dropDeferred reports a deferred checkpoint that no write carried (the run
// was abandoned first) as unrecorded.
func (e *execution) dropDeferred() {
	if e.deferredEnded != nil {
		e.deferredEnded(false)
	}
	e.deferred, e.deferredEnded, e.deferredMarks = nil, nil, nil
}

// writeCtx is the context of the run's writes: not cancelled by a lost lease
// or a shutdown, because the writes that record an interruption or hand the
// run over must still reach the database (fencing keeps them harmless).
func (e *execution) writeCtx() context.Context { return context.WithoutCancel(e.ctx) }

// exit unwinds the workflow goroutine: the run is suspended, released, failed
// or lost, and the write that says so is already done (or refused).
func exit() { goruntime.Goexit() }

// runLog is a run's logger, with the run's attributes: built when the run
// first logs, since most runs never do (slog's With formats its attributes
// for the handler at once: 5% of a worker's CPU per one-step run when it
// was built at every claim).
type runLog struct {
	once  sync.Once
	base  *slog.Logger
	attrs []any
	l     *slog.Logger
}

func (r *runLog) logger() *slog.Logger {
	r.once.Do(func() { r.l = r.base.With(r.attrs...) })
	return r.l
}

func (r *runLog) Info(msg string, args ...any)  { r.logger().Info(msg, args...) }
func (r *runLog) Warn(msg string, args ...any)  { r.logger().Warn(msg, args...) }
func (r *runLog) Error(msg string, args ...any) { r.logger().Error(msg, args...) }
