package runtime

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/engine"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// The executor makes one attempt of a step: it takes what the attempt
// needs, has its start recorded, invokes the activity (under its timeout,
// in its transaction, catching its panic) and classifies what came of it.
// It returns that as an attempt, which the step's recorder writes. The
// executor writes only the attempt's start, through the recorder, durable
// before the activity is invoked (what at most once rests on), and, for a
// transactional step, the checkpoint in the step's own transaction
// (invokeTx), which is that transaction's commit.

// verdict is what comes of an attempt, which says what the recorder writes.
type verdict int

const (
	// succeeded: the step's checkpoint is written with the output.
	succeeded verdict = iota
	// gaveUp: the attempt's end and the step's failure are written.
	gaveUp
	// retry: the attempt's end is written with the delay before the next.
	retry
	// handedBack: the attempt's end is written interrupted (when one was
	// started) and the run handed back, due after delay: a shutdown, or a
	// database lost that is no attempt's fault.
	handedBack
	// lost: the lease is lost; nothing more is written.
	lost
	// abandoned: an infrastructure error (fault); nothing more is written,
	// the lease expires and the run is rescued.
	abandoned
	// throttled: a downstream's limit denied the attempt, which was not
	// recorded; the write that asked parked the run.
	throttled
)

// attempt is one attempt of a step as its executor found it: the value the
// recorder writes and reports.
type attempt struct {
	verdict verdict
	number  int // the attempt's number in its step; 0 when none was started
	rescue  bool
	out     []byte           // the output, when it succeeded
	end     store.AttemptEnd // how it ended, when it did not succeed
	err     error            // the error it ended with, as the observer hears of it
	fail    failure          // why the step gives up (gaveUp)
	delay   time.Duration    // before the run is due again (handedBack)
	why     string           // the hand-back's, loss's or abandonment's reason
	fault   error            // the infrastructure error it was abandoned on
	denial  *store.Denial    // why a limit denied it (throttled)

	// The observer's view of the attempt, from AttemptStarted.
	actx  context.Context
	info  Attempt
	began time.Time
}

// failure is how a step gives up: its reason, message and type, and cause,
// the error the workflow sees in it (nil: none but the message and type).
type failure struct {
	reason   sdk.Reason
	msg, typ string
	cause    error
}

// stopped ends an attempt where the run must stop (v is lost or
// abandoned), with why and, for abandoned, fault.
func (a attempt) stopped(v verdict, why string, fault error) attempt {
	a.verdict, a.why, a.fault, a.err = v, why, fault, nil
	return a
}

// stop is how invokeTx ends an attempt that is not the activity's to end:
// a lost lease, or the database that cannot say whether it committed.
type stop struct {
	verdict verdict
	why     string
	fault   error
}

func (s *stop) Error() string { return s.why }

// try makes one attempt of the step.
func (s *stepRun) try(ctx context.Context, rescue bool) attempt {
	e := s.e
	var stx *stepTx
	if s.act.Transactional() {
		// The step's connection is taken before the attempt is recorded: a
		// database that cannot give us one is no attempt at all, so nothing
		// is charged to any budget; the run is handed back for later. Its
		// transaction begins once the attempt is recorded (see stepTx).
		cctx, cancel := context.WithTimeout(ctx, e.w.cfg.StatementTimeout)
		conn, err := e.w.store.Pool().Acquire(cctx)
		cancel()
		if err != nil {
			if context.Cause(e.ctx) != nil {
				return attempt{}.stopped(abandoned, "take the step's connection", err)
			}
			e.log.Warn("tenure: cannot take a connection for a transactional step; handing the run back", "step", s.n, "error", err)
			return attempt{verdict: handedBack, delay: e.w.cfg.PollInterval, why: "database unavailable before the call"}
		}
		stx = &stepTx{conn: conn}
		defer stx.end(context.WithoutCancel(ctx))
	}
	s.attempt++
	a := attempt{number: s.attempt, rescue: rescue}
	a.info = Attempt{
		RunID: e.claim.ID, Workflow: e.claim.Workflow, Activity: s.act.Name(), Step: s.n, Attempt: s.attempt,
		MaxAttempts: s.pol.MaxAttempts, Errors: s.b.errors, Rescues: s.b.rescues, Rescue: rescue,
		Epoch: e.lease.Epoch, Worker: e.w.cfg.Label, Previous: s.prev,
	}
	if s.flow != nil {
		a.info.Downstream = s.flow.downstream
	}
	var ref TraceRef
	a.actx, ref = e.w.cfg.Observer.AttemptStarted(ctx, a.info)
	s.prev = ref
	a.began = time.Now()

	// The attempt row is committed before the activity is invoked (with the
	// previous step's checkpoint, when that was deferred), once admitted
	// under its downstream's limits, in the same write.
	started, err := s.begin(a, ref)
	if err != nil {
		return a.stopped(abandoned, "start attempt", err)
	}
	if started.Denied != nil {
		return s.throttled(a, *started.Denied)
	}
	s.b.attempts++
	s.e.counts[s.n] = s.b
	timeout, ok := s.pol.TimeoutAt(started.Elapsed)
	if !ok {
		const msg = "not invoked: the step's deadline passed before this attempt could start"
		a.verdict, a.err = gaveUp, errors.New(msg)
		a.end = store.AttemptEnd{Status: record.AttemptFailed, ErrorMessage: msg}
		a.fail = failure{reason: sdk.ReasonDeadline, msg: msg, typ: "tenure.DeadlineExceeded"}
		return a
	}
	if stx != nil {
		if err := stx.begin(ctx, e.w.store.Pool(), e.w.cfg.LeaseTTL, e.w.cfg.StatementTimeout); err != nil {
			// Recorded and never invoked, like a checkpoint that could not
			// be written: the attempt is lost, and rescued.
			return a.stopped(abandoned, "begin the step's transaction", err)
		}
	}
	if e.leaseRanOut() {
		return a.stopped(lost, "lease ran out between the attempt's start and its call", nil)
	}
	// An activity that ends its goroutine (runtime.Goexit, t.FailNow in a
	// test) returns nothing: the observer still hears of its attempt, lost.
	returned := false
	defer func() {
		if !returned {
			s.rec.report(a, false)
		}
	}()
	out, stack, callErr := s.invoke(a.actx, stx, rescue, timeout)
	returned = true
	return s.classify(ctx, a, stx, out, stack, callErr, started.Elapsed, timeout)
}

// leaseRanOut reports, just before an attempt's call, whether the lease
// may have run out since the attempt was recorded (the process paused
// between the commit and the call, its answer slow to come): another
// worker may hold the run by now, and the sweep may have given the
// attempt's capacity to another call. By the worker's own clock (leaseLeft
// counts from when the last renewal was sent), a lease that can no longer
// be ours is not called under: the attempt is lost, as if the worker had
// died there, and rescued (an at-most-once step's is indeterminate, as
// then).
func (e *execution) leaseRanOut() bool { return e.lost.Load() || e.leaseLeft() <= 0 }

// classify turns what the activity returned into the attempt's verdict:
// success, an error to retry or give up on, or an interruption that is not
// the activity's (the run's Cancel, a lost connection, lease or shutdown).
func (s *stepRun) classify(ctx context.Context, a attempt, stx *stepTx, out, stack []byte, callErr error, elapsed, timeout time.Duration) attempt {
	e := s.e
	ran := time.Since(a.began)
	if st, ok := callErr.(*stop); ok {
		return a.stopped(st.verdict, st.why, st.fault)
	}
	if callErr == nil && hasNULEscape(out) {
		// PostgreSQL's jsonb cannot store it: the checkpoint would be
		// refused on every try. The activity's output is the problem.
		callErr = policy.Permanent(fmt.Errorf("activity %q output holds a NUL character (\\u0000), which PostgreSQL's jsonb cannot store", s.act.Name()))
	}
	if callErr == nil && len(out) > e.w.cfg.MaxPayload {
		callErr = policy.Permanent(fmt.Errorf("activity %q output is %d bytes, limit %d: %w", s.act.Name(), len(out), e.w.cfg.MaxPayload, sdk.ErrPayloadTooLarge))
	}
	if callErr == nil {
		a.verdict, a.out = succeeded, out
		return a
	}
	a.err = callErr
	if a, ok := s.interrupted(ctx, a, stx, callErr); ok {
		return a
	}
	status := record.AttemptFailed
	if errors.Is(callErr, context.DeadlineExceeded) && timeout > 0 && ran >= timeout {
		status = record.AttemptTimedOut
	}
	a.end = store.AttemptEnd{Status: status, ErrorMessage: callErr.Error(), ErrorType: typeName(callErr)}
	if stack != nil {
		a.verdict = gaveUp
		a.end.ErrorType, a.end.ErrorStack = "panic", string(stack)
		a.fail = failure{reason: sdk.ReasonPanic, msg: callErr.Error(), typ: "panic"}
		return a
	}
	s.b.errors++
	s.e.counts[s.n] = s.b
	d := s.pol.Decide(policy.History{
		Attempt: s.attempt, Errors: s.b.errors, Rescues: s.b.rescues,
		Elapsed: elapsed + ran, LastDelay: s.lastDelay, Err: callErr,
		Seed: policy.Seed(e.claim.ID.String(), s.n, s.attempt),
	})
	if !d.Retry {
		a.verdict = gaveUp
		a.fail = failure{reason: d.Reason, msg: callErr.Error(), typ: typeName(callErr), cause: callErr}
		return a
	}
	a.verdict = retry
	a.end.Delay, a.end.DelaySource = &d.Delay, string(d.Source)
	s.lastDelay = d.Delay
	return a
}

// interrupted classifies an attempt that ended in callErr because of the
// run and not of the activity: the run's Cancel, the step's transaction's
// lost connection, a lost lease or a shutdown. It reports false for any
// other.
func (s *stepRun) interrupted(ctx context.Context, a attempt, stx *stepTx, callErr error) (attempt, bool) {
	e := s.e
	if e.cancelReq.Load() && !engine.Detached(ctx) && context.Cause(e.ctx) == nil {
		// The run's Cancel stopped the attempt (its context's cause is
		// sdk.ErrCancelled): recorded cancelled, charged to no budget, and
		// the step gives up with reason cancelled, which the workflow
		// matches with errors.Is(err, sdk.ErrCancelled).
		msg := "run cancelled during the attempt; the activity returned: " + callErr.Error()
		a.verdict = gaveUp
		a.end = store.AttemptEnd{Status: record.AttemptCancelled, ErrorMessage: msg, ErrorType: typeName(callErr)}
		a.fail = failure{reason: sdk.ReasonCancelled, msg: msg, typ: typeName(callErr), cause: sdk.ErrCancelled}
		return a, true
	}
	if stx != nil && stx.unanswered && !s.afterInterrupted && context.Cause(e.ctx) == nil {
		// The activity returned, and the database did not answer its
		// checkpoint or COMMIT within StatementTimeout (a server slow to
		// commit: I/O, a checkpoint's flush): nothing committed, and the
		// fault is the database's. Charged to no budget, as below; but not
		// twice in a row: a COMMIT that is always slower than
		// StatementTimeout (the activity's own deferred triggers, say) is
		// the attempt's to answer for, and every second such attempt is
		// charged as the error it is, so that the step's budget still ends
		// it.
		e.log.Warn("tenure: the database did not commit a transactional step within StatementTimeout; handing the run back", "step", s.n,
			"statement_timeout", e.w.cfg.StatementTimeout, "error", callErr)
		a.verdict, a.delay, a.why = handedBack, e.w.cfg.PollInterval, "the database did not commit a transactional step in time"
		a.end = store.AttemptEnd{Status: record.AttemptInterrupted, ErrorMessage: "the database did not commit the step's transaction within StatementTimeout: " + callErr.Error(), ErrorType: typeName(callErr)}
		return a, true
	}
	if stx != nil && stx.connLost && context.Cause(e.ctx) == nil &&
		!errors.Is(callErr, context.DeadlineExceeded) && !errors.Is(callErr, context.Canceled) {
		// (pgx closes a connection whose query outlived its context: that
		// is the attempt's own timeout, charged like any other.)
		// The step's transaction lost its connection (a database restart,
		// a network cut): its writes rolled back with it, and the error is
		// the database's, not the activity's. Like a transaction that could
		// not begin, that is charged to no budget: the attempt is recorded
		// interrupted and the run handed back for later.
		e.log.Warn("tenure: a transactional step's transaction lost its connection; handing the run back", "step", s.n, "error", callErr)
		a.verdict, a.delay, a.why = handedBack, e.w.cfg.PollInterval, "database connection lost during a transactional step"
		a.end = store.AttemptEnd{Status: record.AttemptInterrupted, ErrorMessage: "the step's transaction lost its database connection: " + callErr.Error(), ErrorType: typeName(callErr)}
		return a, true
	}
	switch context.Cause(e.ctx) {
	case errLeaseLost:
		a.verdict, a.why = lost, "attempt ended after the lease was lost"
		return a, true
	case errShutdown:
		a.verdict, a.delay, a.why = handedBack, 0, "attempt interrupted by shutdown"
		a.end = store.AttemptEnd{Status: record.AttemptInterrupted, ErrorMessage: callErr.Error(), ErrorType: typeName(callErr)}
		return a, true
	}
	return a, false
}

// invoke calls the activity once under the attempt's context and timeout (0: none),
// inside a transaction for a transactional activity, turning a panic into an
// error with its stack.
func (s *stepRun) invoke(ctx context.Context, stx *stepTx, rescue bool, timeout time.Duration) (out, stack []byte, err error) {
	e := s.e
	actx := activities.WithInfo(ctx, activities.Info{
		RunID: e.claim.ID, Workflow: e.claim.Workflow, Activity: s.act.Name(), Step: s.n,
		Attempt: s.attempt, Rescue: rescue, Errors: s.b.errors, Rescues: s.b.rescues,
		MaxAttempts: s.pol.MaxAttempts, MaxRescues: s.pol.MaxRescues, Epoch: e.lease.Epoch, Worker: e.w.cfg.Label,
	})
	if engine.Detached(ctx) {
		// A cleanup step's context ignores the run's cancellation, not a
		// lost lease or a shutdown.
		var cancel context.CancelCauseFunc
		actx, cancel = context.WithCancelCause(actx)
		defer cancel(nil)
		stop := context.AfterFunc(e.ctx, func() { cancel(context.Cause(e.ctx)) })
		defer stop()
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(actx, timeout)
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			out, stack, err = nil, debug.Stack(), fmt.Errorf("activity %q panicked: %v", s.act.Name(), p)
		}
	}()
	if !s.act.Transactional() {
		out, err = s.act.Invoke(actx, nil, s.input)
		return out, nil, err
	}
	out, err = s.invokeTx(actx, stx)
	return out, nil, err
}

// invokeTx runs a transactional activity: its writes and the step's
// checkpoint commit in one transaction, which the fenced checkpoint rolls
// back when the lease was lost. A *stop error ends the attempt for a reason
// that is not the activity's.
func (s *stepRun) invokeTx(actx context.Context, stx *stepTx) ([]byte, error) {
	e := s.e
	tx := stx.tx
	// Rolled back before a retry's delay, not at the end of the attempt: a
	// failed attempt's transaction must not hold its connection meanwhile.
	defer stx.end(context.WithoutCancel(actx)) // no rollback after commit
	out, err := s.act.Invoke(actx, tx, s.input)
	if err != nil {
		return nil, err
	}
	if len(out) > e.w.cfg.MaxPayload {
		return out, nil // the caller turns this into a permanent error; rollback by defer
	}
	cctx, cancel := context.WithTimeout(actx, e.w.cfg.StatementTimeout)
	defer cancel()
	res, err := e.w.store.Commit(cctx, tx, []store.Write{{Lease: e.lease, StepDone: &store.StepDone{Step: s.n, Attempt: s.attempt, Output: out}}})
	if err != nil {
		// Unanswered, the checkpoint's connection is closed, and the
		// transaction with it: no COMMIT was sent.
		stx.unanswered = sqlState(err) == "" && errors.Is(err, context.DeadlineExceeded) && actx.Err() == nil
		return nil, fmt.Errorf("checkpoint in step transaction: %w", err)
	}
	if res[0].Err != nil {
		return nil, &stop{verdict: lost, why: "transactional step refused by fencing"}
	}
	if err := tx.Commit(cctx); err != nil {
		if sqlState(err) != "" {
			return nil, fmt.Errorf("commit step transaction: %w", err)
		}
		// Whose deadline passed: StatementTimeout's (the database's
		// slowness), or the activity's own (cctx is derived from actx; a
		// deadline of the activity's a moment after StatementTimeout's
		// counts as the database's).
		slow := errors.Is(err, context.DeadlineExceeded) && actx.Err() == nil
		return s.commitLost(stx, out, err, slow)
	}
	return out, nil
}

// commitLost is the end of a transactional attempt whose COMMIT lost its
// connection or outlived its wait (err): the activity's writes and the
// checkpoint committed together, or neither did. The step's record tells
// which, once the transaction is over: the COMMIT may still be on its way
// or running on the server, holding the step's row until it ends
// (SettledStepStatus waits for it). Read at once, the record said running
// for a step about to complete, and the retry that followed was the second
// attempt of a completed step, recorded and never run. slow says that the
// COMMIT outlived StatementTimeout, not the activity's own deadline: when
// it did not commit, the fault is the database's (stepTx.unanswered).
func (s *stepRun) commitLost(stx *stepTx, out []byte, err error, slow bool) ([]byte, error) {
	e := s.e
	// The wait for the COMMIT is bounded by the lease, not by the write
	// path's per-try deadline: a COMMIT a few seconds late is not a write
	// path that fails (its errors and Health). Only a read that fails
	// otherwise goes on to the write path's retries.
	wctx, cancel := context.WithTimeout(e.writeCtx(), max(e.leaseLeft(), e.w.cfg.StatementTimeout))
	status, rerr := e.w.store.SettledStepStatus(wctx, e.claim.ID, s.n)
	cancel()
	if rerr != nil {
		rerr = e.retry(e.w.writes, func(ctx context.Context) error {
			var err error
			status, err = e.w.store.SettledStepStatus(ctx, e.claim.ID, s.n)
			return err
		})
	}
	if rerr != nil {
		return nil, &stop{verdict: abandoned, why: "learn whether a transactional step committed", fault: rerr}
	}
	if status != store.StepCompleted {
		stx.connLost, stx.unanswered = true, slow
		return nil, fmt.Errorf("commit step transaction (it did not commit): %w", err)
	}
	e.log.Warn("tenure: a transactional step's COMMIT went unanswered (a lost connection, or StatementTimeout); the step is recorded committed",
		"step", s.n, "error", err)
	return out, nil
}
