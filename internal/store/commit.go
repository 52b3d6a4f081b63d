package store

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Write is everything one run's worker records in one commit: optionally the
// checkpoint of a step whose attempt succeeded, then at most one of each
// other part, applied in this order: StepDone, EndAttempt, FailStep, Mark,
// Receive, SetEvent, StartChild, StartAttempt, then one end of the lease
// (CompleteRun, FailRun, CancelRun or Release).
// Every part is fenced by Lease; a Write is applied whole or, when the lease
// is lost, not at all.
type Write struct {
	Lease Lease
	// Again marks a write sent before whose outcome its writer did not
	// learn (a connection lost during COMMIT, a flush that outlasted the
	// writer's wait): it may have committed. Only then does an admission
	// look for the attempt it would record (see FlowTake), one lookup per
	// take that a first try does not need.
	Again bool
	// StepDone records a step's output and closes its attempt as succeeded.
	StepDone *StepDone
	// EndAttempt closes an attempt that ended without success.
	EndAttempt *AttemptEnd
	// FailStep records that a step gave up; its End, if any, closes the
	// step's last attempt.
	FailStep *StepFailure
	// Mark records a step of a kind other than activity (a sleep, a signal's
	// timeout, a child's end, a recorded value), or moves it on; Marks are
	// more of them, written after the fact (short sleeps, patches), whose
	// results are not returned.
	Mark  *StepMark
	Marks []*StepMark
	// Receive consumes a signal, or records the step waiting for one.
	Receive *SignalReceive
	// SetEvent sets an event of the run.
	SetEvent *EventSet
	// StartChild starts a child run.
	StartChild *ChildStart
	// StartAttempt records an attempt before its activity is invoked.
	StartAttempt *AttemptStart
	// CompleteRun ends the run with its output.
	CompleteRun *RunOutput
	// FailRun ends the run with its failure row.
	FailRun *Failure
	// CancelRun ends the run as cancelled, after Cancel.
	CancelRun *RunCancel
	// Release gives up the lease and queues the run again.
	Release *Release
	// Gives give back the capacity of the run's last admitted attempt (see
	// AttemptStart.Take) and, at the run's end, of its workflow's
	// concurrency key; they are applied before a take of the same write.
	Gives []FlowGive
	// Take admits the run under its workflow's concurrency key (a write of
	// its own, at the start of an execution): denied, the run is parked
	// (WriteResult.Denied), or to be ended cancelled (cause
	// PolicyCancelNewest).
	Take *FlowTake
	// WakeParent is set when the run is a child: a parent waiting for it is
	// woken when this write ends it.
	WakeParent bool
}

// StepDone is a step whose attempt returned its output.
type StepDone struct {
	Step    int
	Attempt int
	Output  []byte // JSON
}

// RunOutput is a workflow's JSON output.
type RunOutput struct{ Output []byte }

// Release hands a run back to the queue, due after Delay (0: at once), or,
// with UntilStep, at that step's due time (never, without one: until a
// signal, a child's end or a cancel wakes it). WaitFor says what the run
// waits for ("sleep", "signal:<name>", "child:<id>"), for people reading
// runs.waiting_for.
type Release struct {
	Delay     time.Duration
	WaitFor   string
	UntilStep int
}

// WriteResult is the outcome of one Write of a Commit.
type WriteResult struct {
	// Err is nil when the write committed, or ErrLeaseLost when its fence
	// refused it (nothing of it was written).
	Err error
	// Elapsed is, for a StartAttempt, the time since the step's first
	// attempt started, by the database clock.
	Elapsed time.Duration
	// Age is, for a run's end, the run's age.
	Age time.Duration
	// Marked is, for a Mark or a Receive, what the step now records.
	Marked Marked
	// Denied is set, with Err nil, when the write's StartAttempt.Take was
	// refused by a limit: the attempt was not recorded, the run was parked
	// (its lease given up) and the rest of the write applied.
	Denied *Denial
	// Slot is, for a StartAttempt whose Take was admitted, the concurrency
	// slot it took (0: none, or not known), for its give (FlowGive.Slot).
	Slot int32
}

// Commit applies many runs' writes in one transaction and one round trip: one
// multi-row statement per kind of part, each fenced per run, then one NOTIFY
// for all the runs it ended. It returns one result per write, in order. A
// write whose lease was lost gets ErrLeaseLost and never fails another's; an
// error of the database (connection, statement) is returned for the whole
// batch, which then committed nothing.
//
// db must not be inside a transaction: a pgx batch outside one is a single
// implicit transaction, so the batch commits once, and no part is
// acknowledged before that commit.
//
// Fencing without blocking the heartbeat: the fence of a step-level part
// takes FOR KEY SHARE on the run's row, which holds off what changes the
// run's epoch (a claim, or ExpireLease, locks the row FOR UPDATE) until the
// commit, but not the heartbeat's renewal of the lease.
func (s *Store) Commit(ctx context.Context, db Batcher, writes []Write) ([]WriteResult, error) {
	var c commitBatch
	for i := range writes {
		c.add(i, &writes[i])
	}
	b := &pgx.Batch{}
	c.queue(s, b)
	res := s.send(ctx, db, planWrite, b)
	fenced, flow, err := c.read(res)
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, s.wrap("commit", err)
	}
	out := make([]WriteResult, len(writes))
	for i := range writes {
		w := &writes[i]
		id := w.Lease
		ok := true
		for k := range kinds {
			if c.has[k][i] && !fenced[k].has(id) {
				ok = false
			}
		}
		// A run's end is its write's last part and is fenced like the
		// others, in the same transaction: when it finds the run already
		// ended by this very write (a repeat, see endFence), the earlier
		// parts, which need the run running, found nothing to do because
		// that earlier try applied them.
		for _, k := range endKinds {
			if c.has[k][i] {
				ok = fenced[k].has(id)
			}
		}
		if d, no := flow.denied[id]; no && c.flow.takes[i] { // a take of its own: no other part to fence
			out[i].Denied = &d
			continue
		}
		if !ok {
			out[i].Err = ErrLeaseLost
			continue
		}
		out[i].Elapsed = fenced[kindStart].ms[id]
		if c.flow.takes[i] {
			out[i].Slot = flow.slots[id]
		}
		for _, k := range endKinds {
			if c.has[k][i] {
				out[i].Age = fenced[k].ms[id]
			}
		}
		if m := w.Mark; m != nil {
			out[i].Marked = fenced[kindMark].marked[markKey{id, m.Step}]
		}
		if r := w.Receive; r != nil {
			out[i].Marked = fenced[kindReceive].marked[markKey{id, r.Step}]
		}
	}
	return out, nil
}

// kind is one multi-row statement of a commit.
type kind int

const (
	kindStepDone kind = iota
	kindEnd
	kindFailStep
	kindMark
	kindSlept
	kindReceive
	kindSetEvent
	kindStartChild
	kindStart
	kindComplete
	kindFail
	kindCancel
	kindRelease
	kinds
)

// endKinds are the statements that end a lease.
var endKinds = []kind{kindComplete, kindFail, kindCancel, kindRelease}

// commitBatch gathers the columns of each statement.
type commitBatch struct {
	has [kinds]map[int]bool // write index -> has that part

	done struct {
		ids             []uuidParam
		epochs          []int64
		steps, attempts []int32
		outputs         []jsonParam
	}
	end struct {
		ids                   []uuidParam
		epochs                []int64
		steps, attempts       []int32
		status, msg, typ, stk []string
		delays                []*int64
		sources               []string
	}
	failStep struct {
		ids                  []uuidParam
		epochs               []int64
		steps                []int32
		reasons, msgs, types []string
		values               []string // JSON as text, "" for none: sent as text in every exec mode
	}
	start struct {
		ids                           []uuidParam
		epochs                        []int64
		steps, attempts               []int32
		activities, workers, traceIDs []string
		spanIDs                       []string
		policies                      []jsonParam
		rescues                       []bool
		inputHashes                   []*int64  // nil: none
		holdDownstreams, holdKeys     []*string // nil: no take
	}
	complete struct {
		ids             []uuidParam
		epochs          []int64
		outputs         []jsonParam
		steps, attempts []int32      // the last step's checkpoint, 0 for none
		stepOutputs     []*jsonParam // nil for none
	}
	fail struct {
		ids                          []uuidParam
		epochs                       []int64
		steps                        []*int32
		activities                   []*string
		attempts, errs, rescues      []int32
		reasons, msgs, types, stacks []string
	}
	marks struct {
		ids                   []uuidParam
		epochs                []int64
		steps                 []int32
		kinds, names, status  []string
		outputs               []*string
		dueMS                 []*int64
		dueAt                 []*time.Time
		beganMS, wokeMS       []int64
		reasons, msgs, errTyp []string
	}
	slept struct {
		ids                    []uuidParam
		epochs                 []int64
		steps                  []int32
		dueMS, beganMS, wokeMS []int64
	}
	receive struct {
		ids      []uuidParam
		epochs   []int64
		steps    []int32
		names    []string
		timeouts []*int64
	}
	event struct {
		ids    []uuidParam
		epochs []int64
		steps  []int32
		keys   []string
		values []jsonParam
	}
	child struct {
		ids               []uuidParam
		epochs            []int64
		steps             []int32
		children          []uuidParam
		workflows, queues []string
		priorities        []int32
		inputs            []jsonParam
		traceparents      []string
		inputHashes       []*int64
	}
	cancel struct {
		ids    []uuidParam
		epochs []int64
		msgs   []string
	}
	release struct {
		ids        []uuidParam
		epochs     []int64
		delays     []int64
		waitFor    []string
		untilSteps []int32
	}
	flow         flowParts   // capacity taken and given back
	waiting      []uuidParam // runs released to wait for a signal or a child
	parents      []uuidParam // child runs this batch ends
	parentEpochs []int64
	ended        struct { // runs this batch ends, announced on the done channel
		ids    []uuidParam
		epochs []int64
	}
	wakeRuns bool // a run was released due at once

	order    []kind // the statements queued, in order
	flowAt   int    // the call of _flow is read before order[flowAt]; -1: none
	notifies int    // the notices queued after them
}

func (c *commitBatch) mark(k kind, i int) {
	if c.has[k] == nil {
		c.has[k] = map[int]bool{}
	}
	c.has[k][i] = true
}

// add gathers the parts of write i: those of its step, its primitives and
// its run's end, each into the columns of its statement.
func (c *commitBatch) add(i int, w *Write) {
	id, ep := uuidArg(w.Lease.RunID), w.Lease.Epoch
	if d := w.StepDone; d != nil && w.CompleteRun == nil { // else written with the run's end
		c.mark(kindStepDone, i)
		c.done.ids, c.done.epochs = append(c.done.ids, id), append(c.done.epochs, ep)
		c.done.steps, c.done.attempts = append(c.done.steps, int32(d.Step)), append(c.done.attempts, int32(d.Attempt))
		c.done.outputs = append(c.done.outputs, jsonArg(d.Output))
	}
	end := w.EndAttempt
	if w.FailStep != nil && w.FailStep.End != nil {
		e := *w.FailStep.End
		e.Step = w.FailStep.Step
		if e.Status == "" {
			e.Status = AttemptFailed
		}
		end = &e
	}
	if end != nil {
		c.mark(kindEnd, i)
		e := &c.end
		e.ids, e.epochs = append(e.ids, id), append(e.epochs, ep)
		e.steps, e.attempts = append(e.steps, int32(end.Step)), append(e.attempts, int32(end.Attempt))
		e.status, e.msg = append(e.status, string(end.Status)), append(e.msg, text(end.ErrorMessage))
		e.typ, e.stk = append(e.typ, text(end.ErrorType)), append(e.stk, text(end.ErrorStack))
		e.delays, e.sources = append(e.delays, delayMS(end.Delay)), append(e.sources, end.DelaySource)
	}
	if f := w.FailStep; f != nil {
		c.mark(kindFailStep, i)
		x := &c.failStep
		x.ids, x.epochs, x.steps = append(x.ids, id), append(x.epochs, ep), append(x.steps, int32(f.Step))
		x.reasons, x.msgs, x.types = append(x.reasons, string(f.Reason)), append(x.msgs, text(f.ErrorMessage)), append(x.types, text(f.ErrorType))
		x.values = append(x.values, string(f.ErrorValue))
	}
	c.addPrimitives(i, w, id, ep)
	c.flow.add(i, w, id, ep)
	if a := w.StartAttempt; a != nil {
		c.mark(kindStart, i)
		x := &c.start
		x.ids, x.epochs = append(x.ids, id), append(x.epochs, ep)
		x.steps, x.attempts = append(x.steps, int32(a.Step)), append(x.attempts, int32(a.Attempt))
		x.activities, x.policies = append(x.activities, a.Activity), append(x.policies, jsonArg(a.Policy))
		x.rescues, x.workers = append(x.rescues, a.Rescue), append(x.workers, a.Worker)
		x.traceIDs, x.spanIDs = append(x.traceIDs, a.TraceID), append(x.spanIDs, a.SpanID)
		x.inputHashes = append(x.inputHashes, hashArg(a.InputHash))
		var ds, key *string
		if a.Take != nil {
			ds, key = &a.Take.Downstream, &a.Take.Key
		}
		x.holdDownstreams, x.holdKeys = append(x.holdDownstreams, ds), append(x.holdKeys, key)
	}
	c.addRunEnd(i, w, id, ep)
}

// addRunEnd gathers the parts that end or release the run: its completion,
// failure or cancellation, its release, and the wake of its parent.
func (c *commitBatch) addRunEnd(i int, w *Write, id uuidParam, ep int64) {
	if r := w.CompleteRun; r != nil {
		c.mark(kindComplete, i)
		x := &c.complete
		x.ids, x.epochs, x.outputs = append(x.ids, id), append(x.epochs, ep), append(x.outputs, jsonArg(r.Output))
		var step, attempt int32
		var out *jsonParam
		if d := w.StepDone; d != nil {
			o := jsonArg(d.Output)
			step, attempt, out = int32(d.Step), int32(d.Attempt), &o
		}
		x.steps, x.attempts, x.stepOutputs = append(x.steps, step), append(x.attempts, attempt), append(x.stepOutputs, out)
		c.ended.ids, c.ended.epochs = append(c.ended.ids, id), append(c.ended.epochs, ep)
	}
	if f := w.FailRun; f != nil {
		c.mark(kindFail, i)
		x := &c.fail
		var step *int32
		var activity *string
		if f.Step > 0 {
			n, a := int32(f.Step), f.Activity
			step, activity = &n, &a
		}
		x.ids, x.epochs = append(x.ids, id), append(x.epochs, ep)
		x.steps, x.activities = append(x.steps, step), append(x.activities, activity)
		x.attempts, x.errs, x.rescues = append(x.attempts, int32(f.Attempts)), append(x.errs, int32(f.Errors)), append(x.rescues, int32(f.Rescues))
		x.reasons, x.msgs = append(x.reasons, string(f.Reason)), append(x.msgs, text(f.ErrorMessage))
		x.types, x.stacks = append(x.types, text(f.ErrorType)), append(x.stacks, text(f.ErrorStack))
		c.ended.ids, c.ended.epochs = append(c.ended.ids, id), append(c.ended.epochs, ep)
	}
	if f := w.CancelRun; f != nil {
		c.mark(kindCancel, i)
		x := &c.cancel
		x.ids, x.epochs, x.msgs = append(x.ids, id), append(x.epochs, ep), append(x.msgs, text(f.Message))
		c.ended.ids, c.ended.epochs = append(c.ended.ids, id), append(c.ended.epochs, ep)
	}
	if r := w.Release; r != nil {
		c.mark(kindRelease, i)
		x := &c.release
		x.ids, x.epochs, x.delays = append(x.ids, id), append(x.epochs, ep), append(x.delays, r.Delay.Milliseconds())
		x.waitFor, x.untilSteps = append(x.waitFor, r.WaitFor), append(x.untilSteps, int32(r.UntilStep))
		if r.Delay <= 0 && r.UntilStep == 0 && r.WaitFor == "" {
			c.wakeRuns = true
		}
		if r.WaitFor != "" && r.WaitFor != "sleep" {
			c.waiting = append(c.waiting, id)
		}
	}
	if w.WakeParent && (w.CompleteRun != nil || w.FailRun != nil || w.CancelRun != nil) {
		c.parents, c.parentEpochs = append(c.parents, id), append(c.parentEpochs, ep)
	}
}

// addPrimitives gathers the parts of the durable primitives.
func (c *commitBatch) addPrimitives(i int, w *Write, id uuidParam, ep int64) {
	for _, m := range w.Marks {
		if m.Kind != KindSleep { // a patch: a mark like any other
			c.addMark(i, m, id, ep)
			continue
		}
		// Sleeps recorded after the fact: a lean insert of their own.
		c.mark(kindSlept, i)
		x := &c.slept
		x.ids, x.epochs, x.steps = append(x.ids, id), append(x.epochs, ep), append(x.steps, int32(m.Step))
		var due time.Duration // a recorded sleep's wake: its row exists, only completed
		if !m.Began.IsZero() {
			due = m.Due - time.Since(m.Began)
		}
		x.dueMS = append(x.dueMS, due.Milliseconds())
		x.beganMS, x.wokeMS = append(x.beganMS, ago(m.Began)), append(x.wokeMS, ago(m.Woke))
	}
	if m := w.Mark; m != nil {
		c.addMark(i, m, id, ep)
	}
	c.addWaits(i, w, id, ep)
}

// addMark gathers step mark m of write i.
func (c *commitBatch) addMark(i int, m *StepMark, id uuidParam, ep int64) {
	c.mark(kindMark, i)
	x := &c.marks
	x.ids, x.epochs, x.steps = append(x.ids, id), append(x.epochs, ep), append(x.steps, int32(m.Step))
	x.kinds, x.names, x.status = append(x.kinds, string(m.Kind)), append(x.names, m.Name), append(x.status, string(m.Status))
	var out *string
	if m.Output != nil {
		o := string(m.Output)
		out = &o
	}
	x.outputs = append(x.outputs, out)
	var at *time.Time
	if !m.DueAt.IsZero() {
		t := m.DueAt
		at = &t
	}
	var ms *int64 // NULL: no due time
	if m.Kind == KindSleep && at == nil {
		d := m.Due
		if !m.Began.IsZero() {
			d -= time.Since(m.Began) // due Due after Began, on the database's clock
		}
		dms := d.Milliseconds()
		ms = &dms
	}
	x.dueMS, x.dueAt = append(x.dueMS, ms), append(x.dueAt, at)
	x.beganMS, x.wokeMS = append(x.beganMS, ago(m.Began)), append(x.wokeMS, ago(m.Woke))
	x.reasons, x.msgs, x.errTyp = append(x.reasons, m.Reason), append(x.msgs, text(m.ErrorMessage)), append(x.errTyp, text(m.ErrorType))
}

// addWaits gathers write i's receive, event and child.
func (c *commitBatch) addWaits(i int, w *Write, id uuidParam, ep int64) {
	if r := w.Receive; r != nil {
		c.mark(kindReceive, i)
		x := &c.receive
		x.ids, x.epochs, x.steps, x.names = append(x.ids, id), append(x.epochs, ep), append(x.steps, int32(r.Step)), append(x.names, r.Name)
		var t *int64
		if r.Timeout > 0 {
			ms := max(r.Timeout.Milliseconds(), 1)
			t = &ms
		}
		x.timeouts = append(x.timeouts, t)
	}
	if e := w.SetEvent; e != nil {
		c.mark(kindSetEvent, i)
		x := &c.event
		x.ids, x.epochs, x.steps = append(x.ids, id), append(x.epochs, ep), append(x.steps, int32(e.Step))
		x.keys, x.values = append(x.keys, e.Key), append(x.values, jsonArg(e.Value))
	}
	if s := w.StartChild; s != nil {
		c.mark(kindStartChild, i)
		x := &c.child
		x.ids, x.epochs, x.steps = append(x.ids, id), append(x.epochs, ep), append(x.steps, int32(s.Step))
		x.children, x.workflows, x.queues = append(x.children, uuidArg(s.ID)), append(x.workflows, s.Workflow), append(x.queues, s.Queue)
		x.priorities, x.inputs, x.traceparents = append(x.priorities, int32(s.Priority)), append(x.inputs, jsonArg(s.Input)), append(x.traceparents, s.Traceparent)
		x.inputHashes = append(x.inputHashes, hashArg(s.InputHash))
		c.wakeRuns = true
	}
}

// The fence of the step-level statements: the runs this batch still holds.
// FOR KEY SHARE conflicts with the FOR UPDATE of claims and ExpireLease
// (which change the epoch) but not with the heartbeat's update of the lease
// expiry, nor with a worker applying a cancel's wake.
// Each run is looked up by its primary key (LATERAL, and by its id and epoch
// alone, so that no partial index of runs by status matches; OFFSET 0 keeps
// the status condition from being pushed into it: with statistics taken
// while no run was running, the planner read the whole of runs_lease_idx
// for each row), its status checked on the row locked.
const fence = `
	f AS (
		SELECT x.* FROM x, LATERAL (
			SELECT r.status FROM {schema}.runs r WHERE r.id = x.run_id AND r.epoch = x.epoch
			OFFSET 0 FOR KEY SHARE) AS held
		WHERE held.status = 'running')`

// Steps and attempts updated by a commit are found through their primary
// key by a row comparison that cannot be hashed or merged, (key) >= (f's)
// AND (key) <= (f's): equality, as a range over the whole key, which the
// index positions on exactly and a join can only look up row by row. A
// plain join, UPDATE … FROM f WHERE key = f's key, was planned (measured,
// with generic plans built while the tables were young) as a scan of the
// whole table, for every commit. Unlike an update by ctid, the range is
// checked again on the newest version of a row another transaction updated
// meanwhile (a late try of the same write), so that version is updated,
// not skipped.
const (
	sameStep    = `(s.run_id, s.step) >= (f.run_id, f.step) AND (s.run_id, s.step) <= (f.run_id, f.step)`
	sameAttempt = `(a.run_id, a.step, a.attempt) >= (f.run_id, f.step, f.attempt)
		AND (a.run_id, a.step, a.attempt) <= (f.run_id, f.step, f.attempt)`
)

// Every commit and claim is planned with planWrite: no sequential or bitmap
// scan, generic plans, and no JIT. Every statement of a commit reads its rows
// by key, one lookup per row (a bitmap scan per lookup costs more than an
// index scan); a sequential scan was chosen where the statistics were those
// of a young table, and kept in the cached generic plan. Generic plans: a
// custom plan of the claim cost more to plan (0.4 ms) than to run. No JIT:
// the cost of the row-by-row lookups passes jit_above_cost once the tables
// hold a history, and compiling cost 30 ms a statement. A transactional
// step's checkpoint sends the settings in the step's transaction, after the
// activity's own statements, which they do not touch.

// A step's output and its attempt's success. Idempotent, like every part of
// a commit: a write repeated after an ambiguous outcome finds the attempt
// closed and the step completed, and changes nothing.
const sqlStepDone = `
	WITH x AS (
		SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::int[], $4::int[], $5::jsonb[])
			AS x(run_id, epoch, step, attempt, output)),` + fence + `,
	a AS (
		UPDATE {schema}.attempts a SET status = 'succeeded', ended_at = now(), hold_key = NULL
		FROM f WHERE ` + sameAttempt + ` AND a.status = 'running'),
	s AS (
		UPDATE {schema}.steps s SET status = 'completed', output = f.output, finished_at = now()
		FROM f WHERE ` + sameStep + ` AND s.status = 'running')
	SELECT run_id, epoch, 0::float8 FROM f`

// Attempts that ended without success, with the delay chosen before the next.
const sqlEndAttempt = `
	WITH x AS (
		SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::int[], $4::int[], $5::text[], $6::text[],
		                     $7::text[], $8::text[], $9::bigint[], $10::text[])
			AS x(run_id, epoch, step, attempt, status, error_message, error_type, error_stack, delay_ms, delay_source)),` + fence + `,
	a AS (
		UPDATE {schema}.attempts a
		SET status = f.status, ended_at = now(), error_message = f.error_message,
		    error_type = nullif(f.error_type, ''), error_stack = nullif(f.error_stack, ''),
		    delay_ms = f.delay_ms, delay_source = nullif(f.delay_source, ''), hold_key = NULL
		FROM f WHERE ` + sameAttempt + ` AND a.status = 'running')
	SELECT run_id, epoch, 0::float8 FROM f`

// Steps that gave up: the error is returned to the workflow again on replay,
// decoded from error_value when the workflow registered its type.
const sqlFailStep = `
	WITH x AS (
		SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[])
			AS x(run_id, epoch, step, reason, error_message, error_type, error_value)),` + fence + `,
	s AS (
		UPDATE {schema}.steps s
		SET status = 'failed', reason = f.reason, error_message = f.error_message,
		    error_type = nullif(f.error_type, ''), error_value = nullif(f.error_value, '')::jsonb, finished_at = now()
		FROM f WHERE ` + sameStep + ` AND s.status = 'running')
	SELECT run_id, epoch, 0::float8 FROM f`

// Attempt rows, committed before their activities are invoked: an attempt
// still running under an old epoch is how a crash is told from an error. A
// step is created by its first attempt; an attempt resets the run's backstop
// reclaim count (written only when it is not already zero). Returns, per run,
// the time since the step's first attempt started.
const sqlStartAttempt = `
	WITH x AS (
		SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::int[], $4::int[], $5::text[], $6::jsonb[],
		                     $7::bool[], $8::text[], $9::text[], $10::text[], $11::bigint[], $12::text[], $13::text[])
			AS x(run_id, epoch, step, attempt, activity, policy, rescue, worker, trace_id, span_id, input_hash,
			     hold_downstream, hold_key)),
	f AS (
		SELECT x.*, held.reclaims FROM x, LATERAL (
			SELECT r.status, r.reclaims FROM {schema}.runs r WHERE r.id = x.run_id AND r.epoch = x.epoch
			OFFSET 0 FOR KEY SHARE) AS held
		WHERE held.status = 'running'),
	adm AS MATERIALIZED ( -- parsed once, not once per attempt (a batch of 100 parsed 100 × 7 KB)
		SELECT nullif(current_setting('tenure.admitted', true), '')::jsonb AS j,
		       nullif(current_setting('tenure.admitted_at', true), '')::timestamptz AS at),
	bs AS (
		UPDATE {schema}.runs r SET reclaims = 0
		FROM f WHERE r.id >= f.run_id AND r.id <= f.run_id AND f.reclaims > 0),
	st AS (
		INSERT INTO {schema}.steps AS s (run_id, step, activity, status, policy, input_hash)
		SELECT run_id, step, activity, 'running', policy, input_hash FROM f
		ON CONFLICT (run_id, step) DO UPDATE SET policy = EXCLUDED.policy, status = 'running',
			input_hash = coalesce(s.input_hash, EXCLUDED.input_hash)
		-- never a step that ended: a late try of this write, committing
		-- after the step's checkpoint, must not make it run again
		WHERE s.status NOT IN ('completed', 'failed')
		RETURNING run_id, first_started_at),
	a AS (
		-- An attempt admitted under a limit starts when it was admitted
		-- (_flow's tenure.admitted, by run; tenure.admitted_at, every
		-- attempt under a downstream, from _flow_commit's fast path): after
		-- the end that made room for it committed, where the transaction's
		-- start may be before it.
		-- One admitted under a downstream names it, and its key: it holds
		-- a unit of the key's count until its end (migration 28).
		INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, is_rescue, epoch, worker, trace_id, span_id, started_at,
		                               hold_downstream, hold_key)
		SELECT run_id, step, attempt, activity, 'running', rescue, epoch, worker, nullif(trace_id, ''), nullif(span_id, ''),
		       coalesce((SELECT (adm.j ->> f.run_id::text)::timestamptz FROM adm),
		                (SELECT adm.at FROM adm WHERE f.hold_downstream IS NOT NULL), now()), hold_downstream, hold_key
		FROM f
		ON CONFLICT (run_id, step, attempt) DO NOTHING)
	SELECT st.run_id, f.epoch, extract(epoch FROM now() - st.first_started_at)::float8 * 1000 FROM st JOIN f USING (run_id)`

// The fence of the statements that end runs: each run looked up by its
// primary key (by id and epoch alone, as in fence) and locked for the
// UPDATE that follows. That UPDATE finds each run through the primary key
// too, by a join condition that cannot be hashed or merged, r.id >= f.run_id
// AND r.id <= f.run_id (equality, as a range): the only join left is a
// lookup per row of f. (With r.id = f.run_id, plans cached while the table
// was small hashed f against a scan of the whole table, for every commit
// after; with the ctid of the row locked, an UPDATE found nothing when a
// heartbeat's renewal committed during the statement, as the version locked
// is then one the statement's snapshot does not see.)
//
// Idempotent: a run found already in the status this statement gives it, at
// the same epoch, was ended by this very write, committed by an earlier try
// whose outcome the worker did not learn (a connection lost during COMMIT).
// Only the holder of that epoch could have ended it so (claims and cancels
// change the epoch), so the repeat is answered as a success and writes
// nothing: no second failure row, no second notice.
const endFence = `
	f AS (
		SELECT x.*, held.status AS was FROM x, LATERAL (
			SELECT r.status FROM {schema}.runs r WHERE r.id = x.run_id AND r.epoch = x.epoch
			OFFSET 0 FOR NO KEY UPDATE) AS held
		WHERE held.status IN ('running', {ended}))`

// endFenceFor is endFence for a statement that leaves runs in status ended.
func endFenceFor(ended RunStatus) string {
	return strings.Replace(endFence, "{ended}", "'"+string(ended)+"'", 1)
}

// strayAttempts closes, for each run a statement ends, every attempt still
// recorded running but the one the statement itself closes (which except
// names): its end's write was lost while the worker went on with the run,
// which happens when a failover promotes a standby that had not received
// it. Recorded lost, its outcome unknown to the database, so that no
// attempt is ever left running under an ended run. The run's attempts are
// read through the primary key's range of the run (a lookup per run, as in
// sameAttempt, never a scan).
func strayAttempts(except string) string {
	return `
	stray AS (
		UPDATE {schema}.attempts a
		SET status = 'lost', ended_at = now(), hold_key = NULL,
		    error_message = 'its end was never recorded while its run went on: the write was lost (a failover to a standby that had not received it, say)'
		FROM f WHERE f.was = 'running' AND a.run_id >= f.run_id AND a.run_id <= f.run_id AND a.status = 'running' ` + except + `)`
}

// Completed runs, each with the checkpoint of its last step when the write
// carries one (step > 0): the run's end fences it, so the commonest write of
// all, a workflow's last step and its end, is one statement and one lock of
// its run, not two. Returns each run's age (0 for a repeat, which, like the
// checkpoint, an earlier try applied).
var sqlCompleteRun = `
	WITH x AS (
		SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::jsonb[], $4::int[], $5::int[], $6::jsonb[])
			AS x(run_id, epoch, output, step, attempt, step_output)),` + endFenceFor(RunCompleted) + `,` +
	strayAttempts("AND NOT (a.step = f.step AND a.attempt = f.attempt)") + `,
	a AS (
		UPDATE {schema}.attempts a SET status = 'succeeded', ended_at = now(), hold_key = NULL
		FROM f WHERE f.step > 0 AND f.was = 'running' AND ` + sameAttempt + ` AND a.status = 'running'),
	s AS (
		UPDATE {schema}.steps s SET status = 'completed', output = f.step_output, finished_at = now()
		FROM f WHERE f.step > 0 AND f.was = 'running' AND ` + sameStep + ` AND s.status = 'running'),
	u AS (
		UPDATE {schema}.runs r
		SET status = 'completed', output = f.output, finished_at = now(), updated_at = now(),
		    claimant = NULL, lease_expires_at = NULL
		FROM f WHERE r.id >= f.run_id AND r.id <= f.run_id AND f.was = 'running'
		RETURNING r.id, r.epoch, extract(epoch FROM now() - r.created_at)::float8 * 1000 AS ms)
	SELECT id, epoch, ms FROM u
	UNION ALL SELECT run_id, epoch, 0 FROM f WHERE was <> 'running'`

// Failed runs and their failure rows, in one statement: a failed run always
// has exactly one open failure row. Returns each run's age (0 for a repeat).
var sqlFailRun = `
	WITH x AS (
		SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::int[], $4::text[], $5::int[], $6::int[], $7::int[],
		                     $8::text[], $9::text[], $10::text[], $11::text[])
			AS x(run_id, epoch, step, activity, attempts, errors, rescues, reason, error_message, error_type, error_stack)),` + endFenceFor(RunFailed) + `,` + strayAttempts("") + `,
	r AS (
		UPDATE {schema}.runs r
		SET status = 'failed', error_message = f.error_message, finished_at = now(), updated_at = now(),
		    claimant = NULL, lease_expires_at = NULL
		FROM f WHERE r.id >= f.run_id AND r.id <= f.run_id AND f.was = 'running'
		RETURNING r.id, r.epoch, r.workflow, r.created_at),
	fr AS (
		INSERT INTO {schema}.failures
			(run_id, workflow, reason, step, activity, attempts, errors, rescues, error_message, error_type, error_stack)
		SELECT r.id, r.workflow, f.reason, f.step, f.activity, f.attempts, f.errors, f.rescues,
		       f.error_message, f.error_type, nullif(f.error_stack, '')
		FROM r JOIN f ON f.run_id = r.id)
	SELECT id, epoch, extract(epoch FROM now() - created_at)::float8 * 1000 FROM r
	UNION ALL SELECT run_id, epoch, 0 FROM f WHERE was <> 'running'`

// Runs handed back to the queue (durable suspension, or hand-off at
// shutdown).
var sqlRelease = `
	WITH x AS (
		SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::text[], $5::int[])
			AS x(run_id, epoch, delay_ms, wait_for, until_step)),` + endFenceFor(RunQueued) + `,
	u AS (
		UPDATE {schema}.runs r
		SET status = 'queued',
		    -- A cancel requested meanwhile wakes the run at once: a worker
		    -- applying its wake locks the row, so this UPDATE sees its mark
		    -- (it reads the newest version of the row it updates), or the
		    -- wake, applied after, finds the run waiting.
		    run_after = CASE WHEN r.cancel_requested_at IS NOT NULL THEN now()
		                     WHEN f.until_step > 0
		                     THEN coalesce((SELECT s.due_at FROM {schema}.steps s
		                                    WHERE s.run_id = f.run_id AND s.step = f.until_step), 'infinity')
		                     ELSE now() + f.delay_ms * interval '1 millisecond' END,
		    waiting_for = nullif(f.wait_for, ''),
		    claimant = NULL, lease_expires_at = NULL, updated_at = now()
		FROM f WHERE r.id >= f.run_id AND r.id <= f.run_id AND f.was = 'running'
		RETURNING r.id, r.epoch)
	SELECT id, epoch, 0::float8 FROM u
	UNION ALL SELECT run_id, epoch, 0 FROM f WHERE was <> 'running'`

// The runs a batch ended, 200 IDs a notice (PostgreSQL's payload limit is
// 8000 bytes). finished_at is the transaction's time only for runs ended by
// this transaction.
const sqlNotifyEnded = `
	SELECT pg_notify($1, string_agg(id::text, ','))
	FROM (SELECT r.id, (row_number() OVER () - 1) / 200 AS chunk
	      FROM unnest($2::uuid[], $3::bigint[]) AS x(run_id, epoch),
	      LATERAL (SELECT r.id FROM {schema}.runs r
	               WHERE r.id = x.run_id AND r.epoch = x.epoch
	                 AND r.status IN ('completed', 'failed', 'cancelled') AND r.finished_at = now()
	               OFFSET 0) AS r) AS ended -- OFFSET 0: a lookup per run, never a join planned as a scan
	GROUP BY chunk`

func (c *commitBatch) queue(s *Store, b *pgx.Batch) {
	c.order = c.order[:0]
	q := func(k kind, stmt string, args ...any) {
		if len(c.has[k]) > 0 {
			b.Queue(s.sql(stmt), args...)
			c.order = append(c.order, k)
		}
	}
	q(kindStepDone, sqlStepDone, c.done.ids, c.done.epochs, c.done.steps, c.done.attempts, c.done.outputs)
	e := &c.end
	q(kindEnd, sqlEndAttempt, e.ids, e.epochs, e.steps, e.attempts, e.status, e.msg, e.typ, e.stk, e.delays, e.sources)
	fs := &c.failStep
	q(kindFailStep, sqlFailStep, fs.ids, fs.epochs, fs.steps, fs.reasons, fs.msgs, fs.types, fs.values)
	st := &c.start
	m := &c.marks
	q(kindMark, sqlMark, m.ids, m.epochs, m.steps, m.kinds, m.names, m.status, m.outputs, m.dueMS, m.dueAt,
		m.reasons, m.msgs, m.errTyp, m.beganMS, m.wokeMS)
	sl := &c.slept
	q(kindSlept, sqlSlept, sl.ids, sl.epochs, sl.steps, sl.dueMS, sl.beganMS, sl.wokeMS)
	rc := &c.receive
	q(kindReceive, sqlReceive, rc.ids, rc.epochs, rc.steps, rc.names, rc.timeouts)
	q(kindSetEvent, sqlSetEvent, c.event.ids, c.event.epochs, c.event.steps, c.event.keys, c.event.values)
	ch := &c.child
	q(kindStartChild, sqlStartChild, ch.ids, ch.epochs, ch.steps, ch.children, ch.workflows, ch.queues,
		ch.priorities, ch.inputs, ch.traceparents, ch.inputHashes)
	cr := &c.complete
	q(kindComplete, sqlCompleteRun, cr.ids, cr.epochs, cr.outputs, cr.steps, cr.attempts, cr.stepOutputs)
	f := &c.fail
	q(kindFail, sqlFailRun, f.ids, f.epochs, f.steps, f.activities, f.attempts, f.errs, f.rescues,
		f.reasons, f.msgs, f.types, f.stacks)
	q(kindCancel, sqlCancelRun, c.cancel.ids, c.cancel.epochs, c.cancel.msgs)
	r := &c.release
	q(kindRelease, sqlRelease, r.ids, r.epochs, r.delays, r.waitFor, r.untilSteps)
	// Capacity after every end of the batch (a give counts only for an
	// attempt its own transaction ended: migration 28), before the starts
	// (a denied take parks its run, and the start's fence then refuses it).
	c.flowAt = -1
	if c.flow.any() {
		c.flow.queue(s, b)
		c.flowAt = len(c.order) // read before the statement queued next
	}
	q(kindStart, sqlStartAttempt, st.ids, st.epochs, st.steps, st.attempts, st.activities, st.policies,
		st.rescues, st.workers, st.traceIDs, st.spanIDs, st.inputHashes, st.holdDownstreams, st.holdKeys)
	// After the ends: what they set off. (Statements that return a count,
	// read as the notices are.)
	if len(c.waiting) > 0 {
		b.Queue(s.sql(sqlWakeWaiting), c.waiting, s.RunsChannel())
		c.notifies++
	}
	if len(c.cancel.ids) > 0 {
		b.Queue(s.sql(sqlCancelChildren), c.cancel.ids, c.cancel.epochs)
		c.notifies++
	}
	if len(c.parents) > 0 {
		b.Queue(s.sql(sqlWakeParents), c.parents, c.parentEpochs)
		c.notifies++
	}
	if len(c.event.ids) > 0 {
		// Waiters in GetEvent wait on the done channel, as Result does.
		b.Queue(`SELECT count(pg_notify($1, ids)) FROM (
			SELECT string_agg(id::text, ',') AS ids FROM (
				SELECT id, (row_number() OVER () - 1) / 200 AS chunk FROM unnest($2::uuid[]) AS id) AS x
			GROUP BY chunk) AS c`, s.DoneChannel(), c.event.ids)
		c.notifies++
	}

	// One notice per batch (more only past the payload limit) wakes the
	// callers waiting in Result for any of the runs it ended. It names only
	// the runs this transaction did end, read back after the statements above
	// (a refused fence leaves the run unfinished, or finished by another).
	if len(c.ended.ids) > 0 {
		b.Queue(s.sql(sqlNotifyEnded), s.DoneChannel(), c.ended.ids, c.ended.epochs)
		c.notifies++
	}
	if c.wakeRuns {
		b.Queue(`SELECT pg_notify($1, '')`, s.RunsChannel())
		c.notifies++
	}
}

// fencedSet is the leases a statement found still held, with a figure each.
// It is keyed by run and epoch, not by run alone: one batch may carry writes
// of two executions of one run, the one that lost its lease and the one that
// took it over, and only the latter's are fenced through.
type fencedSet struct {
	ms     map[Lease]time.Duration
	marked map[markKey]Marked // kindMark and kindReceive
}

// markKey is one step of one lease.
type markKey struct {
	Lease
	step int
}

func (f fencedSet) has(l Lease) bool { _, ok := f.ms[l]; return ok }

// flowAnswer is what _flow said of a batch's takes: those it denied, and
// the slots of those it admitted.
type flowAnswer struct {
	denied map[Lease]Denial
	slots  map[Lease]int32
}

func (c *commitBatch) read(res pgx.BatchResults) ([kinds]fencedSet, flowAnswer, error) {
	var out [kinds]fencedSet
	var flow flowAnswer
	readFlow := func() error {
		var err error
		if flow.denied, flow.slots, err = c.flow.read(res); err != nil {
			return fmt.Errorf("flow: %w", err)
		}
		return nil
	}
	for j, k := range c.order {
		if j == c.flowAt {
			if err := readFlow(); err != nil {
				return out, flow, err
			}
		}
		rows, err := res.Query()
		if err != nil {
			return out, flow, err
		}
		set := fencedSet{ms: map[Lease]time.Duration{}}
		var id [16]byte
		var epoch int64
		var ms float64
		var output, status *string
		var step int32
		cols := []any{&id, &epoch, &ms}
		marks := k == kindMark || k == kindReceive
		if marks {
			set.marked = map[markKey]Marked{}
			cols = append(cols, &output, &status, &step)
		}
		_, err = pgx.ForEachRow(rows, cols, func() error {
			l := Lease{RunID: uuid.UUID(id), Epoch: epoch}
			if !marks {
				set.ms[l] = time.Duration(ms * float64(time.Millisecond))
				return nil
			}
			set.ms[l] = 0
			m := Marked{DueIn: NoDue}
			if ms == ms { // not NaN: the step has a due time
				m.DueIn = time.Duration(ms * float64(time.Millisecond))
			}
			if status != nil {
				m.Status = StepStatus(*status)
			}
			if output != nil {
				m.Output = []byte(*output)
			}
			set.marked[markKey{l, int(step)}] = m
			return nil
		})
		if err != nil {
			return out, flow, fmt.Errorf("%s: %w", kindNames[k], err)
		}
		out[k] = set
	}
	if c.flowAt == len(c.order) {
		if err := readFlow(); err != nil {
			return out, flow, err
		}
	}
	for range c.notifies {
		if _, err := res.Exec(); err != nil {
			return out, flow, fmt.Errorf("notify: %w", err)
		}
	}
	return out, flow, nil
}

var kindNames = [kinds]string{"complete steps", "end attempts", "fail steps", "mark steps", "record sleeps", "receive signals",
	"set events", "start children", "start attempts", "complete runs", "fail runs", "cancel runs", "release runs"}

// Text is s as PostgreSQL's text stores it (see text).
func Text(s string) string { return text(s) }

// text is s as PostgreSQL's text stores it: valid UTF-8 without NUL
// characters (invalid bytes and NULs become U+FFFD). An error message
// is whatever an activity returned; one PostgreSQL refuses would fail its
// write on every try.
func text(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// ago is how long ago t was, in milliseconds; 0 for a zero t.
func ago(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return time.Since(t).Milliseconds()
}

// hashArg is an input hash as a bigint parameter (its bits as they are: a
// bigint holds any uint64's); 0 is none, NULL.
func hashArg(h uint64) *int64 {
	if h == 0 {
		return nil
	}
	v := int64(h)
	return &v
}
