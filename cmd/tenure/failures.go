package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
)

// filterFlags are the failure filters shared by list and requeue.
type filterFlags struct {
	workflow, activity, reason string
	since, until               string
}

func (f *filterFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.workflow, "workflow", "", "only failures of this workflow")
	cmd.Flags().StringVar(&f.activity, "activity", "", "only failures of this activity")
	cmd.Flags().StringVar(&f.reason, "reason", "", "only failures with this reason: "+joinWords(policy.Reasons()))
	cmd.Flags().StringVar(&f.since, "since", "", "only failures at or after this time: an age (24h, 7d), an RFC 3339 time or a date")
	cmd.Flags().StringVar(&f.until, "until", "", "only failures before this time (same forms as --since)")
}

func (f *filterFlags) set() bool {
	return f.workflow != "" || f.activity != "" || f.reason != "" || f.since != "" || f.until != ""
}

// reasonValue is --reason, checked: a misspelt reason would match nothing
// and look like good news.
func (f *filterFlags) reasonValue() (policy.Reason, error) {
	r := policy.Reason(f.reason)
	if r != "" && !slices.Contains(policy.Reasons(), r) {
		return "", usagef("--reason: unknown reason %q: want one of %s", f.reason, joinWords(policy.Reasons()))
	}
	return r, nil
}

func (f *filterFlags) times() (since, until time.Time, err error) {
	if since, err = parseSince(f.since); err != nil {
		return since, until, usagef("--since: %v", err)
	}
	if until, err = parseSince(f.until); err != nil {
		return since, until, usagef("--until: %v", err)
	}
	return since, until, nil
}

func (a *app) failuresCommand() *cobra.Command {
	return group("failures", "List failed runs, count them, and requeue them",
		a.failuresListCommand(), a.failuresRequeueCommand(), a.failuresStatsCommand())
}

func (a *app) failuresListCommand() *cobra.Command {
	var ff filterFlags
	var includeRequeued, all bool
	var limit int
	var after string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List failed runs with their reason and last error, newest first",
		Long: `List failed runs with their reason, the step and activity that gave up, the
attempt counts (errors: attempts that returned an error; rescues: attempts
lost with a crashed or cut-off worker) and the last error, newest first.
Only open failures (not requeued) unless --include-requeued.

It lists at most --limit failures. When more match, it says so on stderr with
the cursor of the next page ("more: --after CURSOR"), so that stdout stays a
table or a JSON array; --all lists every page, --limit failures at a time.`,
		Example: `  tenure failures list --since 24h
  tenure failures list --activity charge --reason retries_exhausted
  tenure failures list --workflow place-order --all --json | jq -r '.[].run_id'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			reason, err := ff.reasonValue()
			if err != nil {
				return err
			}
			if err := atLeastOne("limit", limit); err != nil {
				return err
			}
			since, until, err := ff.times()
			if err != nil {
				return err
			}
			f := operator.FailureFilter{Workflow: ff.workflow, Activity: ff.activity,
				Reason: reason, Since: since, Until: until, IncludeRequeued: includeRequeued}
			if cmd.Flags().Changed("after") {
				if f.AfterFailed, f.AfterID, err = parseFailureCursor(after); err != nil {
					return err
				}
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			return a.listFailures(op, f, limit, all)
		},
	}
	ff.register(cmd)
	cmd.Flags().BoolVar(&includeRequeued, "include-requeued", false, "also list failures that were requeued (history)")
	cmd.Flags().IntVar(&limit, "limit", 1000, "list at most this many failures (at least 1); with --all, per page")
	cmd.Flags().StringVar(&after, "after", "", "list the failures after this cursor, as a listing cut by --limit printed it")
	cmd.Flags().BoolVar(&all, "all", false, "list every failure that matches, page after page")
	return cmd
}

// listFailures prints the failures f selects, limit at a time: one page
// and, when more match, the cursor of the next on stderr; or every page
// with all. When none match it says so on stderr (noneMatch).
func (a *app) listFailures(op *operator.Operator, f operator.FailureFilter, limit int, all bool) error {
	var arr *jsonArray
	var t *table
	if a.json {
		arr = &jsonArray{w: a.stdout}
	}
	cols := []string{"RUN", "WORKFLOW", "STEP", "ACTIVITY", "REASON", "ATTEMPTS", "ERRORS", "RESCUES", "FAILED", "ERROR"}
	if f.IncludeRequeued {
		cols = append(cols, "REQUEUED")
	}
	f.Limit = limit + 1 // one more says whether more match
	for {
		rows, err := op.Failures(a.ctx, f)
		if err != nil {
			return err
		}
		more := len(rows) > limit
		rows = rows[:min(len(rows), limit)]
		if arr == nil && t == nil {
			if len(rows) == 0 {
				return a.noneMatch("failures")
			}
			t = newTable(a.stdout, cols...)
		}
		for _, r := range rows {
			if arr != nil {
				if err := arr.add(newFailureJSON(r)); err != nil {
					return err
				}
				continue
			}
			cells := []any{r.RunID, r.Workflow, stepCell(r.Step), dash(r.Activity), r.Reason, r.Attempts, r.Errors,
				r.Rescues, stamp(r.FailedAt), clip(r.ErrorMessage, 60)}
			if f.IncludeRequeued {
				cells = append(cells, stampPtr(r.RequeuedAt))
			}
			t.row(cells...)
		}
		if t != nil {
			if err := t.flush(); err != nil {
				return err
			}
		}
		if !more {
			break
		}
		last := rows[len(rows)-1]
		f.AfterFailed, f.AfterID = last.FailedAt, last.ID
		if !all {
			a.more(limit, "failure", failureCursor(last.FailedAt, last.ID))
			break
		}
	}
	if arr != nil {
		return arr.close()
	}
	return nil
}

func stepCell(step int) string {
	if step == 0 {
		return "-"
	}
	return fmt.Sprint(step)
}

func (a *app) failuresRequeueCommand() *cobra.Command {
	var ff filterFlags
	var all, dryRun bool
	var note string
	var batch int
	var keys []string
	cmd := &cobra.Command{
		Use:   "requeue [RUN_ID ... | --key KEY ...]",
		Short: "Put failed runs back in the queue: by ID or key, or by filter (try --dry-run first)",
		Long: `Put failed runs back in the queue. A requeued run keeps its ID and its
history; the step that failed gets a fresh budget and runs again; the failure
row is marked requeued and stays as history. Every requeue writes an audit
row (tenure audit) with the filter, the count and --note.

Give run IDs, or the keys the runs were started with (--key, once per run),
or a filter (--workflow, --activity, --reason, --since, --until; all must
match), or --all. --dry-run lists what would be requeued and changes
nothing; for runs given by ID or key, it also says which could not be, and
exits as the requeue would. Large requeues by filter run in batches
(--batch-size), one audit row per batch, with a progress bar on stderr when
it is a terminal.

Requeueing a run that failed as indeterminate invokes its at-most-once
activity again: do it only once you know its effect did not happen.`,
		Example: `  tenure failures requeue 0192c3e4-7b1a-7c52-9a3e-5d1f2b3c4d5e --note INC-42
  tenure failures requeue --key order-42 --key order-43 --dry-run
  tenure failures requeue --activity charge --reason retries_exhausted --since 2h --dry-run
  tenure failures requeue --activity charge --reason retries_exhausted --since 2h --note INC-42`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 || len(keys) > 0 {
				if ff.set() || all {
					return usagef("give run IDs (or --key) or a filter, not both")
				}
				return a.requeueRuns(cmd, args, keys, note, dryRun)
			}
			if !ff.set() && !all {
				return usagef("give run IDs, a filter (--workflow, --activity, --reason, --since, --until), --all, or --key KEY")
			}
			if err := atLeastOne("batch-size", batch); err != nil {
				return err
			}
			reason, err := ff.reasonValue()
			if err != nil {
				return err
			}
			since, until, err := ff.times()
			if err != nil {
				return err
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			f := operator.RequeueFilter{Workflow: ff.workflow, Activity: ff.activity, Reason: reason,
				Since: since, Until: until, All: all}
			o := operator.RequeueOptions{DryRun: dryRun, Note: note, BatchSize: batch}
			bar := newProgress(a.stderr, "requeueing")
			if !dryRun && isTerminal(a.stderr) {
				o.Progress = bar.update
			}
			res, err := op.RequeueFailures(a.ctx, f, o)
			bar.done()
			if err != nil {
				return err
			}
			return a.printRequeued(res, dryRun)
		},
	}
	ff.register(cmd)
	cmd.Flags().StringArrayVar(&keys, "key", nil, "requeue the run started with this key (sdk.WithKey); once per run")
	cmd.Flags().BoolVar(&all, "all", false, "requeue every open failure (when no filter is given)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be requeued; change nothing")
	cmd.Flags().StringVar(&note, "note", "", "note recorded in the audit log (an incident number, say)")
	cmd.Flags().IntVar(&batch, "batch-size", 500, "requeue at most this many runs per statement")
	return cmd
}

// requeueRuns requeues the runs given by ID and by key one by one, or with
// dryRun says of each whether it would be, reporting each. The exit status
// is 3 when every run was "not found", else 1 when any was not (or would
// not be) requeued.
func (a *app) requeueRuns(cmd *cobra.Command, args, keys []string, note string, dryRun bool) error {
	ids := make([]uuid.UUID, len(args))
	for i, s := range args {
		id, err := parseRunID(cmd, s)
		if err != nil {
			return err
		}
		ids[i] = id
	}
	for _, k := range keys {
		if k == "" {
			return usagef("--key: empty key")
		}
	}
	op, err := a.operator()
	if err != nil {
		return err
	}
	type result struct {
		RunID        uuid.UUID `json:"run_id"`
		Key          string    `json:"key,omitempty"`
		Requeued     bool      `json:"requeued"`
		WouldRequeue *bool     `json:"would_requeue,omitempty"` // dry runs only
		Error        string    `json:"error,omitempty"`
	}
	type target struct {
		id  uuid.UUID
		key string
	}
	var targets []target
	for _, id := range ids {
		targets = append(targets, target{id: id})
	}
	for _, k := range keys {
		targets = append(targets, target{key: k})
	}
	var results []result
	var would []record.RequeueCandidate
	var errs []error
	for _, tg := range targets {
		r := result{RunID: tg.id, Key: tg.key}
		run, err := a.requeueTarget(op, tg.id, tg.key, note, dryRun)
		if run.ID != uuid.Nil {
			r.RunID = run.ID
		}
		switch {
		case err != nil:
			r.Error = err.Error()
			errs = append(errs, err)
			if !a.json {
				fmt.Fprintln(a.stderr, "tenure: "+message(err))
			}
		case dryRun:
			f := run.Failure
			would = append(would, record.RequeueCandidate{RunID: run.ID, Workflow: run.Workflow, Step: f.Step,
				Activity: f.Activity, Reason: f.Reason, FailedAt: f.FailedAt, ErrorMessage: f.ErrorMessage})
		default:
			r.Requeued = true
			if !a.json {
				fmt.Fprintf(a.stdout, "requeued %s\n", run.ID)
			}
		}
		if dryRun {
			ok := err == nil
			r.WouldRequeue = &ok
		}
		results = append(results, r)
	}
	if a.json {
		if err := a.printJSON(results); err != nil {
			return err
		}
	} else if dryRun {
		if err := a.printRequeued(would, true); err != nil {
			return err
		}
	}
	if len(errs) == 0 {
		return nil
	}
	verb := "not requeued"
	if dryRun {
		verb = "would not be requeued"
	}
	for _, err := range errs {
		if !errors.Is(err, operator.ErrNotFound) {
			return quiet{fmt.Errorf("%d of %s %s", len(errs), plural(int64(len(targets)), "run"), verb), exitError}
		}
	}
	return quiet{fmt.Errorf("%d of %s not found", len(errs), plural(int64(len(targets)), "run")), exitNotFound}
}

// requeueTarget requeues the run id, or the one started with key when key
// is set, or with dryRun checks that it is failed; it returns the run as
// far as it was read.
func (a *app) requeueTarget(op *operator.Operator, id uuid.UUID, key, note string, dryRun bool) (record.Run, error) {
	var run record.Run
	if key != "" || dryRun {
		var err error
		if key != "" {
			run, err = op.RunByKey(a.ctx, key)
		} else {
			run, err = op.Run(a.ctx, id)
		}
		if err != nil {
			return run, err
		}
		id = run.ID
	}
	if !dryRun {
		return record.Run{ID: id}, op.Requeue(a.ctx, id, note)
	}
	if run.Status != record.RunFailed || run.Failure == nil {
		return run, fmt.Errorf("run %s is %s: %w", id, run.Status, operator.ErrNotFailed)
	}
	return run, nil
}

func (a *app) printRequeued(res []record.RequeueCandidate, dryRun bool) error {
	if a.json {
		type row struct {
			RunID        uuid.UUID     `json:"run_id"`
			Workflow     string        `json:"workflow"`
			Step         int           `json:"step,omitempty"`
			Activity     string        `json:"activity,omitempty"`
			Reason       policy.Reason `json:"reason"`
			FailedAt     time.Time     `json:"failed_at"`
			ErrorMessage string        `json:"error_message"`
			Requeued     bool          `json:"requeued"`
		}
		out := make([]row, len(res))
		for i, c := range res {
			out[i] = row{c.RunID, c.Workflow, c.Step, c.Activity, c.Reason, c.FailedAt, c.ErrorMessage, c.Requeued}
		}
		return a.printJSON(out)
	}
	n := 0
	for _, c := range res {
		if c.Requeued {
			n++
		}
	}
	const maxListed = 50
	if len(res) > 0 && (dryRun || len(res) <= maxListed) {
		t := newTable(a.stdout, "RUN", "WORKFLOW", "STEP", "ACTIVITY", "REASON", "FAILED", "ERROR")
		for i, c := range res {
			if i == maxListed && !dryRun {
				break
			}
			t.row(c.RunID, c.Workflow, stepCell(c.Step), dash(c.Activity), c.Reason, stamp(c.FailedAt), clip(c.ErrorMessage, 60))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if dryRun {
		fmt.Fprintf(a.stdout, "%s would be requeued (dry run: nothing changed)\n", plural(int64(len(res)), "run"))
		return nil
	}
	fmt.Fprintf(a.stdout, "requeued %s\n", plural(int64(n), "run"))
	if skipped := len(res) - n; skipped > 0 {
		verb := "were"
		if skipped == 1 {
			verb = "was"
		}
		fmt.Fprintf(a.stdout, "%s %s requeued by someone else meanwhile\n", plural(int64(skipped), "run"), verb)
	}
	return nil
}

func (a *app) failuresStatsCommand() *cobra.Command {
	var since, bucket string
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count failures by time bucket, workflow, activity and reason",
		Long: `Count failures by time bucket, workflow, activity and reason: which
activities fail most, why, and since when. OPEN counts failures not requeued.`,
		Example: `  tenure failures stats --since 7d --bucket 1d`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			from, err := parseSince(since)
			if err != nil {
				return usagef("--since: %v", err)
			}
			width, err := parseAge(bucket)
			if err != nil || width <= 0 {
				return usagef("--bucket: want a positive duration such as 1h or 1d")
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			counts, err := op.FailureCounts(a.ctx, width, from)
			if err != nil {
				return err
			}
			if a.json {
				type row struct {
					Bucket    time.Time     `json:"bucket"`
					Workflow  string        `json:"workflow"`
					Activity  string        `json:"activity,omitempty"`
					Reason    policy.Reason `json:"reason"`
					Failures  int64         `json:"failures"`
					StillOpen int64         `json:"still_open"`
				}
				out := make([]row, len(counts))
				for i, c := range counts {
					out[i] = row{c.Bucket, c.Workflow, c.Activity, c.Reason, c.Failures, c.StillOpen}
				}
				return a.printJSON(out)
			}
			if len(counts) == 0 {
				fmt.Fprintln(a.stdout, "no failures since", stamp(from))
				return nil
			}
			t := newTable(a.stdout, "BUCKET", "WORKFLOW", "ACTIVITY", "REASON", "FAILURES", "OPEN")
			for _, c := range counts {
				t.row(stamp(c.Bucket), c.Workflow, dash(c.Activity), c.Reason, c.Failures, c.StillOpen)
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVar(&since, "since", "24h", "count failures from this time on: an age (24h, 7d), an RFC 3339 time or a date")
	cmd.Flags().StringVar(&bucket, "bucket", "1h", "bucket width: 15m, 1h, 1d, ...")
	return cmd
}

// quiet is an error already reported line by line: run prints only its
// summary, with the given exit status.
type quiet struct {
	err  error
	code int
}

func (q quiet) Error() string { return q.err.Error() }

// progress draws a bar on a terminal; its zero use (never updated) draws nothing.
type progress struct {
	w     interface{ Write([]byte) (int, error) }
	label string
	drawn bool
}

func newProgress(w interface{ Write([]byte) (int, error) }, label string) *progress {
	return &progress{w: w, label: label}
}

func (p *progress) update(done, total int) {
	const width = 30
	filled := 0
	if total > 0 {
		filled = min(width, done*width/total)
	}
	fmt.Fprintf(p.w, "\r%s [%s%s] %d/%d", p.label, strings.Repeat("#", filled), strings.Repeat(".", width-filled), done, total)
	p.drawn = true
}

func (p *progress) done() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}
