package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
)

func (a *app) runsCommand() *cobra.Command {
	var rf runFilter
	var limit int
	var after string
	var all bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first",
		Long: `List runs, newest first, with the key each was started with (sdk.WithKey).
DETAIL says why a failed run failed, and which worker holds a running run with
the lease time left, or how long ago the lease expired (the run then awaits
rescue by the next worker that claims).

It lists at most --limit runs. When more match, it says so on stderr with the
cursor of the next page ("more: --after CURSOR"), so that stdout stays a
table or a JSON array; --all lists every page, --limit runs at a time.`,
		Example: `  tenure runs list --status running
  tenure runs list --key order-42
  tenure runs list --workflow place-order --status failed --limit 20
  tenure runs list --workflow place-order --all --json | jq -r '.[].id'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := rf.search()
			if err != nil {
				return err
			}
			if err := atLeastOne("limit", limit); err != nil {
				return err
			}
			if cmd.Flags().Changed("after") {
				if q.AfterCreated, q.AfterID, err = parseRunCursor(after); err != nil {
					return err
				}
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			if err := a.listRuns(op, q, limit, all); err != nil {
				return err
			}
			orphans, err := op.Orphans(a.ctx)
			if err != nil {
				return err
			}
			return a.warnOrphans(a.stderr, orphans) // the table stays clean for pipes
		},
	}
	rf.register(list)
	list.Flags().IntVar(&limit, "limit", 100, "list at most this many runs (at least 1); with --all, per page")
	list.Flags().StringVar(&after, "after", "", "list the runs after this cursor, as a listing cut by --limit printed it")
	list.Flags().BoolVar(&all, "all", false, "list every run that matches, page after page")

	var cf runFilter
	count := &cobra.Command{
		Use:   "count",
		Short: "Count runs, with the filters of runs list",
		Long: `Count the runs that the filters select (the same as runs list's): the whole
listing, whatever its length. The count is exact: it reads every run that
matches, so without a filter it reads the whole table.`,
		Example: `  tenure runs count --status queued
  tenure runs count --workflow place-order --status failed --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := cf.search()
			if err != nil {
				return err
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			n, err := op.CountRuns(a.ctx, q)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(map[string]int64{"runs": n})
			}
			fmt.Fprintln(a.stdout, n)
			return nil
		},
	}
	cf.register(count)

	var key string
	var noPayloads bool
	show := &cobra.Command{
		Use:   "show {RUN_ID | --key KEY}",
		Short: "Show a run: its input and output, failure, requeues, and every step and attempt",
		Long: `Show a run, found by its ID or by the key it was started with (--key, as
sdk.WithKey gave it): its key, status, lease and failure reason, what a
queued run that has started waits for (a sleep, a signal, a child run), its
parent run and step when it is a child, when its cancellation was requested,
each requeue with who did it, when and the note (from the audit log), and
its input and output (the first 2 KB of each; --json prints them whole;
--no-payloads leaves them out, for payloads that hold personal data).

Then each step. An activity step shows the effective retry policy in force
and the attempt timeline (status, start, duration, the delay chosen before
the next attempt and where it came from, worker, trace ID and error).
Attempts made before a requeue are marked; they no longer count against the
step's budgets. The other steps are named by their kind first, and have no
attempts: a sleep shows its due time and when it woke; a signal its name,
its timeout and the ID of the signal it received; a child its run and that
run's status; an event its key; a patch its ID; now and side_effect their
kind alone.`,
		Example: `  tenure runs show 0192c3e4-7b1a-7c52-9a3e-5d1f2b3c4d5e
  tenure runs show --key order-42
  tenure runs show --key order-42 --no-payloads --json`,
		Args: runArgs(0, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, _, err := a.findRun(cmd, key, args)
			if err != nil {
				return err
			}
			return a.showRun(a.op, r, !noPayloads)
		},
	}
	keyFlag(show, &key)
	show.Flags().BoolVar(&noPayloads, "no-payloads", false, "leave out the run's input and output")
	return group("runs", "Start, list, count and show runs; wait for one; signal, cancel and delete runs; export histories; move pinned runs",
		a.runsStartCommand(), list, count, show, a.runsResultCommand(),
		a.runsSignalCommand(), a.runsCancelCommand(), a.runsDeleteCommand(), a.runsExportCommand(), a.runsMoveCommand())
}

// runFilter is the filters of runs list and runs count.
type runFilter struct {
	workflow, status, queue, key string
}

func (f *runFilter) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.workflow, "workflow", "", "only runs of this workflow")
	cmd.Flags().StringVar(&f.status, "status", "", "only runs in this status: "+joinWords(record.RunStatuses()))
	cmd.Flags().StringVar(&f.queue, "queue", "", "only runs on this queue")
	cmd.Flags().StringVar(&f.key, "key", "", "only the run started with this key (sdk.WithKey)")
}

// search is the filters checked: a misspelt status would match nothing and
// look like good news.
func (f *runFilter) search() (operator.RunSearch, error) {
	st := record.RunStatus(f.status)
	if st != "" && !slices.Contains(record.RunStatuses(), st) {
		return operator.RunSearch{}, usagef("--status: unknown status %q: want one of %s", st, joinWords(record.RunStatuses()))
	}
	return operator.RunSearch{Workflow: f.workflow, Status: st, Queue: f.queue, Key: f.key}, nil
}

// listRuns prints the runs q selects, limit at a time: one page and, when
// more match, the cursor of the next on stderr; or every page with all.
// When none match it says so on stderr (noneMatch).
func (a *app) listRuns(op *operator.Operator, q operator.RunSearch, limit int, all bool) error {
	var arr *jsonArray
	var t *table
	if a.json {
		arr = &jsonArray{w: a.stdout}
	}
	q.Limit = limit + 1 // one more says whether more match
	for {
		runs, err := op.SearchRuns(a.ctx, q)
		if err != nil {
			return err
		}
		more := len(runs) > limit
		runs = runs[:min(len(runs), limit)]
		if arr == nil && t == nil {
			if len(runs) == 0 {
				return a.noneMatch("runs")
			}
			t = newTable(a.stdout, "RUN", "KEY", "WORKFLOW", "STATUS", "QUEUE", "CREATED", "DETAIL")
		}
		for _, r := range runs {
			if arr != nil {
				if err := arr.add(newRunJSON(r)); err != nil {
					return err
				}
				continue
			}
			t.row(r.ID, dash(clip(r.Key, 40)), r.Workflow, r.Status, r.Queue, stamp(r.CreatedAt), runDetail(r))
		}
		if t != nil {
			if err := t.flush(); err != nil {
				return err
			}
		}
		if !more {
			break
		}
		last := runs[len(runs)-1]
		q.AfterCreated, q.AfterID = last.CreatedAt, last.ID
		if !all {
			a.more(limit, "run", runCursor(last.CreatedAt, last.ID))
			break
		}
	}
	if arr != nil {
		return arr.close()
	}
	return nil
}

// joinWords lists values as "a, b, c" for a message or a flag's help.
func joinWords[S ~string](vs []S) string {
	ss := make([]string, len(vs))
	for i, v := range vs {
		ss[i] = string(v)
	}
	return strings.Join(ss, ", ")
}

// runDetail is the DETAIL cell of runs list.
func runDetail(r record.RunSummary) string {
	switch {
	case r.Status == record.RunFailed && r.Step > 0:
		return fmt.Sprintf("%s at step %d (%s)", r.Reason, r.Step, r.Activity)
	case r.Status == record.RunFailed:
		return string(r.Reason)
	case r.Status == record.RunRunning && r.LeaseLeft != nil && *r.LeaseLeft < 0:
		return fmt.Sprintf("held by %s, lease expired %s ago", r.Claimant, roughly(-*r.LeaseLeft))
	case r.Status == record.RunRunning && r.LeaseLeft != nil:
		return fmt.Sprintf("held by %s, lease %s left", r.Claimant, roughly(*r.LeaseLeft))
	case r.Requeues > 0:
		return "requeued " + plural(int64(r.Requeues), "time")
	}
	return "-"
}

// parseRunID reads a run ID, an argument of cmd. What is not a UUID may be
// the key the run was started with, the name people know it by: the error
// says how to give that instead.
func parseRunID(cmd *cobra.Command, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, usagef("invalid run ID %q: want a UUID (to find a run by its key: %s --key %s)", s, cmd.CommandPath(), shellWord(s))
	}
	return id, nil
}

// shellWord is s as a shell reads it back: bare when it is made of safe
// characters, else in single quotes.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// runJSON is a run as --json prints it.
type runJSON struct {
	ID          uuid.UUID        `json:"id"`
	Key         string           `json:"key,omitempty"`
	Workflow    string           `json:"workflow"`
	Queue       string           `json:"queue"`
	Status      record.RunStatus `json:"status"`
	Claimant    string           `json:"claimant,omitempty"`
	Epoch       int64            `json:"epoch"`
	Requeues    int              `json:"requeues"`
	CreatedAt   time.Time        `json:"created_at"`
	FinishedAt  *time.Time       `json:"finished_at"`
	LeaseLeftMS *int64           `json:"lease_left_ms,omitempty"`
	Reason      policy.Reason    `json:"reason,omitempty"`
	Step        int              `json:"step,omitempty"`
	Activity    string           `json:"activity,omitempty"`
	// Set by runs show only.
	WaitingFor        string          `json:"waiting_for,omitempty"`
	ParentRunID       *uuid.UUID      `json:"parent_run_id,omitempty"`
	ParentStep        int             `json:"parent_step,omitempty"`
	CancelRequestedAt *time.Time      `json:"cancel_requested_at,omitempty"`
	BuildID           string          `json:"build_id,omitempty"`  // the build that first claimed it
	PinnedTo          string          `json:"pinned_to,omitempty"` // the build it is pinned to (sdk.WithPinning)
	Input             json.RawMessage `json:"input,omitempty"`     // unless --no-payloads
	Output            json.RawMessage `json:"output,omitempty"`    // unless --no-payloads; none until completed
}

// requeueJSON is one requeue of a run, from the audit log, as runs show
// --json prints it.
type requeueJSON struct {
	AuditID int64     `json:"audit_id"`
	At      time.Time `json:"at"`
	Actor   string    `json:"actor"`
	Note    string    `json:"note,omitempty"`
}

func newRunJSON(r record.RunSummary) runJSON {
	j := runJSON{ID: r.ID, Key: r.Key, Workflow: r.Workflow, Queue: r.Queue, Status: r.Status, Claimant: r.Claimant,
		Epoch: r.Epoch, Requeues: r.Requeues, CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt,
		Reason: r.Reason, Step: r.Step, Activity: r.Activity}
	if r.LeaseLeft != nil {
		ms := r.LeaseLeft.Milliseconds()
		j.LeaseLeftMS = &ms
	}
	return j
}

// attemptJSON is an attempt as --json prints it.
type attemptJSON struct {
	Attempt       int                  `json:"attempt"`
	Status        record.AttemptStatus `json:"status"`
	Rescue        bool                 `json:"rescue"`
	BeforeRequeue bool                 `json:"before_requeue"`
	StartedAt     time.Time            `json:"started_at"`
	EndedAt       *time.Time           `json:"ended_at"`
	DurationMS    int64                `json:"duration_ms"`
	DelayMS       *int64               `json:"delay_ms"`
	DelaySource   string               `json:"delay_source,omitempty"`
	Worker        string               `json:"worker"`
	Epoch         int64                `json:"epoch"`
	TraceID       string               `json:"trace_id,omitempty"`
	ErrorType     string               `json:"error_type,omitempty"`
	ErrorMessage  string               `json:"error_message,omitempty"`
}

// stepJSON is a step as --json prints it.
type stepJSON struct {
	Step         int               `json:"step"`
	Kind         record.StepKind   `json:"kind"`
	Activity     string            `json:"activity"`
	Status       record.StepStatus `json:"status"`
	Reason       policy.Reason     `json:"reason,omitempty"`
	ErrorMessage string            `json:"error_message,omitempty"`
	Policy       json.RawMessage   `json:"policy"`
	PolicyText   string            `json:"policy_text,omitempty"` // activity steps only
	BudgetFrom   int               `json:"budget_from"`
	FinishedAt   *time.Time        `json:"finished_at,omitempty"`
	DueAt        *time.Time        `json:"due_at,omitempty"`
	SignalID     int64             `json:"signal_id,omitempty"`
	ChildRunID   *uuid.UUID        `json:"child_run_id,omitempty"`
	ChildStatus  record.RunStatus  `json:"child_status,omitempty"`
	BuildID      string            `json:"build_id,omitempty"`   // the build that wrote it first
	InputHash    string            `json:"input_hash,omitempty"` // hex; activity and child steps
	Attempts     []attemptJSON     `json:"attempts"`
}

func newStepJSON(s record.Step, attempts []attemptJSON) stepJSON {
	j := stepJSON{Step: s.Step, Kind: s.Kind, Activity: s.Activity, Status: s.Status, Reason: s.Reason,
		ErrorMessage: s.ErrorMessage, Policy: json.RawMessage(s.Policy), BudgetFrom: s.BudgetFrom,
		FinishedAt: s.FinishedAt, DueAt: s.DueAt, SignalID: s.SignalID, ChildStatus: s.ChildStatus,
		Attempts: append([]attemptJSON{}, attempts...)}
	if s.Kind == record.KindActivity {
		j.PolicyText = policyText(s.Policy)
	}
	if s.ChildRunID != uuid.Nil {
		j.ChildRunID = &s.ChildRunID
	}
	j.BuildID = s.BuildID
	if s.InputHash != 0 {
		j.InputHash = fmt.Sprintf("%016x", s.InputHash)
	}
	return j
}

// failureJSON is a failure row as --json prints it.
type failureJSON struct {
	RunID        uuid.UUID     `json:"run_id"`
	Workflow     string        `json:"workflow"`
	Reason       policy.Reason `json:"reason"`
	Step         int           `json:"step,omitempty"`
	Activity     string        `json:"activity,omitempty"`
	Attempts     int           `json:"attempts"`
	Errors       int           `json:"errors"`
	Rescues      int           `json:"rescues"`
	ErrorType    string        `json:"error_type,omitempty"`
	ErrorMessage string        `json:"error_message"`
	FailedAt     time.Time     `json:"failed_at"`
	RequeuedAt   *time.Time    `json:"requeued_at,omitempty"`
	RequeueCount int           `json:"requeue_count"`
}

func newFailureJSON(f record.Failure) failureJSON {
	return failureJSON{RunID: f.RunID, Workflow: f.Workflow, Reason: f.Reason, Step: f.Step, Activity: f.Activity,
		Attempts: f.Attempts, Errors: f.Errors, Rescues: f.Rescues, ErrorType: f.ErrorType,
		ErrorMessage: f.ErrorMessage, FailedAt: f.FailedAt, RequeuedAt: f.RequeuedAt, RequeueCount: f.RequeueCount}
}

// policyText describes a recorded policy on one line.
func policyText(raw []byte) string {
	var p policy.Retry
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	return p.String()
}

// showRun prints run r with its steps, attempts and requeues; its input and
// output too when payloads.
func (a *app) showRun(op *operator.Operator, r record.Run, payloads bool) error {
	id := r.ID
	steps, err := op.Steps(a.ctx, id)
	if err != nil {
		return err
	}
	attempts, err := op.History(a.ctx, id)
	if err != nil {
		return err
	}
	audit, err := op.RunAuditLog(a.ctx, id)
	if err != nil {
		return err
	}
	byStep := map[int][]attemptJSON{}
	for _, at := range attempts { // as the attempt_timeline view gives them
		j := attemptJSON{Attempt: at.Attempt, Status: at.Status, Rescue: at.Rescue,
			BeforeRequeue: !at.InBudget, StartedAt: at.StartedAt, EndedAt: at.EndedAt,
			DelaySource: at.DelaySource, Worker: at.Worker, Epoch: at.Epoch, TraceID: at.TraceID,
			ErrorType: at.ErrorType, ErrorMessage: at.ErrorMessage}
		j.DurationMS = at.Duration.Milliseconds()
		if at.Delay != nil {
			ms := at.Delay.Milliseconds()
			j.DelayMS = &ms
		}
		byStep[at.Step] = append(byStep[at.Step], j)
	}
	out := struct {
		Run      runJSON       `json:"run"`
		Failure  *failureJSON  `json:"failure"`
		Requeues []requeueJSON `json:"requeues"`
		Steps    []stepJSON    `json:"steps"`
	}{Requeues: []requeueJSON{}, Steps: []stepJSON{}}
	out.Run = newRunJSON(record.RunSummary{ID: r.ID, Key: r.Key, Workflow: r.Workflow, Queue: r.Queue, Status: r.Status,
		Claimant: r.Claimant, Epoch: r.Epoch, Requeues: r.Requeues, CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt})
	out.Run.WaitingFor, out.Run.ParentStep, out.Run.CancelRequestedAt = r.WaitingFor, r.ParentStep, r.CancelRequested
	out.Run.BuildID, out.Run.PinnedTo = r.BuildID, r.PinnedTo
	if payloads {
		out.Run.Input, out.Run.Output = r.Input, r.Output
	}
	for _, e := range audit {
		if e.Action == "requeue" {
			out.Requeues = append(out.Requeues, requeueJSON{AuditID: e.ID, At: e.At, Actor: e.Actor, Note: e.Note})
		}
	}
	if r.Parent != uuid.Nil {
		out.Run.ParentRunID = &r.Parent
	}
	if r.Failure != nil {
		f := newFailureJSON(*r.Failure)
		out.Failure = &f
		out.Run.Reason, out.Run.Step, out.Run.Activity = f.Reason, f.Step, f.Activity
	}
	for _, s := range steps {
		out.Steps = append(out.Steps, newStepJSON(s, byStep[s.Step]))
	}
	if a.json {
		return a.printJSON(out)
	}

	w := a.stdout
	t := newTable(w, "run", r.ID.String())
	if r.Key != "" {
		t.row("key", r.Key)
	}
	t.row("workflow", r.Workflow)
	t.row("status", r.Status)
	t.row("queue", r.Queue)
	if r.Parent != uuid.Nil {
		t.row("parent", fmt.Sprintf("%s step %d", r.Parent, r.ParentStep))
	}
	t.row("created", stamp(r.CreatedAt)+" ("+ago(r.CreatedAt)+")")
	if r.FinishedAt != nil {
		t.row("finished", stamp(*r.FinishedAt)+" ("+ago(*r.FinishedAt)+")")
	}
	if r.Requeues > 0 || len(out.Requeues) > 0 {
		t.row("requeued", plural(int64(r.Requeues), "time"))
		for _, q := range out.Requeues {
			note := ", no note"
			if q.Note != "" {
				note = ": " + q.Note
			}
			t.row("", fmt.Sprintf("%s (%s) by %s (audit %d)%s", stamp(q.At), ago(q.At), q.Actor, q.AuditID, clip(note, 200)))
		}
	}
	if r.Status == record.RunRunning {
		t.row("lease", fmt.Sprintf("held by %s (epoch %d)", r.Claimant, r.Epoch))
	}
	if r.BuildID != "" {
		t.row("build", r.BuildID+" (first claimed by)")
	}
	if r.PinnedTo != "" {
		t.row("pinned", "to build "+r.PinnedTo+" (claimed only by its workers; tenure runs move moves it)")
	}
	if text := waitingText(r); text != "" {
		t.row("waiting", text)
	}
	if r.CancelRequested != nil {
		t.row("cancel", "requested "+stamp(*r.CancelRequested)+" ("+ago(*r.CancelRequested)+")")
	}
	if f := r.Failure; f != nil {
		where := ""
		if f.Step > 0 {
			where = fmt.Sprintf(" at step %d (%s)", f.Step, f.Activity)
		}
		t.row("failure", fmt.Sprintf("%s%s after %s (%s, %s)", f.Reason, where, plural(int64(f.Attempts), "attempt"),
			plural(int64(f.Errors), "error"), plural(int64(f.Rescues), "rescue")))
		t.row("error", clip(joinType(f.ErrorType, f.ErrorMessage), 200))
	}
	if payloads {
		t.row("input", payload(r.Input))
		t.row("output", payload(r.Output))
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, s := range out.Steps {
		fmt.Fprintln(w, "\n"+stepHead(s))
		if s.Kind != record.KindActivity {
			if err := stepDetail(w, s); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(w, "  policy  %s\n", s.PolicyText)
		if s.BuildID != "" {
			fmt.Fprintf(w, "  build   %s\n", s.BuildID)
		}
		switch {
		case s.BudgetFrom == 1:
			fmt.Fprintln(w, "  attempt 1 was made before a requeue and no longer counts (marked *)")
		case s.BudgetFrom > 1:
			fmt.Fprintf(w, "  attempts up to %d were made before a requeue and no longer count (marked *)\n", s.BudgetFrom)
		}
		t := newTable(w, "  ATTEMPT", "STATUS", "STARTED", "DURATION", "DELAY NEXT", "SOURCE", "WORKER", "TRACE", "ERROR")
		for _, at := range s.Attempts {
			n := fmt.Sprint(at.Attempt)
			if at.BeforeRequeue {
				n += "*"
			}
			status := string(at.Status)
			if at.Rescue {
				status += " (rescue)"
			}
			delay := "-"
			if at.DelayMS != nil {
				delay = roughly(time.Duration(*at.DelayMS) * time.Millisecond)
			}
			t.row("  "+n, status, stamp(at.StartedAt), roughly(time.Duration(at.DurationMS)*time.Millisecond),
				delay, dash(at.DelaySource), at.Worker, dash(at.TraceID), dash(clip(at.ErrorMessage, 80)))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	return nil
}

// waitingText says what a queued run waits for, in operator.WaitingFor's
// reading of its row, with the time it ends both stamped and relative; ""
// for a run that is due now and waits for nothing but a worker.
func waitingText(r record.Run) string {
	w := operator.WaitingFor(r)
	at := func(t time.Time) string { return stamp(t) + " (" + when(t) + ")" }
	timeout := func() string {
		if w.Until.IsZero() {
			return "no timeout"
		}
		return "timeout " + at(w.Until)
	}
	switch w.Kind {
	case operator.WaitSleep:
		return "sleep until " + at(w.Until)
	case operator.WaitSignal:
		return fmt.Sprintf("signal %q, %s", w.Signal, timeout())
	case operator.WaitChild:
		return "child run " + w.Child.String() + " to end, " + timeout()
	case operator.WaitLimit:
		due := "until a release"
		if !w.Until.IsZero() {
			due = "due " + at(w.Until)
		}
		return fmt.Sprintf("the limits of downstream %s, %s (tenure limits show %s)", w.Downstream, due, shellWord(w.Downstream))
	case operator.WaitDue:
		if w.Until.After(time.Now()) {
			return "due at " + at(w.Until) + " (a delayed start or a backoff)"
		}
	}
	return ""
}

// stepHead is a step's first line: number, activity and status for an
// activity step; for the other kinds the kind first, then the name it
// records (signal, event key, child workflow) when it is not the kind.
func stepHead(s stepJSON) string {
	name := s.Activity
	if s.Kind != record.KindActivity && s.Activity != string(s.Kind) {
		name = string(s.Kind) + " " + s.Activity
	}
	head := fmt.Sprintf("step %d  %s  %s", s.Step, name, s.Status)
	if s.Reason != "" {
		head += ": " + string(s.Reason)
	}
	return head
}

// stepDetail writes what a step of another kind than activity waited for.
func stepDetail(w io.Writer, s stepJSON) error {
	var rows [][2]string
	add := func(k, v string) { rows = append(rows, [2]string{"  " + k, v}) }
	switch s.Kind {
	case record.KindSleep:
		if s.DueAt != nil {
			add("due", stamp(*s.DueAt)+" ("+when(*s.DueAt)+")")
		}
		if s.FinishedAt != nil {
			add("woke", stamp(*s.FinishedAt))
		}
	case record.KindSignal:
		if s.DueAt != nil {
			add("timeout", stamp(*s.DueAt)+" ("+when(*s.DueAt)+")")
		} else {
			add("timeout", "none")
		}
		if s.SignalID != 0 {
			add("received", fmt.Sprintf("signal %d at %s", s.SignalID, stampPtr(s.FinishedAt)))
		}
	case record.KindChild:
		if s.ChildRunID != nil {
			add("child", fmt.Sprintf("%s (%s)", *s.ChildRunID, dash(string(s.ChildStatus))))
		}
	}
	if s.ErrorMessage != "" {
		add("error", clip(s.ErrorMessage, 200))
	}
	if s.BuildID != "" {
		add("build", s.BuildID)
	}
	if len(rows) == 0 {
		return nil
	}
	t := newTable(w, rows[0][:]...)
	for _, r := range rows[1:] {
		t.row(r[0], r[1])
	}
	return t.flush()
}

// joinType writes an error as "type: message", or just the message.
func joinType(typ, msg string) string {
	if typ == "" {
		return msg
	}
	return typ + ": " + msg
}
