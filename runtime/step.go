package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
	n, prior, seen := e.next(store.KindActivity, act.Name())
	hash := store.InputHash(input)
	if seen && prior.InputHash != 0 && prior.InputHash != hash {
		e.inputChanged(n, act.Name(), fmt.Sprintf("activity %q", act.Name()), prior.InputHash, hash)
	}
	if seen && prior.Status == store.StepCompleted {
		return prior.Output, nil
	}
	codec, _ := engine.ErrorCodecFrom(ctx)
	if seen && prior.Status == store.StepFailed {
		return nil, e.replayedError(codec, n, prior)
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
	sf, err := e.flowOf(declared, input, n)
	if err != nil {
		return nil, fmt.Errorf("activity %q: %w", act.Name(), err)
	}
	s := &stepRun{
		e: e, n: n, act: act, input: input, pol: pol, policyJSON: polJSON, prior: prior, flow: sf,
		rec: recorder{e: e, step: n, act: act, pol: pol, codec: codec, input: hash},
	}
	out, err := s.run(ctx)
	if err == errUnwind {
		exit() // the only place a step unwinds the workflow
	}
	return out, err
}

// replayedError is the error of a step that gave up in an earlier execution:
// the one the workflow saw then (see recorder.giveUp). An error of a
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

// stepRun is the attempt loop of one step: its executor (try, in
// executor.go) makes each attempt, and its recorder writes what came of it.
type stepRun struct {
	e     *execution
	n     int
	act   activities.Definition
	input []byte
	pol   policy.Retry
	prior store.Step // the step's record; zero for a new step
	rec   recorder
	flow  *stepFlow // the downstream it calls, if any

	policyJSON []byte // pol, as recorded on its attempts
	attempt    int
	b          budget
	lastDelay  time.Duration
	prev       TraceRef // the span of the previous attempt, for links
	retrying   bool     // the next attempt follows an error: a retry, for a downstream's retry budget
	// afterInterrupted: the next attempt follows one recorded interrupted
	// (an interruption hands the run back, so only a segment's first
	// attempt can); an unanswered COMMIT is then charged (interrupted).
	afterInterrupted bool
}

// errRetry tells the attempt loop to go round again; errUnwind, that the
// run stops here: what stops it (a hand-back, a suspension, a lost lease,
// an abandonment) is done, and the workflow goroutine must unwind.
var (
	errRetry  = errors.New("retry")
	errUnwind = errors.New("unwind")
)

// run makes the step's attempts until one succeeds or the step gives up.
func (s *stepRun) run(ctx context.Context) ([]byte, error) {
	s.attempt = s.prior.LastAttempt
	s.b = budget{attempts: s.prior.LastAttempt - s.prior.BudgetFrom, errors: s.prior.Errors, rescues: s.prior.Rescues}
	s.lastDelay = s.prior.LastDelay
	s.prev = TraceRef{TraceID: s.prior.LastTraceID, SpanID: s.prior.LastSpanID}
	s.e.counts[s.n] = s.b

	rescue, err := s.rescue()
	if err != nil {
		return nil, err
	}
	s.retrying = !rescue && s.afterError()
	s.afterInterrupted = s.prior.LastAttempt > s.prior.BudgetFrom && s.prior.LastStatus == record.AttemptInterrupted
	// After an error (a suspended retry, or a restart during its delay) the
	// next attempt is due: Decide already granted it, possibly under an error
	// rule's larger budget, which only the error itself could tell again.
	for {
		if s.e.w.draining.Load() {
			s.e.release("shutdown before the next attempt")
			return nil, errUnwind
		}
		if err := s.e.cancelled(ctx, fmt.Sprintf("activity %q", s.act.Name()), s.n); err != nil {
			return nil, err
		}
		a := s.try(ctx, rescue)
		out, err := s.rec.record(a)
		if err != errRetry {
			return out, err
		}
		err = s.wait(ctx, *a.end.Delay)
		s.rec.report(a, true) // once the delay is over, as the attempt's span always ended
		if err != nil {
			return nil, err
		}
		rescue, s.retrying, s.afterInterrupted = false, true, false
	}
}

// rescue reports whether the step's next attempt rescues a lost one: the
// last attempt's outcome is unknown. b.rescues counts the lost attempts,
// this one included, which is what DecideRescue weighs (a step that gives
// up here rescued one fewer: budget.rescued). It returns the step's error
// when it gives up instead.
func (s *stepRun) rescue() (bool, error) {
	last := s.prior.LastStatus
	if s.prior.LastAttempt <= s.prior.BudgetFrom {
		last = "" // a requeue gave the step a fresh budget: earlier attempts no longer count
	}
	if last != record.AttemptLost {
		return false, nil
	}
	if s.pol.AtMostOnce {
		return false, s.rec.giveUp(failure{
			reason: sdk.ReasonIndeterminate, typ: "tenure.Indeterminate",
			msg: "attempt lost: the worker died, froze or was cut off while it ran; at-most-once: not run again",
		}, nil)
	}
	if !s.pol.DecideRescue(s.b.rescues) {
		return false, s.rec.giveUp(failure{
			reason: sdk.ReasonRescuesExhausted, typ: "tenure.RescuesExhausted",
			msg: fmt.Sprintf("%d attempts lost, budget MaxRescues=%d", s.b.rescues, s.pol.MaxRescues),
		}, nil)
	}
	return true, nil
}

// wait sleeps the retry delay with the lease held, or suspends the run
// durably when the delay is longer than MaxInProcessSleep. The run's Cancel
// ends the delay with an error wrapping sdk.ErrCancelled; errUnwind says
// the run stopped instead (suspended, handed over, or its lease lost).
func (s *stepRun) wait(ctx context.Context, d time.Duration) error {
	e := s.e
	if d > e.w.cfg.MaxInProcessSleep {
		e.park(store.Release{Delay: d}, "suspend run")
		return errUnwind
	}
	if engine.Detached(ctx) {
		ctx = e.ctx // a lost lease or a shutdown still ends the wait
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	began := time.Now()
	select {
	case <-timer.C:
		return nil
	case <-e.w.stopClaim:
		// Draining: hand the run over now rather than hold the shutdown.
		e.releaseAfter(max(d-time.Since(began), 0), "shutdown during a retry delay")
	case <-ctx.Done():
		switch context.Cause(ctx) {
		case sdk.ErrCancelled:
			return fmt.Errorf("activity %q (step %d), waiting to retry: %w", s.act.Name(), s.n, sdk.ErrCancelled)
		case errShutdown:
			// Hand the run over with what is left of the delay.
			e.releaseAfter(max(d-time.Since(began), 0), "interrupted during a retry delay")
		default:
			e.lose("lease lost during the retry delay")
		}
	}
	return errUnwind
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
