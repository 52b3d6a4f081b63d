package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/engine"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// Step implements engine.Executor: it runs or replays the next step of the
// run. It is called on the workflow goroutine, and may end that goroutine
// (runtime.Goexit) when the run must unwind.
func (e *execution) Step(ctx context.Context, act activities.Definition, input []byte, opts []policy.Option) ([]byte, error) {
	declared := act
	act = e.w.overrides.Apply(act) // a test's replacement function, if any
	e.nextStep++
	n := e.nextStep
	rec, seen := e.steps[n]
	if seen && (kindOf(rec) != store.KindActivity || rec.Activity != act.Name()) {
		e.failRun(store.Failure{
			Reason:       sdk.ReasonNondeterminism,
			Step:         n,
			Activity:     act.Name(),
			ErrorMessage: fmt.Sprintf("step %d was recorded as %s %q but the workflow now calls activity %q: workflow code changed or is not deterministic", n, kindOf(rec), rec.Activity, act.Name()),
			ErrorType:    "tenure.Nondeterminism",
		})
		exit()
	}
	if seen && rec.Status == store.StepCompleted {
		return rec.Output, nil
	}
	codec, _ := engine.ErrorCodecFrom(ctx)
	if seen && rec.Status == store.StepFailed {
		return nil, e.replayedError(codec, n, rec)
	}
	// The policy is the declared activity's: a replacement keeps it.
	pol, polJSON, err := e.w.policies.resolve(declared, opts)
	if err == nil && pol.AtMostOnce && act.Transactional() {
		err = activities.ErrAtMostOnceTx
	}
	if err != nil {
		return nil, fmt.Errorf("activity %q (step %d): %w", act.Name(), n, err)
	}
	if err := e.cancelled(ctx, fmt.Sprintf("activity %q", act.Name()), n); err != nil {
		return nil, err
	}
	s := &stepRun{e: e, n: n, act: act, input: input, pol: pol, policyJSON: polJSON, rec: rec, codec: codec}
	return s.run(ctx)
}

// replayedError is the error of a step that gave up in an earlier execution:
// the one the workflow saw then (see stepRun.giveUp). An error of a
// registered type is decoded from its value; one the workflow no longer
// registers, or that no longer decodes, is logged and replayed with its
// message and type only.
func (e *execution) replayedError(codec engine.ErrorCodec, n int, rec store.Step) error {
	ae := &sdk.ActivityError{Activity: rec.Activity, Step: n, Reason: rec.Reason, Message: rec.ErrorMessage, Type: rec.ErrorType}
	if rec.ErrorValue == nil {
		return ae
	}
	if codec == nil {
		e.log.Warn("tenure: a replayed step's error has a value, but its workflow registers no error types (sdk.WithErrorType): replayed without it",
			"step", n, "error_type", rec.ErrorType)
		return ae
	}
	v, err := codec.DecodeError(rec.ErrorType, rec.ErrorValue)
	if err != nil {
		e.log.Warn("tenure: a replayed step's error does not decode: replayed without its value", "step", n, "error", err)
		return ae
	}
	ae.Err = v
	return ae
}

// stepRun is the attempt loop of one step.
type stepRun struct {
	e     *execution
	n     int
	act   activities.Definition
	input []byte
	pol   policy.Retry
	rec   store.Step        // zero for a new step
	codec engine.ErrorCodec // the workflow's registered error types; nil if none

	policyJSON []byte // pol, as recorded on its attempts
	attempt    int
	b          budget
	lastDelay  time.Duration
	prev       TraceRef // the span of the previous attempt, for links
}

func (s *stepRun) run(ctx context.Context) ([]byte, error) {
	s.attempt = s.rec.LastAttempt
	s.b = budget{attempts: s.rec.LastAttempt - s.rec.BudgetFrom, errors: s.rec.Errors, rescues: s.rec.Rescues}
	s.lastDelay = s.rec.LastDelay
	s.prev = TraceRef{TraceID: s.rec.LastTraceID, SpanID: s.rec.LastSpanID}
	s.e.counts[s.n] = s.b

	rescue := false
	last := s.rec.LastStatus
	if s.rec.LastAttempt <= s.rec.BudgetFrom {
		last = "" // a requeue gave the step a fresh budget: earlier attempts no longer count
	}
	switch last {
	case record.AttemptLost:
		// The last attempt's outcome is unknown. b.rescues counts the lost
		// attempts, this one included, which is what DecideRescue weighs (a
		// step that gives up here rescued one fewer: budget.rescued).
		if s.pol.AtMostOnce {
			return nil, s.giveUp(sdk.ReasonIndeterminate, "attempt lost: the worker died, froze or was cut off while it ran; at-most-once: not run again", "tenure.Indeterminate", nil)
		}
		if !s.pol.DecideRescue(s.b.rescues) {
			return nil, s.giveUp(sdk.ReasonRescuesExhausted, fmt.Sprintf("%d attempts lost, budget MaxRescues=%d", s.b.rescues, s.pol.MaxRescues), "tenure.RescuesExhausted", nil)
		}
		rescue = true
	}
	// After an error (a suspended retry, or a restart during its delay) the
	// next attempt is due: Decide already granted it, possibly under an error
	// rule's larger budget, which only the error itself could tell again.

	for {
		if s.e.w.draining.Load() {
			s.e.release("shutdown before the next attempt")
			exit()
		}
		if err := s.e.cancelled(ctx, fmt.Sprintf("activity %q", s.act.Name()), s.n); err != nil {
			return nil, err
		}
		out, err := s.try(ctx, rescue)
		if err != errRetry {
			return out, err
		}
		rescue = false
	}
}

// try makes one attempt. It returns the output, an *sdk.ActivityError when
// the step gave up, or errRetry after sleeping the delay before the next one.
func (s *stepRun) try(ctx context.Context, rescue bool) (_ []byte, err error) {
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
				e.abandon("take the step's connection", err)
				exit()
			}
			e.log.Warn("tenure: cannot take a connection for a transactional step; handing the run back", "step", s.n, "error", err)
			e.releaseAfter(e.w.cfg.PollInterval, "database unavailable before the call")
			exit()
		}
		stx = &stepTx{conn: conn}
		defer stx.end(context.WithoutCancel(ctx))
	}
	s.attempt++
	info := Attempt{
		RunID: e.claim.ID, Workflow: e.claim.Workflow, Activity: s.act.Name(), Step: s.n, Attempt: s.attempt,
		MaxAttempts: s.pol.MaxAttempts, Errors: s.b.errors, Rescues: s.b.rescues, Rescue: rescue,
		Epoch: e.lease.Epoch, Worker: e.w.cfg.Label, Previous: s.prev,
	}
	actx, ref := e.w.cfg.Observer.AttemptStarted(ctx, info)
	s.prev = ref
	// Whatever way the attempt ends, including a goroutine exit when the
	// lease is lost, the observer hears of it once. Unrecorded means lost.
	report := AttemptEnd{Outcome: record.AttemptLost}
	began := time.Now()
	reported := false // the report was handed to the deferred checkpoint
	defer func() {
		if reported {
			return
		}
		report.Duration = time.Since(began)
		e.w.cfg.Observer.AttemptEnded(actx, info, report)
	}()

	// The attempt row is committed before the activity is invoked (with the
	// previous step's checkpoint, when that was deferred).
	started, err := e.write(store.Write{StartAttempt: &store.AttemptStart{
		Step: s.n, Attempt: s.attempt, Activity: s.act.Name(), Policy: s.policyJSON,
		Rescue: rescue, Worker: e.w.cfg.Label, TraceID: ref.TraceID, SpanID: ref.SpanID,
	}})
	if err != nil {
		e.abandon("start attempt", err)
		exit()
	}
	elapsed := started.Elapsed
	e.w.attempts.Add(1)
	s.b.attempts++
	s.e.counts[s.n] = s.b
	timeout, ok := s.pol.TimeoutAt(elapsed)
	if !ok {
		const msg = "not invoked: the step's deadline passed before this attempt could start"
		report = AttemptEnd{Outcome: record.AttemptFailed, Err: errors.New(msg), GaveUp: sdk.ReasonDeadline}
		return nil, s.giveUp(sdk.ReasonDeadline, msg, "tenure.DeadlineExceeded", &store.AttemptEnd{Status: record.AttemptFailed, ErrorMessage: msg})
	}

	if stx != nil {
		if err := stx.begin(ctx, e.w.store.Pool(), e.w.cfg.LeaseTTL, e.w.cfg.StatementTimeout); err != nil {
			// Recorded and never invoked, like a checkpoint that could not
			// be written: the attempt is lost, and rescued.
			e.abandon("begin the step's transaction", err)
			exit()
		}
	}
	out, stack, callErr := s.invoke(actx, stx, rescue, timeout)
	ran := time.Since(began)

	if callErr == nil && hasNULEscape(out) {
		// PostgreSQL's jsonb cannot store it: the checkpoint would be
		// refused on every try. The activity's output is the problem.
		callErr = policy.Permanent(fmt.Errorf("activity %q output holds a NUL character (\\u0000), which PostgreSQL's jsonb cannot store", s.act.Name()))
	}
	if callErr == nil {
		if len(out) <= e.w.cfg.MaxPayload {
			// The observer hears of the success once it is recorded: until
			// then (and if the checkpoint is refused) the attempt is lost.
			succeeded := AttemptEnd{Outcome: record.AttemptSucceeded, Duration: time.Since(began)}
			reported = s.checkpoint(out, func(recorded bool) {
				r := succeeded
				if !recorded {
					r = AttemptEnd{Outcome: record.AttemptLost, Duration: r.Duration}
				}
				e.w.cfg.Observer.AttemptEnded(actx, info, r)
			})
			report = succeeded
			return out, nil
		}
		callErr = policy.Permanent(fmt.Errorf("activity %q output is %d bytes, limit %d: %w", s.act.Name(), len(out), e.w.cfg.MaxPayload, sdk.ErrPayloadTooLarge))
	}
	report.Err = callErr
	if e.cancelReq.Load() && !engine.Detached(ctx) && context.Cause(e.ctx) == nil {
		// The run's Cancel stopped the attempt (its context's cause is
		// sdk.ErrCancelled): recorded cancelled, charged to no budget, and
		// the step gives up with reason cancelled, which the workflow
		// matches with errors.Is(err, sdk.ErrCancelled).
		msg := "run cancelled during the attempt; the activity returned: " + callErr.Error()
		err := s.giveUp(sdk.ReasonCancelled, msg, typeName(callErr), &store.AttemptEnd{
			Status: record.AttemptCancelled, ErrorMessage: msg, ErrorType: typeName(callErr),
		}, sdk.ErrCancelled)
		report.Outcome = record.AttemptCancelled
		return nil, err
	}
	if stx != nil && stx.connLost && context.Cause(e.ctx) == nil &&
		!errors.Is(callErr, context.DeadlineExceeded) && !errors.Is(callErr, context.Canceled) {
		// (pgx closes a connection whose query outlived its context: that
		// is the attempt's own timeout, charged below like any other.)
		// The step's transaction lost its connection (a database restart,
		// a network cut): its writes rolled back with it, and the error is
		// the database's, not the activity's. Like a transaction that could
		// not begin, that is charged to no budget: the attempt is recorded
		// interrupted and the run handed back for later.
		s.end(store.AttemptEnd{Status: record.AttemptInterrupted, ErrorMessage: "the step's transaction lost its database connection: " + callErr.Error(), ErrorType: typeName(callErr)})
		report.Outcome = record.AttemptInterrupted
		e.log.Warn("tenure: a transactional step's transaction lost its connection; handing the run back", "step", s.n, "error", callErr)
		e.releaseAfter(e.w.cfg.PollInterval, "database connection lost during a transactional step")
		exit()
	}
	switch context.Cause(e.ctx) {
	case errLeaseLost:
		e.lose("attempt ended after the lease was lost")
		exit()
	case errShutdown:
		s.end(store.AttemptEnd{Status: record.AttemptInterrupted, ErrorMessage: callErr.Error(), ErrorType: typeName(callErr)})
		report.Outcome = record.AttemptInterrupted
		e.release("attempt interrupted by shutdown")
		exit()
	}

	status := record.AttemptFailed
	if errors.Is(callErr, context.DeadlineExceeded) && timeout > 0 && ran >= timeout {
		status = record.AttemptTimedOut
	}
	if stack != nil {
		err := s.giveUp(sdk.ReasonPanic, callErr.Error(), "panic", &store.AttemptEnd{
			Status: status, ErrorMessage: callErr.Error(), ErrorType: "panic", ErrorStack: string(stack),
		})
		report.Outcome, report.GaveUp = status, sdk.ReasonPanic
		return nil, err
	}
	s.b.errors++
	s.e.counts[s.n] = s.b
	d := s.pol.Decide(policy.History{
		Attempt: s.attempt, Errors: s.b.errors, Rescues: s.b.rescues,
		Elapsed: elapsed + ran, LastDelay: s.lastDelay, Err: callErr,
		Seed: policy.Seed(e.claim.ID.String(), s.n, s.attempt),
	})
	end := store.AttemptEnd{Status: status, ErrorMessage: callErr.Error(), ErrorType: typeName(callErr)}
	if !d.Retry {
		err := s.giveUp(d.Reason, callErr.Error(), typeName(callErr), &end, callErr)
		report.Outcome, report.GaveUp = status, d.Reason
		return nil, err
	}
	end.Delay, end.DelaySource = &d.Delay, string(d.Source)
	s.end(end)
	report.Outcome, report.Delay, report.DelaySource = status, &d.Delay, string(d.Source)
	s.lastDelay = d.Delay
	if err := s.wait(ctx, d.Delay); err != nil {
		return nil, err
	}
	return nil, errRetry
}

// errRetry tells the attempt loop to go round again.
var errRetry = errors.New("retry")

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
// back when the lease was lost.
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
		return nil, fmt.Errorf("checkpoint in step transaction: %w", err)
	}
	if res[0].Err != nil {
		e.lose("transactional step refused by fencing")
		exit()
	}
	if err := tx.Commit(cctx); err != nil {
		if sqlState(err) != "" {
			return nil, fmt.Errorf("commit step transaction: %w", err)
		}
		// The connection was lost during COMMIT: the activity's writes and
		// the checkpoint committed together, or neither did. The step's
		// record tells which; a retry of an attempt that did commit would
		// apply its writes twice.
		var steps map[int]store.Step
		if rerr := e.retry(e.w.writes, func(ctx context.Context) error {
			var err error
			steps, err = e.w.store.Steps(ctx, e.claim.ID)
			return err
		}); rerr != nil {
			e.abandon("learn whether a transactional step committed", rerr)
			exit()
		}
		if st := steps[s.n]; st.Status != store.StepCompleted {
			stx.connLost = true
			return nil, fmt.Errorf("commit step transaction (it did not commit): %w", err)
		}
		e.log.Warn("tenure: transactional step's COMMIT lost its connection; the step is recorded committed", "step", s.n, "error", err)
	}
	return out, nil
}

// checkpoint records the step's output. A transactional activity's
// checkpoint already committed in its own transaction. An at-most-once
// step's (or one with MaxRescues 0) is written at once, so that a crash right
// after it cannot make a step that succeeded indeterminate or exhausted. Any other step's checkpoint rides with
// the run's next write (the next attempt's start, or the run's end): one
// commit fewer per step. A crash before that write reruns the step, as a
// crash during its call would (the attempt is found lost and rescued).
//
// It reports whether it deferred the checkpoint; then ended is called once
// the checkpoint committed (true) or could not be (false).
func (s *stepRun) checkpoint(out []byte, ended func(recorded bool)) (deferred bool) {
	if s.act.Transactional() {
		return false
	}
	done := &store.StepDone{Step: s.n, Attempt: s.attempt, Output: out}
	// A step with no rescue budget is written at once too: a crash before a
	// deferred checkpoint would charge it a rescue it does not have.
	if !s.pol.AtMostOnce && s.pol.MaxRescues > 0 {
		s.e.deferred, s.e.deferredEnded = done, ended
		return true
	}
	if _, err := s.e.write(store.Write{StepDone: done}); err != nil {
		s.e.writeFailed("complete step", err)
		exit()
	}
	return false
}

// end closes the current attempt without success.
func (s *stepRun) end(a store.AttemptEnd) {
	a.Step, a.Attempt = s.n, s.attempt
	if _, err := s.e.write(store.Write{EndAttempt: &a}); err != nil {
		s.e.writeFailed("end attempt", err)
		exit()
	}
}

// giveUp records that the step gave up and returns the error the workflow
// sees. end closes the current attempt too, when it is still open.
//
// The workflow sees the same error now as when the step is replayed from
// its record (see replayedError): with a registered error type in cause's
// chain, Err is that error as decoded from the value recorded; else Err is
// cause, which replay cannot rebuild (it has the message and type only).
func (s *stepRun) giveUp(reason sdk.Reason, msg, typ string, end *store.AttemptEnd, cause ...error) error {
	if end != nil {
		end.Step, end.Attempt = s.n, s.attempt
	}
	var err error
	if len(cause) > 0 {
		err = cause[0]
	}
	var value []byte
	if s.codec != nil && err != nil {
		typ, value, err = s.encode(typ, err)
	}
	_, werr := s.e.write(store.Write{FailStep: &store.StepFailure{
		Step: s.n, Reason: reason, ErrorMessage: msg, ErrorType: typ, ErrorValue: value, End: end,
	}})
	if werr != nil {
		s.e.writeFailed("fail step", werr)
		exit()
	}
	ae := &sdk.ActivityError{Activity: s.act.Name(), Step: s.n, Reason: reason, Message: msg, Type: typ, Err: err}
	s.e.steps[s.n] = store.Step{Step: s.n, Activity: s.act.Name(), Status: store.StepFailed, Reason: reason,
		ErrorMessage: msg, ErrorType: typ, ErrorValue: value}
	return ae
}

// encode finds a registered error in err's chain and returns its type name,
// its JSON, and the error the workflow sees: the JSON decoded, as replay
// will. Without one it returns typ and err unchanged. A registered error
// that cannot be recorded (it does not encode or decode, or is larger than
// MaxPayload) is logged and leaves nothing to match, now as on replay.
func (s *stepRun) encode(typ string, err error) (string, []byte, error) {
	name, value, ok, encErr := s.codec.EncodeError(err)
	if !ok {
		return typ, nil, err
	}
	var decoded error
	if encErr == nil && len(value) > s.e.w.cfg.MaxPayload {
		encErr = fmt.Errorf("%s is %d bytes of JSON, limit %d: %w", name, len(value), s.e.w.cfg.MaxPayload, sdk.ErrPayloadTooLarge)
	}
	if encErr == nil {
		decoded, encErr = s.codec.DecodeError(name, value)
	}
	if encErr != nil {
		s.e.log.Warn("tenure: a step's error of a registered type cannot be recorded: the workflow sees its message and type only",
			"step", s.n, "error_type", name, "error", encErr)
		return name, nil, nil
	}
	return name, value, decoded
}

// wait sleeps the retry delay with the lease held, or suspends the run
// durably when the delay is longer than MaxInProcessSleep. The run's Cancel
// ends the delay with an error wrapping sdk.ErrCancelled.
func (s *stepRun) wait(ctx context.Context, d time.Duration) error {
	e := s.e
	if d > e.w.cfg.MaxInProcessSleep {
		e.ending.Store(true)
		if _, err := e.write(store.Write{Release: &store.Release{Delay: d}}); err != nil {
			e.writeFailed("suspend run", err)
			exit()
		}
		e.w.suspended.Add(1)
		e.end = SegmentEnd{Outcome: SegmentSuspended}
		exit()
	}
	if engine.Detached(ctx) {
		ctx = e.ctx // a lost lease or a shutdown still ends the wait
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	began := time.Now()
	select {
	case <-timer.C:
	case <-e.w.stopClaim:
		// Draining: hand the run over now rather than hold the shutdown.
		e.releaseAfter(max(d-time.Since(began), 0), "shutdown during a retry delay")
		exit()
	case <-ctx.Done():
		if context.Cause(ctx) == sdk.ErrCancelled {
			return fmt.Errorf("activity %q (step %d), waiting to retry: %w", s.act.Name(), s.n, sdk.ErrCancelled)
		}
		if context.Cause(ctx) == errShutdown {
			// Hand the run over with what is left of the delay.
			e.releaseAfter(max(d-time.Since(began), 0), "interrupted during a retry delay")
			exit()
		}
		e.lose("lease lost during the retry delay")
		exit()
	}
	return nil
}

// typeName is the Go type of the error a user would match on: wrappers that
// only add context (fmt.Errorf with %w, policy's markers) are looked through.
func typeName(err error) string {
	for {
		t := fmt.Sprintf("%T", err)
		inner := errors.Unwrap(err)
		if inner == nil || !(t == "*fmt.wrapError" || strings.HasPrefix(t, "*policy.") || strings.HasPrefix(t, "policy.")) {
			return t
		}
		err = inner
	}
}

// hasNULEscape reports whether the JSON b holds the escape \u0000, which
// jsonb refuses (an escaped backslash followed by "u0000" is fine).
func hasNULEscape(b []byte) bool {
	for i := bytes.Index(b, []byte(`\u0000`)); i >= 0; {
		n := 0 // backslashes ending at i, that one included
		for j := i; j >= 0 && b[j] == '\\'; j-- {
			n++
		}
		if n%2 == 1 {
			return true
		}
		k := bytes.Index(b[i+1:], []byte(`\u0000`))
		if k < 0 {
			return false
		}
		i += 1 + k
	}
	return false
}
