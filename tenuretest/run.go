package tenuretest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// Start starts a run of wf with input in on the env's client (see
// sdk.Start) and returns its handle; it fails the test if the run cannot be
// started.
func Start[In, Out any](e *Env, wf *sdk.Workflow[In, Out], in In, opts ...sdk.StartOption) *sdk.Run[Out] {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	run, err := sdk.Start(ctx, e.Client, wf, in, opts...)
	if err != nil {
		e.t.Fatalf("tenuretest: start %s: %v", wf.Name(), err)
	}
	return run
}

// Result waits for the run to end and returns what run.Result returns: its
// output, or the *sdk.RunError of a failed run, or sdk.ErrCancelled. When
// the run has not ended within the env's Timeout (default 30s), Result
// fails the test, saying where the run stands and what its attempts were.
func Result[Out any](e *Env, run *sdk.Run[Out]) (Out, error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	out, err := run.Result(ctx)
	if err != nil && ctx.Err() != nil {
		e.t.Fatalf("tenuretest: run %s did not end within %s: %s", run.ID, e.timeout, e.describe(run.ID))
	}
	return out, err
}

// History returns every attempt of the run, in order of step and attempt,
// as the attempts table holds them (see operator.Operator.History).
func (e *Env) History(runID uuid.UUID) []record.Attempt {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	h, err := e.Operator.History(ctx, runID)
	if err != nil {
		e.t.Fatalf("tenuretest: history of run %s: %v", runID, err)
	}
	return h
}

// Timeline returns the run's attempts as short lines, one per attempt, for
// tests to compare: "<step>.<attempt> <activity> <status>", with " rescue"
// appended to an attempt that followed a lost one. For example:
//
//	[1.1 charge failed 1.2 charge succeeded 2.1 ship lost 2.2 ship succeeded rescue]
func (e *Env) Timeline(runID uuid.UUID) []string {
	e.t.Helper()
	return timeline(e.History(runID))
}

func timeline(h []record.Attempt) []string {
	out := make([]string, len(h))
	for i, a := range h {
		out[i] = fmt.Sprintf("%d.%d %s %s", a.Step, a.Attempt, a.Activity, a.Status)
		if a.Rescue {
			out[i] += " rescue"
		}
	}
	return out
}

// Crash simulates a crash of the worker running the run, in the middle of
// what it is doing (typically an activity's attempt: synchronise with it,
// e.g. through a channel from an Override, before calling Crash). The
// run's lease is ended at once, by the database clock: the holder is fenced
// out, so nothing it writes for the run from then on is accepted, and a
// worker of the env, woken at once, reclaims the run as it would after a
// real crash once the lease expired. It finds the attempt that was running
// and records it lost; the step is then rescued (a new attempt, charged to
// MaxRescues), or, for an at-most-once activity, fails with
// sdk.ErrIndeterminate. Crash returns without waiting for that.
//
// Go cannot kill a goroutine: the crashed attempt's function keeps running
// in the test process until it returns, and whatever it returns is
// discarded. Its context is cancelled, with cause activities.ErrLeaseLost,
// as soon as the env's worker reclaims the run: make a blocked function
// return on ctx.Done(). Crash fails the test when the run is not running
// (queued, or already ended).
func (e *Env) Crash(runID uuid.UUID) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := e.store.ExpireLease(ctx, runID); err != nil {
		if errors.Is(err, store.ErrNotRunning) {
			err = fmt.Errorf("%w: no worker holds it, so there is nothing to crash (wait until its activity has started)", err)
		}
		e.t.Fatalf("tenuretest: crash run %s: %v", runID, err)
	}
}

// RequireFailed waits for the run to end, as Result does, and fails the
// test unless the run failed with the given reason (an sdk.Reason*
// constant; "" accepts any). It returns the run's failure row: the step and
// activity that gave up, its attempt, error and rescue counts, its last
// error.
func (e *Env) RequireFailed(runID uuid.UUID, reason sdk.Reason) record.Failure {
	e.t.Helper()
	r := e.wait(runID)
	if r.Status != record.RunFailed || r.Failure == nil {
		e.t.Fatalf("tenuretest: run %s %s, want it failed with reason %q: %s", runID, r.Status, reason, e.describe(runID))
	}
	f := *r.Failure
	if reason != "" && f.Reason != reason {
		e.t.Fatalf("tenuretest: run %s failed with reason %q (step %d, %s: %s), want %q", runID, f.Reason, f.Step, f.Activity, f.ErrorMessage, reason)
	}
	return f
}

// wait polls the run until it ends, or fails the test after the timeout.
func (e *Env) wait(runID uuid.UUID) store.Run {
	e.t.Helper()
	deadline := time.Now().Add(e.timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		r, err := e.store.GetRun(ctx, runID)
		cancel()
		if err != nil {
			e.t.Fatalf("tenuretest: read run %s: %v", runID, err)
		}
		if r.Status.Terminal() {
			return r
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("tenuretest: run %s did not end within %s: %s", runID, e.timeout, e.describe(runID))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// describe says where a run stands, for a failing test's message.
func (e *Env) describe(runID uuid.UUID) string {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	r, err := e.store.GetRun(ctx, runID)
	if err != nil {
		return err.Error()
	}
	msg := fmt.Sprintf("status %s", r.Status)
	if r.Status == "queued" && !e.workflows[r.Workflow] {
		msg += fmt.Sprintf(" (no worker of the env runs workflow %q: register it with Workflows)", r.Workflow)
	}
	h, err := e.store.Attempts(ctx, runID)
	if err != nil {
		return msg + "; " + err.Error()
	}
	if len(h) == 0 {
		return msg + ", no attempt yet"
	}
	return msg + ", attempts [" + strings.Join(timeline(h), ", ") + "]"
}
