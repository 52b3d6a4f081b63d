// Package invariant checks, from the database alone, that Tenure kept its
// failure-semantics promises over a chaos run: every run ended properly,
// every attempt is accounted for, at-most-once steps ran at most once,
// budgets held, fencing held, signals were consumed once each and in order,
// and, when asked (Options.Flow, CheckFlow), that no downstream's limit was
// exceeded and no capacity was left behind (flow.go, flow_leaks.go).
// It reads Tenure's tables and the workload's
// ledger and effects tables (package workload), and reports figures and
// violations.
package invariant

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/chaos/workload"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
)

// Rule names one invariant.
type Rule string

// The invariants Check verifies. Each violation names one.
const (
	// RunEnded: every run is completed or failed; none is queued, running
	// (stuck) or cancelled.
	RunEnded Rule = "run-ended"
	// FailureRow: a failed run has exactly one open failure row, with a
	// reason; a completed run has none.
	FailureRow Rule = "failure-row"
	// CompletedSteps: a completed run has no step left unfinished, and its
	// failed steps are indeterminate ones the workflow reconciled.
	CompletedSteps Rule = "completed-steps"
	// AttemptNumbers: a step's attempts are numbered 1..n without a gap.
	AttemptNumbers Rule = "attempt-numbers"
	// AttemptClosed: no attempt is left running.
	AttemptClosed Rule = "attempt-closed"
	// RetryBudget: the attempts that ended in an error never exceed the
	// step's MaxAttempts.
	RetryBudget Rule = "retry-budget"
	// RescueBudget: the lost attempts never exceed the step's MaxRescues + 1
	// (the last one is what exhausts the budget).
	RescueBudget Rule = "rescue-budget"
	// RescueFlag: the attempt after a lost one is a rescue, and only that one.
	RescueFlag Rule = "rescue-flag"
	// StepOutcome: a completed step has exactly one succeeded attempt, its
	// last; any other step has none.
	StepOutcome Rule = "step-outcome"
	// EpochOrder: attempt epochs never decrease and never exceed the run's.
	EpochOrder Rule = "epoch-order"
	// Invocations: every attempt with a known outcome (succeeded, failed,
	// timed_out, interrupted) was invoked exactly once, a lost attempt at
	// most once, and nothing was invoked outside an attempt.
	Invocations Rule = "invocations"
	// AtMostOnce: an at-most-once step was invoked at most once, always.
	AtMostOnce Rule = "at-most-once"
	// AtLeastOnce: a completed at-least-once step was invoked at least once.
	AtLeastOnce Rule = "at-least-once"
	// ExactlyOnceEffect: a completed transactional step committed exactly
	// one effect row; any other transactional step none.
	ExactlyOnceEffect Rule = "exactly-once-effect"
	// OneCompletion: no run announced its end twice (two accepted
	// completions); with a listener that never lost its connection, every
	// ended run announced it exactly once.
	OneCompletion Rule = "one-completion"
	// PrimitiveSteps: a step of another kind than activity (a durable
	// sleep, a signal's receipt) has no attempt and no invocation, and a
	// completed sleep woke no earlier than its due time. The attempt rules
	// above apply to activity steps only.
	PrimitiveSteps Rule = "primitive-steps"
	// SignalOnce: a signal is consumed by a completed signal step of its
	// name, whose output is its payload; every completed signal step
	// consumed exactly one signal; per run and name, signals are consumed
	// in the order sent, none skipped (no pending signal older than a
	// consumed one).
	SignalOnce Rule = "signal-once"
)

// Rules lists every rule in report order, with what it promises.
var Rules = []struct {
	Rule Rule
	Says string
}{
	{RunEnded, "every run completed or failed, none stuck"},
	{FailureRow, "failed run: exactly one open failure row with a reason"},
	{CompletedSteps, "completed run: every step completed (or reconciled)"},
	{OneCompletion, "no run has two successful completions"},
	{AttemptNumbers, "attempt numbers contiguous per step"},
	{AttemptClosed, "every attempt row closed (none running)"},
	{RetryBudget, "errors <= MaxAttempts"},
	{RescueBudget, "lost <= MaxRescues + 1"},
	{RescueFlag, "the attempt after a lost one is a rescue"},
	{StepOutcome, "completed step: one succeeded attempt, the last"},
	{EpochOrder, "attempt epochs non-decreasing, <= run epoch"},
	{Invocations, "ledger: known outcome = 1 invocation, lost <= 1"},
	{AtMostOnce, "at-most-once step: <= 1 invocation"},
	{AtLeastOnce, "completed at-least-once step: >= 1 invocation"},
	{ExactlyOnceEffect, "transactional step: one committed effect iff completed"},
	{PrimitiveSteps, "sleep/signal step: no attempt, no invocation; woke >= due"},
	{SignalOnce, "signal consumed once, by its step, in send order"},
	{NeverOverLimit, "calls in flight <= concurrency, attempts started per interval <= rate + burst"},
	{NoCapacityLeaked, "no slot, throttle or waiter left to a run that no longer holds or waits"},
}

// Violation is one broken invariant.
type Violation struct {
	Rule   Rule
	RunID  uuid.UUID
	Step   int // 0: the run as a whole
	Detail string
}

// String describes the violation on one line.
func (v Violation) String() string {
	if v.Step > 0 {
		return fmt.Sprintf("%s: run %s step %d: %s", v.Rule, v.RunID, v.Step, v.Detail)
	}
	return fmt.Sprintf("%s: run %s: %s", v.Rule, v.RunID, v.Detail)
}

// Report is what Check found.
type Report struct {
	Runs        int            // runs in the schema
	RunStatus   map[string]int // run status → runs
	Failures    map[string]int // failure reason → failed runs
	Steps       int            // steps of all runs
	Attempts    map[string]int // attempt status → attempts
	Rescues     int            // attempts flagged rescue
	Invocations int            // ledger rows
	// LostInvoked and LostNotInvoked split the lost attempts: the function
	// had started (the ledger has its row), or the worker died between
	// committing the attempt and invoking it.
	LostInvoked, LostNotInvoked int
	// ExtraInvocations is, over completed at-least-once steps, the
	// invocations beyond one per step and one per attempt that returned an
	// error or was interrupted: the reruns caused by lost attempts. It
	// equals the lost attempts of those steps that had been invoked.
	ExtraInvocations int
	// LostOnCompletedSteps is the number of lost attempts, invoked or not,
	// on completed at-least-once steps.
	LostOnCompletedSteps int
	AtMostOnceSteps      int // steps of at-most-once activities
	Indeterminate        int // of which ended indeterminate
	Effects              int // committed transactional effect rows
	PrimitiveSteps       int // steps of another kind than activity
	Signals              int // signals sent
	SignalsConsumed      int // of which consumed
	Notices              int // completion notices received, when counted
	// Flow is what CheckFlow found, when Options.Flow asked for it.
	Flow       *FlowReport
	Violations []Violation
	// Checked counts, per rule, the runs or steps it was checked on.
	Checked map[Rule]int
}

// OK reports whether no invariant was violated.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// Options are inputs of Check beyond the database.
type Options struct {
	// Notices maps a run to the completion notices a listener saw for it
	// (see Listener). Nil: the one-completion rule is not checked.
	Notices map[uuid.UUID]int
	// NoticesComplete says the listener never lost its connection, so an
	// ended run with no notice is a violation too.
	NoticesComplete bool
	// Flow, when not nil, checks the flow-control rules too (CheckFlow).
	Flow *FlowOptions
}

type runRow struct {
	status       store.RunStatus
	epoch        int64
	openFailures int
	reason       policy.Reason
}

type stepRow struct {
	runID       uuid.UUID
	step        int
	kind        store.StepKind
	activity    string
	status      store.StepStatus
	reason      policy.Reason
	budgetFrom  int
	maxAttempts int
	maxRescues  int
	atMostOnce  bool
	tx          bool
	effects     int
	wokeEarly   bool // a completed sleep whose wake is recorded before its due time
}

type attemptRow struct {
	attempt int
	status  store.AttemptStatus
	epoch   int64
	rescue  bool
	ledger  int
}

type stepKey struct {
	run  uuid.UUID
	step int
}

// Check reads the runs of schema and checks every invariant. An error means
// the check could not be made, not that an invariant failed.
func Check(ctx context.Context, pool *pgxpool.Pool, schema string, opts Options) (*Report, error) {
	s := pgx.Identifier{schema}.Sanitize()
	r := &Report{
		RunStatus: map[string]int{}, Failures: map[string]int{}, Attempts: map[string]int{},
		Checked: map[Rule]int{},
	}
	runs, err := readRuns(ctx, pool, s)
	if err != nil {
		return nil, err
	}
	steps, err := readSteps(ctx, pool, s)
	if err != nil {
		return nil, err
	}
	attempts, err := readAttempts(ctx, pool, s)
	if err != nil {
		return nil, err
	}
	if err := r.checkLedger(ctx, pool, s); err != nil {
		return nil, err
	}
	if err := r.checkSignals(ctx, pool, s); err != nil {
		return nil, err
	}
	r.checkRuns(runs, steps, opts)
	for _, st := range steps {
		if st.kind != store.KindActivity {
			r.checkPrimitive(st, attempts[stepKey{st.runID, st.step}])
			continue
		}
		r.checkStep(st, attempts[stepKey{st.runID, st.step}], runs[st.runID])
	}
	if opts.Flow != nil {
		if r.Flow, err = CheckFlow(ctx, pool, schema, *opts.Flow); err != nil {
			return nil, err
		}
		r.Violations = append(r.Violations, r.Flow.Violations...)
		for rule, n := range r.Flow.Checked {
			r.Checked[rule] += n
		}
	}
	sort.SliceStable(r.Violations, func(i, j int) bool { return r.Violations[i].Rule < r.Violations[j].Rule })
	return r, nil
}

// readRuns reads the runs of schema s (sanitized) with their open failures.
func readRuns(ctx context.Context, pool *pgxpool.Pool, s string) (map[uuid.UUID]*runRow, error) {
	runs := map[uuid.UUID]*runRow{}
	rows, err := pool.Query(ctx, `
		SELECT r.id, r.status, r.epoch, count(f.id), coalesce(min(f.reason), '')
		FROM `+s+`.runs r
		LEFT JOIN `+s+`.failures f ON f.run_id = r.id AND f.requeued_at IS NULL
		GROUP BY r.id`)
	if err != nil {
		return nil, fmt.Errorf("invariant: read runs: %w", err)
	}
	var id uuid.UUID
	var rr runRow
	if _, err := pgx.ForEachRow(rows, []any{&id, &rr.status, &rr.epoch, &rr.openFailures, &rr.reason}, func() error {
		c := rr
		runs[id] = &c
		return nil
	}); err != nil {
		return nil, fmt.Errorf("invariant: read runs: %w", err)
	}
	return runs, nil
}

// readSteps reads the steps of schema s (sanitized), in the order of their
// runs and numbers.
func readSteps(ctx context.Context, pool *pgxpool.Pool, s string) ([]*stepRow, error) {
	var steps []*stepRow
	rows, err := pool.Query(ctx, `
		SELECT s.run_id, s.step, s.kind, s.activity, s.status, coalesce(s.reason, ''), s.budget_from,
		       coalesce((s.policy->>'max_attempts')::int, 0), coalesce((s.policy->>'max_rescues')::int, 0),
		       coalesce((s.policy->>'at_most_once')::bool, false),
		       s.activity = $1,
		       (SELECT count(*) FROM `+s+`.effects e WHERE e.run_id = s.run_id AND e.step = s.step),
		       coalesce(s.kind = 'sleep' AND s.status = 'completed' AND s.finished_at < s.due_at, false)
		FROM `+s+`.steps s
		ORDER BY s.run_id, s.step`, workload.ActivityTransactional)
	if err != nil {
		return nil, fmt.Errorf("invariant: read steps: %w", err)
	}
	var st stepRow
	if _, err := pgx.ForEachRow(rows, []any{&st.runID, &st.step, &st.kind, &st.activity, &st.status, &st.reason,
		&st.budgetFrom, &st.maxAttempts, &st.maxRescues, &st.atMostOnce, &st.tx, &st.effects, &st.wokeEarly}, func() error {
		c := st
		steps = append(steps, &c)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("invariant: read steps: %w", err)
	}
	return steps, nil
}

// readAttempts reads the attempts of schema s (sanitized) by step, in the
// order of their numbers, each with its invocations.
func readAttempts(ctx context.Context, pool *pgxpool.Pool, s string) (map[stepKey][]attemptRow, error) {
	attempts := map[stepKey][]attemptRow{}
	rows, err := pool.Query(ctx, `
		SELECT a.run_id, a.step, a.attempt, a.status, a.epoch, a.is_rescue,
		       (SELECT count(*) FROM `+s+`.ledger l WHERE l.run_id = a.run_id AND l.step = a.step AND l.attempt = a.attempt)
		FROM `+s+`.attempts a
		ORDER BY a.run_id, a.step, a.attempt`)
	if err != nil {
		return nil, fmt.Errorf("invariant: read attempts: %w", err)
	}
	var k stepKey
	var a attemptRow
	if _, err := pgx.ForEachRow(rows, []any{&k.run, &k.step, &a.attempt, &a.status, &a.epoch, &a.rescue, &a.ledger}, func() error {
		attempts[k] = append(attempts[k], a)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("invariant: read attempts: %w", err)
	}
	return attempts, nil
}

// checkLedger reports the ledger rows that belong to no attempt (an
// invocation nobody recorded) and counts the invocations and effects.
func (r *Report) checkLedger(ctx context.Context, pool *pgxpool.Pool, s string) error {
	rows, err := pool.Query(ctx, `
		SELECT l.run_id, l.step, l.attempt FROM `+s+`.ledger l
		WHERE NOT EXISTS (SELECT 1 FROM `+s+`.attempts a
		                  WHERE a.run_id = l.run_id AND a.step = l.step AND a.attempt = l.attempt)`)
	if err != nil {
		return fmt.Errorf("invariant: read ledger: %w", err)
	}
	var k stepKey
	var orphan int
	if _, err := pgx.ForEachRow(rows, []any{&k.run, &k.step, &orphan}, func() error {
		r.add(Invocations, k.run, k.step, "invocation of attempt %d, which has no attempt row", orphan)
		return nil
	}); err != nil {
		return fmt.Errorf("invariant: read ledger: %w", err)
	}
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+s+`.ledger), (SELECT count(*) FROM `+s+`.effects)`).
		Scan(&r.Invocations, &r.Effects); err != nil {
		return fmt.Errorf("invariant: count ledger: %w", err)
	}
	return nil
}

func (r *Report) add(rule Rule, run uuid.UUID, step int, format string, args ...any) {
	r.Violations = append(r.Violations, Violation{Rule: rule, RunID: run, Step: step, Detail: fmt.Sprintf(format, args...)})
}

func (r *Report) checkRuns(runs map[uuid.UUID]*runRow, steps []*stepRow, opts Options) {
	unfinished := map[uuid.UUID][]string{}
	for _, st := range steps {
		if st.status == store.StepCompleted || st.status == store.StepFailed && st.reason == policy.Indeterminate {
			continue
		}
		unfinished[st.runID] = append(unfinished[st.runID], fmt.Sprintf("step %d %s (%s)", st.step, st.status, st.reason))
	}
	r.Runs = len(runs)
	for id, run := range runs {
		r.RunStatus[string(run.status)]++
		r.Checked[RunEnded]++
		switch run.status {
		case store.RunCompleted:
			r.Checked[FailureRow]++
			if run.openFailures != 0 {
				r.add(FailureRow, id, 0, "completed with %d open failure rows", run.openFailures)
			}
			r.Checked[CompletedSteps]++
			if u := unfinished[id]; len(u) > 0 {
				r.add(CompletedSteps, id, 0, "completed with %s", strings.Join(u, ", "))
			}
		case store.RunFailed:
			r.Checked[FailureRow]++
			r.Failures[string(run.reason)]++
			if run.openFailures != 1 || run.reason == "" {
				r.add(FailureRow, id, 0, "failed with %d open failure rows (reason %q)", run.openFailures, run.reason)
			}
		default:
			r.add(RunEnded, id, 0, "status %s", run.status)
		}
		if opts.Notices == nil {
			continue
		}
		r.Checked[OneCompletion]++
		n := opts.Notices[id]
		r.Notices += n
		ended := run.status == store.RunCompleted || run.status == store.RunFailed
		switch {
		case n > 1:
			r.add(OneCompletion, id, 0, "%d completion notices: more than one end was accepted", n)
		case n == 0 && ended && opts.NoticesComplete:
			r.add(OneCompletion, id, 0, "ended (%s) without a completion notice", run.status)
		}
	}
}

// checkStep checks an activity step st of run (nil if the run has no row)
// with its attempts as: their numbers, epochs and outcomes, its budgets,
// and how often it was invoked.
func (r *Report) checkStep(st *stepRow, as []attemptRow, run *runRow) {
	r.Steps++
	key := st.runID
	for _, rule := range []Rule{AttemptNumbers, AttemptClosed, RetryBudget, RescueBudget, RescueFlag, StepOutcome, EpochOrder, Invocations} {
		r.Checked[rule]++
	}
	t := r.checkAttempts(st, as, run)
	if t.errs > st.maxAttempts {
		r.add(RetryBudget, key, st.step, "%d errors, MaxAttempts %d", t.errs, st.maxAttempts)
	}
	if t.lostCharged > st.maxRescues+1 {
		r.add(RescueBudget, key, st.step, "%d lost attempts, MaxRescues %d", t.lostCharged, st.maxRescues)
	}
	completed := st.status == store.StepCompleted
	switch {
	case completed && (t.succeeded != 1 || !t.lastSucceeded):
		r.add(StepOutcome, key, st.step, "completed with %d succeeded attempts (last succeeded: %v)", t.succeeded, t.lastSucceeded)
	case !completed && t.succeeded != 0:
		r.add(StepOutcome, key, st.step, "%s with %d succeeded attempts", st.status, t.succeeded)
	}
	if st.atMostOnce {
		r.AtMostOnceSteps++
		r.Checked[AtMostOnce]++
		if st.reason == policy.Indeterminate {
			r.Indeterminate++
		}
		if t.invocations > 1 {
			r.add(AtMostOnce, key, st.step, "at-most-once step invoked %d times", t.invocations)
		}
	} else if completed {
		r.Checked[AtLeastOnce]++
		if t.invocations < 1 {
			r.add(AtLeastOnce, key, st.step, "completed without an invocation")
		}
		r.ExtraInvocations += t.invocations - t.known
		r.LostOnCompletedSteps += t.lost
	}
	if st.tx {
		r.Checked[ExactlyOnceEffect]++
		want := 0
		if completed {
			want = 1
		}
		if st.effects != want {
			r.add(ExactlyOnceEffect, key, st.step, "%s with %d committed effects, want %d", st.status, st.effects, want)
		}
	}
}

// attemptTally is what checkAttempts counts of a step's attempts.
type attemptTally struct {
	errs          int // failed or timed out, charged to the retry budget
	lost          int
	lostCharged   int // lost, charged to the rescue budget
	succeeded     int
	invocations   int // ledger rows
	known         int // attempts that ended with a known outcome
	lastSucceeded bool
}

// checkAttempts checks each attempt of an activity step st of run (nil if
// the run has no row) on its own and against the one before it, and counts
// them for the checks of the step as a whole.
func (r *Report) checkAttempts(st *stepRow, as []attemptRow, run *runRow) attemptTally {
	key := st.runID
	var t attemptTally
	for i, a := range as {
		r.Attempts[string(a.status)]++
		t.invocations += a.ledger
		if a.rescue {
			r.Rescues++
		}
		if a.attempt != i+1 {
			r.add(AttemptNumbers, key, st.step, "attempt %d at position %d", a.attempt, i+1)
		}
		if i > 0 && a.epoch < as[i-1].epoch {
			r.add(EpochOrder, key, st.step, "attempt %d epoch %d after epoch %d", a.attempt, a.epoch, as[i-1].epoch)
		}
		if run != nil && a.epoch > run.epoch {
			r.add(EpochOrder, key, st.step, "attempt %d epoch %d above the run's %d", a.attempt, a.epoch, run.epoch)
		}
		if afterLost := i > 0 && as[i-1].status == store.AttemptLost; a.rescue != afterLost {
			r.add(RescueFlag, key, st.step, "attempt %d rescue=%v after a %s attempt", a.attempt, a.rescue, prev(as, i))
		}
		t.lastSucceeded = false
		switch a.status {
		case store.AttemptRunning:
			r.add(AttemptClosed, key, st.step, "attempt %d still running", a.attempt)
		case store.AttemptSucceeded:
			t.succeeded++
			t.lastSucceeded = true
		case store.AttemptFailed, store.AttemptTimedOut:
			if a.attempt > st.budgetFrom {
				t.errs++
			}
		case store.AttemptLost:
			t.lost++
			if a.attempt > st.budgetFrom {
				t.lostCharged++
			}
			if a.ledger > 0 {
				r.LostInvoked++
			} else {
				r.LostNotInvoked++
			}
		}
		switch a.status {
		case store.AttemptSucceeded, store.AttemptFailed, store.AttemptTimedOut, store.AttemptInterrupted:
			t.known++
			if a.ledger != 1 {
				r.add(Invocations, key, st.step, "attempt %d ended %s with %d invocations, want 1", a.attempt, a.status, a.ledger)
			}
		case store.AttemptLost:
			if a.ledger > 1 {
				r.add(Invocations, key, st.step, "lost attempt %d invoked %d times", a.attempt, a.ledger)
			}
		}
	}
	return t
}

// checkPrimitive checks a step of another kind than activity: it has no
// attempt (so no invocation either) and a sleep did not wake early.
func (r *Report) checkPrimitive(st *stepRow, as []attemptRow) {
	r.Steps++
	r.PrimitiveSteps++
	r.Checked[PrimitiveSteps]++
	for _, a := range as {
		r.Attempts[string(a.status)]++
		r.add(PrimitiveSteps, st.runID, st.step, "%s step has attempt %d (%s, %d invocations)", st.kind, a.attempt, a.status, a.ledger)
	}
	if st.wokeEarly {
		r.add(PrimitiveSteps, st.runID, st.step, "sleep recorded completed before its due time")
	}
}

// checkSignals checks the signals table against the signal steps.
func (r *Report) checkSignals(ctx context.Context, pool *pgxpool.Pool, s string) error {
	// One row per signal sent, with the step that consumed it; then one per
	// completed signal step that no signal names as its consumer (orphan).
	rows, err := pool.Query(ctx, `
		SELECT false AS orphan, g.run_id, coalesce(g.consumed_step, 0), g.consumed_step IS NOT NULL,
		       coalesce(st.kind, ''), coalesce(st.activity, ''), coalesce(st.status, ''), g.name,
		       st.output IS NOT DISTINCT FROM g.payload,
		       (SELECT count(*) FROM `+s+`.signals o WHERE o.run_id = g.run_id AND o.consumed_step = g.consumed_step),
		       (SELECT count(*) FROM `+s+`.signals o WHERE o.run_id = g.run_id AND o.name = g.name
		           AND o.id < g.id AND (o.consumed_step IS NULL OR o.consumed_step > g.consumed_step))
		FROM `+s+`.signals g
		LEFT JOIN `+s+`.steps st ON st.run_id = g.run_id AND st.step = g.consumed_step
		UNION ALL
		SELECT true, st.run_id, st.step, false, st.kind, st.activity, st.status, st.activity, false, 0, 0
		FROM `+s+`.steps st
		WHERE st.kind = 'signal' AND st.status = 'completed'
		  AND NOT EXISTS (SELECT FROM `+s+`.signals g WHERE g.run_id = st.run_id AND g.consumed_step = st.step)`)
	if err != nil {
		return fmt.Errorf("invariant: read signals: %w", err)
	}
	var (
		orphan, consumed, samePayload bool
		run                           uuid.UUID
		step                          int
		kind, activity, status, name  string
		byStep, overtaken             int
	)
	if _, err := pgx.ForEachRow(rows, []any{&orphan, &run, &step, &consumed, &kind, &activity, &status, &name,
		&samePayload, &byStep, &overtaken}, func() error {
		r.Checked[SignalOnce]++
		if orphan {
			// It made a payload up, or replayed a signal another step consumed.
			r.add(SignalOnce, run, step, "signal step %q completed without consuming a signal", activity)
			return nil
		}
		r.Signals++
		if !consumed {
			return nil
		}
		r.SignalsConsumed++
		switch {
		case kind != string(store.KindSignal) || activity != name || status != string(store.StepCompleted):
			r.add(SignalOnce, run, step, "signal %q consumed by a %s step %q (%s)", name, kind, activity, status)
		case !samePayload:
			r.add(SignalOnce, run, step, "signal %q: the step's output is not the payload it consumed", name)
		case byStep != 1:
			r.add(SignalOnce, run, step, "step consumed %d signals", byStep)
		case overtaken > 0:
			r.add(SignalOnce, run, step, "signal %q consumed while %d sent before it are pending or consumed later", name, overtaken)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("invariant: read signals: %w", err)
	}
	return nil
}

// optional says whether a rule is checked only when Options ask for it.
func optional(rule Rule) bool {
	return rule == OneCompletion || rule == NeverOverLimit || rule == NoCapacityLeaked
}

func prev(as []attemptRow, i int) string {
	if i == 0 {
		return "no"
	}
	return string(as[i-1].status)
}

// Write prints the figures and one line per rule (checked, violations),
// then the first violations, as a table.
func (r *Report) Write(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "runs\t%d\t%s\n", r.Runs, counts(r.RunStatus))
	fmt.Fprintf(tw, "failures\t%d\t%s\n", r.RunStatus[string(store.RunFailed)], counts(r.Failures))
	fmt.Fprintf(tw, "steps\t%d\tat-most-once %d (indeterminate %d)\n", r.Steps, r.AtMostOnceSteps, r.Indeterminate)
	total := 0
	for _, n := range r.Attempts {
		total += n
	}
	fmt.Fprintf(tw, "attempts\t%d\t%s; rescues %d\n", total, counts(r.Attempts), r.Rescues)
	fmt.Fprintf(tw, "invocations\t%d\tlost attempts invoked %d, not yet invoked %d\n", r.Invocations, r.LostInvoked, r.LostNotInvoked)
	fmt.Fprintf(tw, "at-least-once reruns\t%d\textra invocations on completed steps (lost attempts there: %d)\n", r.ExtraInvocations, r.LostOnCompletedSteps)
	fmt.Fprintf(tw, "transactional effects\t%d\tcommitted rows\n", r.Effects)
	fmt.Fprintf(tw, "primitive steps\t%d\tsleeps and signal receipts; signals sent %d, consumed %d\n", r.PrimitiveSteps, r.Signals, r.SignalsConsumed)
	_ = tw.Flush()
	if r.Flow != nil {
		r.Flow.Write(w)
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	byRule := map[Rule]int{}
	for _, v := range r.Violations {
		byRule[v.Rule]++
	}
	fmt.Fprintln(tw, "invariant\tchecked\tviolations\tresult")
	for _, rl := range Rules {
		res := "ok"
		if byRule[rl.Rule] > 0 {
			res = "VIOLATED"
		}
		checked := fmt.Sprint(r.Checked[rl.Rule])
		if _, ok := r.Checked[rl.Rule]; !ok && optional(rl.Rule) {
			checked, res = "-", "not checked"
		}
		fmt.Fprintf(tw, "%s: %s\t%s\t%d\t%s\n", rl.Rule, rl.Says, checked, byRule[rl.Rule], res)
	}
	_ = tw.Flush()
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(w, "... and %d more violations\n", len(r.Violations)-i)
			break
		}
		fmt.Fprintln(w, "VIOLATION", v)
	}
}

// counts formats a map of counts as "a 3, b 1", largest first.
func counts(m map[string]int) string {
	keys := slices.Collect(maps.Keys(m))
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
