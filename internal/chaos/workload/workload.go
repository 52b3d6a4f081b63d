// Package workload is the set of workflows and activities the chaos tests
// and the chaos command run on real worker processes. Every activity first
// records its invocation in a ledger table through a connection of its own
// (never the step's transaction), so the ledger counts what really ran, the
// way a remote system would see it, whatever Tenure's tables say.
//
// A run executes a Plan: a list of steps, each naming the kind of activity
// to call and how it behaves (how long it sleeps, how often it fails). The
// kinds cover the failure semantics under test: at-least-once, at-most-once,
// transactional, transiently failing, calling a downstream under flow
// control (Downstream's concurrency limit and rate), and a poison pill that
// kills the process running it; and two durable primitives that are steps without
// attempts: a durable sleep (sdk.Sleep) and the receipt of a signal
// (sdk.Receive). The primitives call no activity, so they leave no ledger
// row: whatever a crash does to them shows in Tenure's tables and the run's
// Result alone.
package workload

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

// Kind names the activity a step of a Plan calls.
type Kind string

// The kinds of step.
const (
	// AtLeastOnce records its invocation, sleeps and returns. Its context
	// ending (lost lease, shutdown) makes it return the context's error.
	AtLeastOnce Kind = "at-least-once"
	// AtMostOnce records its invocation (its effect), sleeps and returns,
	// declared policy.AtMostOnce. Once the effect is done it never reports
	// an error: when its context ends it returns success at once, because
	// the effect happened.
	AtMostOnce Kind = "at-most-once"
	// Transactional records its invocation, inserts one row into the
	// effects table in the step's transaction, sleeps and returns: the
	// effect commits with the checkpoint, exactly once.
	Transactional Kind = "transactional"
	// Flaky records its invocation and returns an error while fewer than
	// Step.Failures attempts of the step have failed, then succeeds.
	Flaky Kind = "flaky"
	// Poison records its invocation and kills its own process with
	// SIGKILL, on every attempt. Its policy allows PoisonMaxRescues rescues.
	Poison Kind = "poison"
	// Limited calls the downstream Downstream, keyed by its run's
	// Plan.Key: each attempt is admitted under its concurrency limit and
	// rate first. It records its invocation, fails as Flaky does while
	// fewer than Step.Failures attempts failed, then sleeps as AtLeastOnce
	// does (returning the context's error if the context ends).
	Limited Kind = "limited"
	// Sleep is a durable sleep of Step.SleepMS (sdk.Sleep): a step of kind
	// sleep, with no attempt and no ledger row. It adds nothing to Result.
	Sleep Kind = "sleep"
	// Receive receives the next signal named Step.Signal (sdk.Receive, with
	// Step.TimeoutMS): a step of kind signal, with no attempt and no ledger
	// row. The signal's payload, a JSON string, is appended to
	// Result.Received; a timeout fails the run.
	Receive Kind = "receive"
)

// Activity names, as recorded on steps, attempts and ledger rows.
const (
	ActivityAtLeastOnce   = "chaos.at-least-once"
	ActivityAtMostOnce    = "chaos.at-most-once"
	ActivityTransactional = "chaos.transactional"
	ActivityFlaky         = "chaos.flaky"
	ActivityPoison        = "chaos.poison"
	ActivityLimited       = "chaos.limited"
	// ActivityReconcile is called by the workflow when an at-most-once step
	// with Step.Reconcile set ended indeterminate.
	ActivityReconcile = "chaos.reconcile"
)

// WorkflowName is the name of the Plan workflow.
const WorkflowName = "chaos.plan"

// PoisonMaxRescues is the crash budget of the poison activity: its step is
// attempted PoisonMaxRescues+1 times, killing a worker each time, then
// quarantined with reason rescues_exhausted.
const PoisonMaxRescues = 2

// RetryDelay is the constant delay between attempts of every activity of the
// workload, short enough to be slept in-process with the lease held.
const RetryDelay = 20 * time.Millisecond

// The limits of Downstream, per key: a chaos run's Limited steps, with
// three workers of eight runs each, are held to them.
const (
	DownstreamName        = "chaos.downstream"
	DownstreamConcurrency = 2
	DownstreamRate        = 8 // per second
	DownstreamBurst       = 2
)

// Downstream is the downstream that Limited steps call: a concurrency
// limit and a rate per key, the default retry budget, no breaker.
var Downstream = flow.New(DownstreamName, flow.Concurrency(DownstreamConcurrency),
	flow.Rate(DownstreamRate, time.Second, DownstreamBurst))

// Calls maps the activities that call a downstream to its name, as
// invariant.FlowOptions wants them.
func Calls() map[string]string { return map[string]string{ActivityLimited: DownstreamName} }

// Step is one step of a Plan.
type Step struct {
	// Kind is the activity the step calls, or the primitive it is.
	Kind Kind `json:"kind"`
	// SleepMS is how long every attempt sleeps after recording itself; for
	// a Sleep step, the durable sleep's duration.
	SleepMS int `json:"sleep_ms,omitempty"`
	// FirstSleepMS, when positive, replaces SleepMS for the first attempt:
	// long enough for a test to kill or freeze the worker mid-flight.
	FirstSleepMS int `json:"first_sleep_ms,omitempty"`
	// Failures is how many attempts of a Flaky step fail before one succeeds.
	Failures int `json:"failures,omitempty"`
	// MaxAttempts overrides the step's retry budget when positive (default
	// policy.DefaultMaxAttempts).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Reconcile makes the workflow handle an indeterminate AtMostOnce step by
	// calling the reconcile activity instead of failing the run.
	Reconcile bool `json:"reconcile,omitempty"`
	// Stubborn makes an AtLeastOnce step ignore the end of its context and
	// return success when its sleep is over, so that a worker that lost its
	// lease still tries to record the step (and fencing must refuse it).
	Stubborn bool `json:"stubborn,omitempty"`
	// Signal is the name of the signal a Receive step receives.
	Signal string `json:"signal,omitempty"`
	// TimeoutMS is how long a Receive step waits for its signal; 0: no limit.
	TimeoutMS int `json:"timeout_ms,omitempty"`
	// Key is the key of a Limited step under Downstream's limits; the
	// workflow sets it to the Plan's.
	Key string `json:"key,omitempty"`
}

// Plan is a run's input: the steps to execute, in order.
type Plan struct {
	Steps []Step `json:"steps"`
	// Key is the key of the run's Limited steps under Downstream's limits
	// ("" is a key too). The flow invariants read it from the run's input.
	Key string `json:"key,omitempty"`
}

// Mark is what an attempt returns: who ran it, under which lease.
type Mark struct {
	Worker  string `json:"worker"`  // the worker's label
	PID     int    `json:"pid"`     // the worker's process
	Attempt int    `json:"attempt"` // the attempt number
	Epoch   int64  `json:"epoch"`   // the lease epoch it ran under
}

// Result is a completed run's output: the mark of every activity step's
// successful attempt, in step order (a reconciled step contributes the
// reconcile step's), and the payload of every signal received, in the order
// received. A Sleep step contributes nothing; a Receive step no mark.
type Result struct {
	Marks      []Mark   `json:"marks"`
	Received   []string `json:"received,omitempty"`
	Reconciled int      `json:"reconciled"` // indeterminate steps the workflow reconciled
}

// Workload holds the Plan workflow and its activities, bound to a ledger.
type Workload struct {
	// Plan is the workflow every run executes; register it on a worker, or
	// start runs of it with sdk.Start.
	Plan *sdk.Workflow[Plan, Result]

	ledger        *Ledger
	atLeastOnce   *activities.Activity[Step, Mark]
	atMostOnce    *activities.Activity[Step, Mark]
	transactional *activities.Activity[Step, Mark]
	flaky         *activities.Activity[Step, Mark]
	poison        *activities.Activity[Step, Mark]
	limited       *activities.Activity[Step, Mark]
	reconcile     *activities.Activity[Step, Mark]
}

// New returns the workload with its activities recording into ledger. A
// Workload with a nil ledger can start runs but not execute them: its
// activities fail.
func New(ledger *Ledger) *Workload {
	w := &Workload{ledger: ledger}
	short := []policy.Option{policy.Constant(RetryDelay), policy.Jitter(policy.NoJitter)}
	w.atLeastOnce = activities.New(ActivityAtLeastOnce, w.runAtLeastOnce, short...)
	w.atMostOnce = activities.New(ActivityAtMostOnce, w.runAtMostOnce, append(short, policy.AtMostOnce())...)
	w.transactional = activities.NewTx(ActivityTransactional, w.runTransactional, short...)
	w.flaky = activities.New(ActivityFlaky, w.runFlaky, short...)
	w.poison = activities.New(ActivityPoison, w.runPoison, append(short, policy.MaxRescues(PoisonMaxRescues))...)
	w.limited = activities.New(ActivityLimited, w.runLimited, short...).Calls(Downstream, func(s Step) string { return s.Key })
	w.reconcile = activities.New(ActivityReconcile, w.runReconcile, short...)
	w.Plan = sdk.NewWorkflow(WorkflowName, w.run)
	return w
}

// run is the Plan workflow: each step in order; the first step that gives up
// fails the run, unless it is an indeterminate at-most-once step to reconcile.
func (w *Workload) run(ctx context.Context, p Plan) (Result, error) {
	var r Result
	for i, s := range p.Steps {
		switch s.Kind {
		case Sleep:
			if err := sdk.Sleep(ctx, time.Duration(s.SleepMS)*time.Millisecond); err != nil {
				return r, err
			}
			continue
		case Receive:
			v, err := sdk.Receive[string](ctx, s.Signal, time.Duration(s.TimeoutMS)*time.Millisecond)
			if err != nil {
				return r, err
			}
			r.Received = append(r.Received, v)
			continue
		}
		var opts []policy.Option
		if s.MaxAttempts > 0 {
			opts = append(opts, policy.MaxAttempts(s.MaxAttempts))
		}
		var act *activities.Activity[Step, Mark]
		switch s.Kind {
		case AtLeastOnce:
			act = w.atLeastOnce
		case AtMostOnce:
			act = w.atMostOnce
		case Transactional:
			act = w.transactional
		case Flaky:
			act = w.flaky
		case Poison:
			act = w.poison
		case Limited:
			act, s.Key = w.limited, p.Key
		default:
			return r, fmt.Errorf("plan step %d: unknown kind %q", i+1, s.Kind)
		}
		m, err := sdk.Execute(ctx, act, s, opts...)
		if err != nil && s.Kind == AtMostOnce && s.Reconcile && errors.Is(err, sdk.ErrIndeterminate) {
			r.Reconciled++
			m, err = sdk.Execute(ctx, w.reconcile, s)
		}
		if err != nil {
			return r, err
		}
		r.Marks = append(r.Marks, m)
	}
	return r, nil
}

// begin records the invocation in the ledger and returns the attempt's mark.
func (w *Workload) begin(ctx context.Context) (Mark, error) {
	m, _, err := w.record(ctx)
	return m, err
}

// record is begin, returning the invocation's ledger ID too.
func (w *Workload) record(ctx context.Context) (Mark, uuid.UUID, error) {
	info, ok := activities.InfoFrom(ctx)
	if !ok {
		return Mark{}, uuid.Nil, errors.New("workload: activity called outside an attempt")
	}
	if w.ledger == nil {
		return Mark{}, uuid.Nil, policy.Permanent(errors.New("workload: no ledger: this Workload only starts runs"))
	}
	id, err := w.ledger.Record(ctx, info)
	if err != nil {
		return Mark{}, id, err
	}
	return Mark{Worker: info.Worker, PID: os.Getpid(), Attempt: info.Attempt, Epoch: info.Epoch}, id, nil
}

// sleepFor is the attempt's sleep.
func sleepFor(ctx context.Context, s Step) time.Duration {
	if info, _ := activities.InfoFrom(ctx); info.Attempt == 1 && s.FirstSleepMS > 0 {
		return time.Duration(s.FirstSleepMS) * time.Millisecond
	}
	return time.Duration(s.SleepMS) * time.Millisecond
}

// sleep waits d or until ctx ends, and reports whether it slept in full.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (w *Workload) runAtLeastOnce(ctx context.Context, s Step) (Mark, error) {
	m, err := w.begin(ctx)
	if err != nil {
		return m, err
	}
	if s.Stubborn {
		sleep(context.WithoutCancel(ctx), sleepFor(ctx, s))
		return m, nil
	}
	if !sleep(ctx, sleepFor(ctx, s)) {
		return m, context.Cause(ctx)
	}
	return m, nil
}

func (w *Workload) runAtMostOnce(ctx context.Context, s Step) (Mark, error) {
	m, err := w.begin(ctx)
	if err != nil {
		return m, err // nothing happened: safe to retry
	}
	sleep(ctx, sleepFor(ctx, s)) // the effect is done: success even if cut short
	return m, nil
}

func (w *Workload) runTransactional(ctx context.Context, tx pgx.Tx, s Step) (Mark, error) {
	m, err := w.begin(ctx)
	if err != nil {
		return m, err
	}
	info, _ := activities.InfoFrom(ctx)
	if err := w.ledger.effect(ctx, tx, info); err != nil {
		return m, err
	}
	if !sleep(ctx, sleepFor(ctx, s)) {
		return m, context.Cause(ctx)
	}
	return m, nil
}

// errTransient is what a Flaky step fails with.
var errTransient = errors.New("transient failure")

func (w *Workload) runFlaky(ctx context.Context, s Step) (Mark, error) {
	m, err := w.begin(ctx)
	if err != nil {
		return m, err
	}
	if info, _ := activities.InfoFrom(ctx); info.Errors < s.Failures {
		return m, fmt.Errorf("attempt %d: %w (%d of %d)", info.Attempt, errTransient, info.Errors+1, s.Failures)
	}
	if !sleep(ctx, sleepFor(ctx, s)) {
		return m, context.Cause(ctx)
	}
	return m, nil
}

func (w *Workload) runLimited(ctx context.Context, s Step) (_ Mark, err error) {
	m, id, err := w.record(ctx)
	if err != nil {
		return m, err
	}
	// The call's return, for the flow invariants: it stops occupying the
	// downstream here, before its attempt's end is written.
	defer func() { err = errors.Join(err, w.ledger.Returned(ctx, id, time.Now())) }()
	if info, _ := activities.InfoFrom(ctx); info.Errors < s.Failures {
		return m, fmt.Errorf("attempt %d: %w (%d of %d)", info.Attempt, errTransient, info.Errors+1, s.Failures)
	}
	if !sleep(ctx, sleepFor(ctx, s)) {
		return m, context.Cause(ctx)
	}
	return m, nil
}

func (w *Workload) runPoison(ctx context.Context, s Step) (Mark, error) {
	m, err := w.begin(ctx)
	if err != nil {
		return m, err
	}
	// Like an OOM kill or a segfault: no deferred function, no last write.
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

func (w *Workload) runReconcile(ctx context.Context, s Step) (Mark, error) {
	return w.begin(ctx)
}
