package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// Flow control, the worker's part (the database's is migration 16's _flow):
// a step of an activity that calls a downstream (activities.Limited) asks
// for admission in the write that records its attempt's start, and gives
// back what it took in the write that records the attempt's end. Both ride
// the group commit: no transaction of their own. A denied step's run was
// parked by that very write; the step unwinds without an attempt.

// AttemptThrottled is the Outcome of an AttemptEnd for an attempt a
// downstream's limit denied: it was never recorded and its activity never
// invoked; the run waits, charged nothing. Not an attempts.status.
const AttemptThrottled record.AttemptStatus = "throttled"

// FlowObserver is an optional interface of an Observer (the otel package
// implements it): it hears of every admission and denial under a
// downstream's limits, and of each downstream's state, about once a second.
//
// The ctx of Admitted and Denied is the attempt's, as AttemptStarted
// returned it: an attempt admitted is recorded and invoked; an attempt
// denied is neither, and AttemptEnded follows Denied with Outcome
// AttemptThrottled.
type FlowObserver interface {
	// Admitted is called when an attempt of a step calling downstream was
	// admitted under its limits, once its start is recorded.
	Admitted(ctx context.Context, downstream string)
	// Denied is called when a step's attempt was denied by cause (a
	// flow.Cause* constant): the run waits, charged nothing.
	Denied(ctx context.Context, downstream, cause string)
	// DownstreamState is called with each downstream's breaker state, its
	// capacity in use and the steps waiting on it, as the worker's sweep
	// reads them about once a second; the steps waiting are counted about
	// every 10 seconds (a lookup per step waiting), and reported as last
	// counted in between (0 as soon as no wait is open; counted at the next
	// sweep when waits are open where the last count found none).
	DownstreamState(downstream, breaker string, waiting, inUse int64)
}

// flows is the worker's record of the downstreams its code declares.
type flows struct {
	store *store.Store
	label string
	log   *slog.Logger

	mu       sync.Mutex
	declared map[string]*declaration
	names    []string          // declared, for the sweep
	breakers map[string]string // each breaker's state at the last sweep
	swept    time.Time
	waiting  map[string]int64 // each downstream's steps waiting, at the last count
	counted  time.Time
	forced   time.Time // the last count set off by waits where the count before found none
}

// declaration is one downstream's row, written once per worker process.
type declaration struct {
	limits flow.Limits
	once   sync.Once
	done   bool
	err    error
	warned map[string]bool // other limits declared under its name, logged once each (under flows.mu)
}

// declare writes d's row the first time this worker uses d; a failure is
// tried again on the next use. A second downstream of the same name with
// other limits is logged: the first declared is the one applied.
func (f *flows) declare(ctx context.Context, d *flow.Downstream) error {
	return f.declareHolds(ctx, d.Name(), d.Limits(), "attempt")
}

// declareHolds is declare of a downstream by name and limits; holds is
// "attempt" for an activities' downstream, "run" for a workflow's
// concurrency key.
func (f *flows) declareHolds(ctx context.Context, name string, limits flow.Limits, holds string) error {
	f.mu.Lock()
	decl := f.declared[name]
	if decl == nil {
		decl = &declaration{limits: limits}
		if f.declared == nil {
			f.declared = map[string]*declaration{}
		}
		f.declared[name] = decl
	} else if !decl.done && decl.err != nil {
		decl = &declaration{limits: limits} // try again
		f.declared[name] = decl
	}
	f.mu.Unlock()
	// The same declaration's limits compare equal (the same pointers) at
	// once: every step of a limited activity comes here, and formatting
	// both sides cost about 4 µs a step. Other limits are logged once, not
	// at every step that declares them.
	if decl.limits != limits {
		if applied, ignored := decl.limits.String(), limits.String(); applied != ignored && f.firstOf(decl, ignored) {
			f.log.Warn("tenure: two downstreams of one name declare different limits; the first declared applies",
				"downstream", name, "applied", applied, "ignored", ignored)
		}
	}
	decl.once.Do(func() {
		b, err := json.Marshal(decl.limits)
		if err == nil {
			err = f.store.DeclareDownstream(ctx, name, b, f.label, holds)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		decl.err, decl.done = err, err == nil
		if err == nil && !slices.Contains(f.names, name) {
			f.names = append(f.names, name)
			slices.Sort(f.names)
		}
	})
	return decl.err
}

// firstOf reports whether the limits ignored (as formatted) are declared
// under decl's name for the first time, and remembers them.
func (f *flows) firstOf(decl *declaration, ignored string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if decl.warned[ignored] {
		return false
	}
	if decl.warned == nil {
		decl.warned = map[string]bool{}
	}
	decl.warned[ignored] = true
	return true
}

// watch has the sweep cover name from now on, declared or not.
func (f *flows) watch(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Contains(f.names, name) {
		f.names = append(f.names, name)
		slices.Sort(f.names)
	}
}

// sweepEvery is how often a worker that declares downstreams sweeps them
// (store.FlowSweep): capacity of dead workers back, stalled probes woken.
const sweepEvery = time.Second

// flowCountEvery is how often a worker's sweep also counts the steps
// waiting on its downstreams, for FlowObserver.DownstreamState (its other
// sweeps report the last count, 0 when no wait is open, and count at the
// next sweep when waits are open where the last count found none, once per
// flowCountEvery): a lookup per step waiting,
// which every worker made every second (F-conc, 4,000 runs waiting: 18 ms
// a sweep, four workers).
const flowCountEvery = 10 * time.Second

// sweep runs the sweep when it is due, in the claim loop.
func (f *flows) sweep(ctx context.Context, o Observer, timeout time.Duration) {
	f.mu.Lock()
	names := slices.Clone(f.names)
	due := len(names) > 0 && time.Since(f.swept) >= sweepEvery
	counts := false
	if due {
		f.swept = time.Now()
		counts = time.Since(f.counted) >= flowCountEvery
		for _, n := range names {
			_, known := f.waiting[n]
			counts = counts || !known // a downstream not counted yet
		}
		if counts {
			f.counted = f.swept
		}
	}
	f.mu.Unlock()
	if !due {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	states, err := f.store.FlowSweep(ctx, names, counts)
	if err != nil {
		if ctx.Err() == nil {
			f.log.Warn("tenure: cannot sweep downstreams; capacity of dead workers comes back at the next sweep", "error", err)
		}
		return
	}
	fo, _ := o.(FlowObserver)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.breakers == nil {
		f.breakers = map[string]string{}
	}
	if f.waiting == nil {
		f.waiting = map[string]int64{}
	}
	if counts {
		for _, n := range names {
			f.waiting[n] = 0 // (a downstream without a row has none waiting)
		}
	}
	for _, s := range states {
		if s.Counted {
			f.waiting[s.Name] = s.Waiting
		} else {
			s.Waiting = f.waiting[s.Name]
			if s.Waiting == 0 && time.Since(f.forced) >= flowCountEvery {
				// Waits open where the last count found none: counted at
				// the next sweep, once per flowCountEvery (the waits of runs
				// that ended while waiting stay open, and count as none).
				f.counted, f.forced = time.Time{}, time.Now()
			}
		}
		if was, ok := f.breakers[s.Name]; ok && was != s.Breaker {
			f.log.Warn("tenure: a downstream's breaker changed state (audit_log, action breaker, says why)",
				"downstream", s.Name, "from", was, "to", s.Breaker, "waiting", s.Waiting)
		}
		f.breakers[s.Name] = s.Breaker
		if fo != nil {
			fo.DownstreamState(s.Name, s.Breaker, s.Waiting, s.InUse)
		}
	}
}

// stepFlow is what a step that calls a downstream asks for.
type stepFlow struct {
	downstream string
	key        string
}

// flowOf returns the step's downstream and key, or nil when act calls
// none, having the downstream's row written if this worker has not yet.
func (e *execution) flowOf(act activities.Definition, input []byte, n int) (*stepFlow, error) {
	l, ok := act.(activities.Limited)
	if !ok || l.Downstream() == nil {
		return nil, nil
	}
	d := l.Downstream()
	key, err := l.Key(input)
	if err != nil {
		return nil, fmt.Errorf("step %d: %w", n, err)
	}
	if err := e.retry(e.w.writes, func(ctx context.Context) error { return e.w.flows.declare(ctx, d) }); err != nil {
		e.abandon("declare downstream "+d.Name(), err)
		exit()
	}
	return &stepFlow{downstream: d.Name(), key: store.Text(key)}, nil
}

// take is what the step's next attempt asks for: a retry (an attempt
// after one that ended in an error) is charged to the downstream's retry
// budget; a first attempt, a rescue, or an attempt after an interrupted
// one is not.
func (s *stepRun) take() *store.FlowTake {
	if s.flow == nil {
		return nil
	}
	return &store.FlowTake{Downstream: s.flow.downstream, Key: s.flow.key, Retry: s.retrying}
}

// afterError reports whether the step's last recorded attempt, within its
// budget (not before a requeue), ended in an error: its next attempt is a
// retry.
func (s *stepRun) afterError() bool {
	switch s.prior.LastStatus {
	case record.AttemptFailed, record.AttemptTimedOut:
		return s.prior.LastAttempt > s.prior.BudgetFrom
	}
	return false
}

// begin records attempt a's start, asking its downstream, if any, to admit
// it in the same write.
func (s *stepRun) begin(a attempt, ref TraceRef) (store.WriteResult, error) {
	take := s.take()
	if take != nil {
		// A denial ends the lease in this write: a heartbeat missing it
		// meanwhile leaves the verdict to the write's result.
		s.e.ending.Store(true)
	}
	started, err := s.rec.start(a, s.policyJSON, ref, take)
	if take != nil && (err != nil || started.Denied == nil) {
		s.e.ending.Store(false)
	}
	if err == nil && started.Denied == nil {
		s.held(a, take, started.Slot)
	}
	return started, err
}

// held records that attempt a, just started, holds what its take was
// given (slot: its concurrency slot, 0 for none), until its end is written.
func (s *stepRun) held(a attempt, t *store.FlowTake, slot int32) {
	if t == nil {
		return
	}
	s.e.holding = &store.FlowGive{Downstream: t.Downstream, Key: t.Key, Outcome: store.GiveNone, Slot: slot,
		Step: int32(s.n), Attempt: int32(a.number)}
	if o, ok := s.e.w.cfg.Observer.(FlowObserver); ok {
		o.Admitted(a.actx, t.Downstream)
	}
}

// settle sets the outcome that the give of attempt a carries: an error the
// downstream may be to blame for (retried, or given up after all retries,
// or timed out) counts against its breaker. A lost or abandoned attempt
// gives nothing back: nothing more is written, and its capacity returns
// when its lease expires.
func (e *execution) settle(a attempt) {
	g := e.holding
	if g == nil {
		return
	}
	switch a.verdict {
	case succeeded:
		g.Outcome = store.GiveOK
	case retry:
		g.Outcome = store.GiveError
	case gaveUp:
		g.Outcome = store.GiveNone
		if a.end.Status == record.AttemptFailed || a.end.Status == record.AttemptTimedOut {
			switch a.fail.reason {
			case sdk.ReasonRetriesExhausted, sdk.ReasonDeadline:
				g.Outcome = store.GiveError
			}
		}
	case lost, abandoned:
		e.holding = nil
	}
}

// throttled ends attempt a, which a limit denied: its run is parked
// already, and the step unwinds. The observer hears of the attempt as
// AttemptThrottled.
func (s *stepRun) throttled(a attempt, d store.Denial) attempt {
	s.attempt--
	a.verdict, a.why, a.denial = throttled, "denied by "+d.Cause, &d
	if o, ok := s.e.w.cfg.Observer.(FlowObserver); ok {
		o.Denied(a.actx, s.flow.downstream, d.Cause)
	}
	return a
}

// throttleWakeWithin is how far ahead a worker sets a timer for a run a
// rate or a retry budget parked, rather than leave it to the poll (timers
// are shared per wakeBucket: at most 120,000 for 10 minutes, as many as
// the runs parked when fewer). With 30 s, F-rate's backlog, due up to 63 s
// ahead, started at its rate for 28 s, then at a third of it: each run
// further ahead was claimed by a poll after its turn and denied again.
const throttleWakeWithin = 10 * time.Minute

// parked ends the segment of a run a limit parked.
func (e *execution) parked(d store.Denial) {
	e.w.suspended.Add(1)
	e.w.throttled.Add(1)
	e.end = SegmentEnd{Outcome: SegmentSuspended}
	if d.Wait != store.NoDue {
		e.w.claimer.wakeWithin(d.Wait, throttleWakeWithin)
	}
}

// holdRun sets runHold to the slot of the run's workflow's concurrency
// key, when it declares one (sdk.WithConcurrency): whatever ends the run
// gives it back (a give of a slot the run does not hold frees nothing). It
// returns the error of a key that cannot be taken from the run's input.
func (e *execution) holdRun(wf sdk.Definition) error {
	cl, ok := wf.(sdk.ConcurrencyLimited)
	if !ok {
		return nil
	}
	if _, _, ok := cl.ConcurrencyLimit(); !ok {
		return nil
	}
	key, err := cl.ConcurrencyKey(e.claim.Input)
	if err != nil {
		return err
	}
	e.runHold = &store.FlowGive{Downstream: flow.WorkflowPrefix + wf.Name(), Key: store.Text(key), Outcome: store.GiveRun}
	return nil
}

// admitRun takes the slot of the run's concurrency key (see holdRun), in a
// write of its own before the workflow runs. It reports false when the run
// stops instead: parked until a run of its key ends, ended cancelled
// (sdk.CancelNewest), failed (keyErr: a key that cannot be taken from its
// input) or abandoned.
func (e *execution) admitRun(wf sdk.Definition, keyErr error) bool {
	if keyErr != nil {
		e.failRun(store.Failure{Reason: sdk.ReasonBadInput, ErrorMessage: keyErr.Error(), ErrorType: "tenure.BadConcurrencyKey"})
		return false
	}
	hold := e.runHold
	if hold == nil {
		return true
	}
	limit, pol, _ := wf.(sdk.ConcurrencyLimited).ConcurrencyLimit()
	limits := flow.Limits{Concurrency: limit}
	if err := e.retry(e.w.writes, func(ctx context.Context) error {
		return e.w.flows.declareHolds(ctx, hold.Downstream, limits, "run")
	}); err != nil {
		e.abandon("declare the workflow's concurrency key", err)
		return false
	}
	take := &store.FlowTake{Downstream: hold.Downstream, Key: hold.Key, Policy: string(pol)}
	e.ending.Store(true) // a denial ends the lease in this write
	res, err := e.write(store.Write{Take: take})
	if err != nil {
		e.writeFailed("take the workflow's concurrency slot", err)
		return false
	}
	switch d := res.Denied; {
	case d == nil:
		e.ending.Store(false)
		hold.Slot = res.Slot // 0 for a repeat's answer: its give then looks for it by the run
		return true
	case d.Cause == store.PolicyCancelNewest:
		e.runHold = nil // it holds none
		msg := fmt.Sprintf("cancelled before it ran: %d runs of concurrency key %q are in progress (policy cancel-newest)", limit, hold.Key)
		res, err := e.write(store.Write{CancelRun: &store.RunCancel{Message: msg}})
		if err != nil {
			e.writeFailed("cancel run", err)
			return false
		}
		e.w.cancelled.Add(1)
		e.end = SegmentEnd{Outcome: SegmentCancelled, RunDuration: res.Age}
		e.log.Info("tenure: run cancelled: its concurrency key has no room (cancel-newest)", "key", hold.Key)
	default:
		if o, ok := e.w.cfg.Observer.(FlowObserver); ok {
			o.Denied(e.ctx, hold.Downstream, d.Cause)
		}
		e.parked(*d)
	}
	return false
}
