package tenuretest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	goruntime "runtime"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/engine"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// Replay replays each history (tenure runs export, ReadHistories) against
// wf's current code, without a database and without invoking any activity:
// every step the code calls is answered from its record, as a worker's
// replay answers it, up to where the run stands (its first step not
// completed or failed, or its end). It fails the test for each history
// whose replay diverges, naming the run and its first divergent step: a
// step of another kind or name, an activity or child called with another
// input (by its recorded hash), a patch the run did not take, the workflow
// returning before its recorded steps or with another output. Run it in CI
// against histories exported from production before deploying a change
// (docs/deploying.md).
func Replay(t TB, wf sdk.Definition, histories ...record.History) {
	t.Helper()
	for _, h := range histories {
		if err := ReplayHistory(wf, h); err != nil {
			t.Errorf("tenuretest.Replay: %v", err)
		}
	}
}

// ReplayHistory is Replay of one history: nil when it replays, else an
// error naming the run and its first divergent step (a *Divergence), or
// saying why the history cannot be replayed.
func ReplayHistory(wf sdk.Definition, h record.History) error {
	if h.Format != record.HistoryFormat {
		return fmt.Errorf("run %s: history format %q, want %q", h.RunID, h.Format, record.HistoryFormat)
	}
	if h.Workflow != wf.Name() {
		return fmt.Errorf("run %s: a history of workflow %q, replayed against %q", h.RunID, h.Workflow, wf.Name())
	}
	x := &replayer{h: h, steps: map[int]record.HistoryStep{}}
	if ic, ok := wf.(sdk.InputChecked); ok {
		x.warn = ic.InputCheck() == sdk.InputCheckWarn
	}
	for _, s := range h.Steps {
		x.steps[s.Step] = s
	}
	done := make(chan struct{})
	var out []byte
	var err error
	var panicked any
	go func() { // a replay that reaches where the run stands ends this goroutine (Goexit)
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				panicked = p
			}
		}()
		ctx, cancel := context.WithCancel(engine.WithExecutor(context.Background(), x))
		defer cancel()
		out, err = wf.Invoke(ctx, h.Input)
		x.returned = true
	}()
	<-done
	switch {
	case x.diverged != nil:
		return x.diverged
	case panicked != nil:
		return &Divergence{RunID: h.RunID, Step: x.next, Recorded: x.describe(x.next), Now: fmt.Sprintf("the workflow panics: %v", panicked)}
	case !x.returned: // stopped where the run stands
		return nil
	}
	if last := x.lastRecorded(); x.next < last {
		return &Divergence{RunID: h.RunID, Step: x.next + 1, Recorded: x.describe(x.next + 1),
			Now: "the workflow returns"}
	}
	if h.Status == record.RunCompleted {
		switch {
		case err != nil:
			return &Divergence{RunID: h.RunID, Step: x.next + 1, Recorded: "the run's output " + string(h.Output),
				Now: "the workflow returns an error: " + err.Error()}
		case !jsonEqual(out, h.Output):
			return &Divergence{RunID: h.RunID, Step: x.next + 1, Recorded: "the run's output " + string(h.Output),
				Now: "the workflow returns " + string(out)}
		}
	}
	return nil
}

// Divergence is where a replay first differs from the history: the step,
// what it recorded and what the code does now.
type Divergence struct {
	// RunID is the history's run.
	RunID uuid.UUID
	// Step is the step number where the replay differs.
	Step int
	// Recorded is what the history holds there ("activity \"charge\"
	// with input hash ..."); Now is what the code does instead.
	Recorded, Now string
}

// Error says where and how the replay differs.
func (d *Divergence) Error() string {
	return fmt.Sprintf("run %s diverges at step %d: recorded %s, now %s", d.RunID, d.Step, d.Recorded, d.Now)
}

// ReadHistories reads the histories tenure runs export wrote: one JSON
// object a line.
func ReadHistories(r io.Reader) ([]record.History, error) {
	var out []record.History
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<30)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var h record.History
		if err := json.Unmarshal(line, &h); err != nil {
			return out, fmt.Errorf("tenuretest: history on line %d: %w", n, err)
		}
		out = append(out, h)
	}
	return out, sc.Err()
}

// replayer answers a workflow's steps from a history (engine.Executor).
type replayer struct {
	h        record.History
	steps    map[int]record.HistoryStep
	next     int  // the last step number the code took
	warn     bool // the workflow's input check warns (sdk.InputCheckWarn): a changed input replays
	over     bool // stopped or diverged: what the workflow's deferred code calls is not replayed
	diverged *Divergence
	returned bool
}

// stop ends the workflow's goroutine: it reached where the run stands.
func (x *replayer) stop() {
	x.over = true
	goruntime.Goexit()
}

// diverge records where the replay first differs and ends the goroutine.
func (x *replayer) diverge(n int, now string) {
	if x.diverged == nil {
		x.diverged = &Divergence{RunID: x.h.RunID, Step: n, Recorded: x.describe(n), Now: now}
	}
	x.stop()
}

func (x *replayer) describe(n int) string {
	s, ok := x.steps[n]
	if !ok {
		return "nothing"
	}
	d := fmt.Sprintf("%s %q", s.Kind, s.Name)
	if s.InputHash != "" {
		d += " with input hash " + s.InputHash
	}
	return d
}

// lastRecorded is the last recorded step but patches, which a workflow
// that no longer asks about them passes over.
func (x *replayer) lastRecorded() int {
	last := 0
	for n, s := range x.steps {
		if s.Kind != record.KindPatch {
			last = max(last, n)
		}
	}
	return last
}

// take is the runtime's next: the next step, patches the code no longer
// asks about passed over; a record of another kind or name diverges; no
// record stops the replay.
func (x *replayer) take(kind record.StepKind, name string, input []byte, hashed bool) (int, record.HistoryStep) {
	if x.over {
		goruntime.Goexit()
	}
	x.next++
	rec, seen := x.steps[x.next]
	for seen && rec.Kind == record.KindPatch {
		x.next++
		rec, seen = x.steps[x.next]
	}
	if !seen {
		x.stop()
	}
	now := fmt.Sprintf("%s %q", kind, name)
	if rec.Kind != kind || rec.Name != name {
		x.diverge(x.next, now)
	}
	if hashed && rec.InputHash != "" && !x.warn {
		if h := fmt.Sprintf("%016x", store.InputHash(input)); h != rec.InputHash {
			x.diverge(x.next, now+" with input hash "+h)
		}
	}
	return x.next, rec
}

// Step implements engine.Executor.
func (x *replayer) Step(ctx context.Context, act activities.Definition, input []byte, _ []policy.Option) ([]byte, error) {
	n, rec := x.take(record.KindActivity, act.Name(), input, true)
	switch rec.Status {
	case record.StepCompleted:
		return rec.Output, nil
	case record.StepFailed:
		ae := &sdk.ActivityError{Activity: rec.Name, Step: n, Reason: rec.Reason, Message: rec.ErrorMessage, Type: rec.ErrorType}
		if codec, ok := engine.ErrorCodecFrom(ctx); ok && rec.ErrorValue != nil {
			if v, err := codec.DecodeError(rec.ErrorType, rec.ErrorValue); err == nil {
				ae.Err = v
			}
		}
		return nil, ae
	}
	x.stop() // running: where the run stands
	return nil, nil
}

// Sleep implements engine.Executor.
func (x *replayer) Sleep(ctx context.Context, d time.Duration, until time.Time) error {
	if _, rec := x.take(record.KindSleep, string(record.KindSleep), nil, false); rec.Status != record.StepCompleted {
		x.stop()
	}
	return nil
}

// Receive implements engine.Executor.
func (x *replayer) Receive(ctx context.Context, name string, timeout time.Duration) ([]byte, error) {
	_, rec := x.take(record.KindSignal, name, nil, false)
	switch rec.Status {
	case record.StepCompleted:
		return rec.Output, nil
	case record.StepFailed:
		return nil, &sdk.TimeoutError{What: fmt.Sprintf("signal %q", name)}
	}
	x.stop()
	return nil, nil
}

// SetEvent implements engine.Executor.
func (x *replayer) SetEvent(ctx context.Context, key string, value []byte) error {
	x.take(record.KindEvent, key, nil, false)
	return nil
}

// Record implements engine.Executor.
func (x *replayer) Record(ctx context.Context, kind string, fn func() ([]byte, error)) ([]byte, error) {
	_, rec := x.take(record.StepKind(kind), kind, nil, false)
	return rec.Output, nil
}

// StartChild implements engine.Executor.
func (x *replayer) StartChild(ctx context.Context, workflow string, input []byte, queue string, priority int) (uuid.UUID, int, error) {
	n, rec := x.take(record.KindChild, workflow, input, true)
	id := store.ChildID(x.h.RunID, n)
	if rec.ChildRunID != nil {
		id = *rec.ChildRunID
	}
	return id, n, nil
}

// AwaitChild implements engine.Executor.
func (x *replayer) AwaitChild(ctx context.Context, step int) ([]byte, error) {
	rec, ok := x.steps[step]
	if !ok || rec.Kind != record.KindChild {
		return nil, fmt.Errorf("step %d started no child in this run", step)
	}
	switch rec.Status {
	case record.StepCompleted:
		return rec.Output, nil
	case record.StepFailed:
		ce := &sdk.ChildError{Workflow: rec.Name, Status: record.RunFailed, Reason: rec.Reason, Message: rec.ErrorMessage, Type: rec.ErrorType}
		if rec.ChildRunID != nil {
			ce.RunID = *rec.ChildRunID
		}
		if rec.Reason == sdk.ReasonCancelled {
			ce.Status, ce.Reason = record.RunCancelled, ""
		}
		return nil, ce
	}
	x.stop()
	return nil, nil
}

// RunKey implements engine.Executor: a replayed history has no key.
func (x *replayer) RunKey() string { return "" }

// Patched implements engine.Executor, as the runtime's does.
func (x *replayer) Patched(ctx context.Context, id string, deprecated bool) bool {
	if x.over {
		goruntime.Goexit()
	}
	at := x.next
	for {
		n := x.next + 1
		rec, seen := x.steps[n]
		switch {
		case !seen: // the run stands before this point: from here on, a first execution
			x.stop()
			return !deprecated
		case rec.Kind != record.KindPatch:
			x.next = at
			return false
		case rec.Name == id:
			x.next = n
			return true
		default:
			x.next = n
		}
	}
}

// jsonEqual says whether a and b encode one JSON value (see
// store.InputHash).
func jsonEqual(a, b []byte) bool {
	return store.InputHash(a) == store.InputHash(b)
}

var _ engine.Executor = (*replayer)(nil)
