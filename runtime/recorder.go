package runtime

import (
	"fmt"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/engine"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// recorder writes what a step's attempts come to, as its executor returns
// them (attempt): an attempt's start and end, the step's checkpoint or its
// failure, the hand-back of a run an attempt was interrupted in. It tells
// the observer of each attempt's end once that is recorded; an attempt
// whose end cannot be recorded is reported lost. A write that fails stops
// the run (writeFailed): the recorder returns errUnwind, which the attempt
// loop returns to Step, and Step unwinds the workflow.
type recorder struct {
	e     *execution
	step  int
	act   activities.Definition
	pol   policy.Retry      // whether a checkpoint may ride with the next write
	codec engine.ErrorCodec // the workflow's registered error types; nil if none
	input uint64            // the hash of the step's input (store.InputHash)
}

// start records that attempt a begins. The write commits before the caller
// invokes the activity: an at-most-once step's attempt found started is
// never run again.
func (r *recorder) start(a attempt, policyJSON []byte, ref TraceRef, take *store.FlowTake) (store.WriteResult, error) {
	res, err := r.e.write(store.Write{StartAttempt: &store.AttemptStart{
		Step: r.step, Attempt: a.number, Activity: r.act.Name(), Policy: policyJSON,
		Rescue: a.rescue, Worker: r.e.w.cfg.Label, TraceID: ref.TraceID, SpanID: ref.SpanID, Take: take, InputHash: r.input,
	}})
	if err == nil && res.Denied == nil {
		r.e.w.attempts.Add(1)
	}
	return res, err
}

// record writes what came of attempt a and returns what the step returns:
// its output, or the error the workflow sees when it gave up. It returns
// errRetry when the next attempt is due after a's delay (the caller reports
// a once the delay is over: its span covers it), and errUnwind when the run
// stops here.
func (r *recorder) record(a attempt) ([]byte, error) {
	r.e.settle(a) // what the attempt's end gives back, if it took capacity
	switch a.verdict {
	case succeeded:
		return a.out, r.checkpoint(a)
	case gaveUp:
		end := a.end
		end.Step, end.Attempt = r.step, a.number
		err := r.giveUp(a.fail, &end)
		r.report(a, err != errUnwind)
		return nil, err
	case retry:
		if err := r.end(a); err != nil {
			r.report(a, false)
			return nil, err
		}
		return nil, errRetry
	case handedBack:
		if a.number > 0 {
			if err := r.end(a); err != nil {
				r.report(a, false)
				return nil, err
			}
		}
		r.e.releaseAfter(a.delay, a.why)
	case lost:
		r.e.lose(a.why)
	case abandoned:
		r.e.abandon(a.why, a.fault)
	case throttled:
		r.e.parked(*a.denial)
	}
	r.report(a, true)
	return nil, errUnwind
}

// report tells the observer how attempt a ended, or that it is lost when
// its end was not recorded. An attempt that never started (a.number 0) has
// nothing to report.
func (r *recorder) report(a attempt, recorded bool) {
	if a.number == 0 {
		return
	}
	end := a.report(recorded)
	end.Duration = time.Since(a.began)
	r.e.w.cfg.Observer.AttemptEnded(a.actx, a.info, end)
}

// report is how a ended, as the observer hears of it (its Duration aside).
func (a attempt) report(recorded bool) AttemptEnd {
	end := AttemptEnd{Outcome: record.AttemptLost, Err: a.err}
	if !recorded {
		return end
	}
	switch a.verdict {
	case succeeded:
		end.Outcome = record.AttemptSucceeded
	case throttled:
		end.Outcome = AttemptThrottled
	case gaveUp, retry, handedBack:
		end.Outcome, end.Delay, end.DelaySource = a.end.Status, a.end.Delay, a.end.DelaySource
	}
	if a.verdict == gaveUp && a.end.Status != record.AttemptCancelled {
		end.GaveUp = a.fail.reason // a cancelled step gave up for its run, not for this attempt
	}
	return end
}

// checkpoint records the step's output. A transactional activity's
// checkpoint already committed in its own transaction. An at-most-once
// step's (or one with MaxRescues 0) is written at once, so that a crash right
// after it cannot make a step that succeeded indeterminate or exhausted. Any other step's checkpoint rides with
// the run's next write (the next attempt's start, or the run's end): one
// commit fewer per step. A crash before that write reruns the step, as a
// crash during its call would (the attempt is found lost and rescued).
//
// The observer hears of the success once it is recorded: until then (and
// if the checkpoint is refused) the attempt is lost.
func (r *recorder) checkpoint(a attempt) error {
	if r.act.Transactional() {
		r.report(a, true)
		return nil
	}
	done := &store.StepDone{Step: r.step, Attempt: a.number, Output: a.out}
	// A step with no rescue budget is written at once too: a crash before a
	// deferred checkpoint would charge it a rescue it does not have.
	if !r.pol.AtMostOnce && r.pol.MaxRescues > 0 {
		took := time.Since(a.began)
		obs := r.e.w.cfg.Observer
		r.e.deferred, r.e.deferredEnded = done, func(recorded bool) {
			end := a.report(recorded)
			end.Duration = took
			obs.AttemptEnded(a.actx, a.info, end)
		}
		return nil
	}
	_, err := r.e.write(store.Write{StepDone: done})
	if err != nil {
		r.e.writeFailed("complete step", err)
		r.report(a, false)
		return errUnwind
	}
	r.report(a, true)
	return nil
}

// end closes attempt a without success.
func (r *recorder) end(a attempt) error {
	end := a.end
	end.Step, end.Attempt = r.step, a.number
	if _, err := r.e.write(store.Write{EndAttempt: &end}); err != nil {
		r.e.writeFailed("end attempt", err)
		return errUnwind
	}
	return nil
}

// giveUp records that the step gave up and returns the error the workflow
// sees (errUnwind when the write failed). end closes the current attempt
// too, when it is still open.
//
// The workflow sees the same error now as when the step is replayed from
// its record (see replayedError): with a registered error type in f.cause's
// chain, Err is that error as decoded from the value recorded; else Err is
// f.cause, which replay cannot rebuild (it has the message and type only).
func (r *recorder) giveUp(f failure, end *store.AttemptEnd) error {
	typ, err := f.typ, f.cause
	var value []byte
	if r.codec != nil && err != nil {
		typ, value, err = r.encode(typ, err)
	}
	_, werr := r.e.write(store.Write{FailStep: &store.StepFailure{
		Step: r.step, Reason: f.reason, ErrorMessage: f.msg, ErrorType: typ, ErrorValue: value, End: end,
	}})
	if werr != nil {
		r.e.writeFailed("fail step", werr)
		return errUnwind
	}
	ae := &sdk.ActivityError{Activity: r.act.Name(), Step: r.step, Reason: f.reason, Message: f.msg, Type: typ, Err: err}
	r.e.steps[r.step] = store.Step{Step: r.step, Activity: r.act.Name(), Status: store.StepFailed, Reason: f.reason,
		ErrorMessage: f.msg, ErrorType: typ, ErrorValue: value}
	return ae
}

// encode finds a registered error in err's chain and returns its type name,
// its JSON, and the error the workflow sees: the JSON decoded, as replay
// will. Without one it returns typ and err unchanged. A registered error
// that cannot be recorded (it does not encode or decode, or is larger than
// MaxPayload) is logged and leaves nothing to match, now as on replay.
func (r *recorder) encode(typ string, err error) (string, []byte, error) {
	name, value, ok, encErr := r.codec.EncodeError(err)
	if !ok {
		return typ, nil, err
	}
	var decoded error
	if encErr == nil && len(value) > r.e.w.cfg.MaxPayload {
		encErr = fmt.Errorf("%s is %d bytes of JSON, limit %d: %w", name, len(value), r.e.w.cfg.MaxPayload, sdk.ErrPayloadTooLarge)
	}
	if encErr == nil {
		decoded, encErr = r.codec.DecodeError(name, value)
	}
	if encErr != nil {
		r.e.log.Warn("tenure: a step's error of a registered type cannot be recorded: the workflow sees its message and type only",
			"step", r.step, "error_type", name, "error", encErr)
		return name, nil, nil
	}
	return name, value, decoded
}
