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
	var includeRequeued bool
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List failed runs with their reason and last error, newest first",
		Long: `List failed runs with their reason, the step and activity that gave up, the
attempt counts (errors: attempts that returned an error; rescues: attempts
lost with a crashed or cut-off worker) and the last error, newest first.
Only open failures (not requeued) unless --include-requeued.`,
		Example: `  tenure failures list --since 24h
  tenure failures list --activity charge --reason retries_exhausted
  tenure failures list --workflow place-order --json | jq -r '.[].run_id'`,
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
			op, err := a.operator()
			if err != nil {
				return err
			}
			rows, err := op.Failures(a.ctx, operator.FailureFilter{Workflow: ff.workflow, Activity: ff.activity,
				Reason: reason, Since: since, Until: until, IncludeRequeued: includeRequeued, Limit: limit})
			if err != nil {
				return err
			}
			if a.json {
				out := make([]failureJSON, len(rows))
				for i, f := range rows {
					out[i] = newFailureJSON(f)
				}
				return a.printJSON(out)
			}
			if len(rows) == 0 {
				fmt.Fprintln(a.stdout, "no failures match")
				return nil
			}
			cols := []string{"RUN", "WORKFLOW", "STEP", "ACTIVITY", "REASON", "ATTEMPTS", "ERRORS", "RESCUES", "FAILED", "ERROR"}
			if includeRequeued {
				cols = append(cols, "REQUEUED")
			}
			t := newTable(a.stdout, cols...)
			for _, f := range rows {
				cells := []any{f.RunID, f.Workflow, stepCell(f.Step), dash(f.Activity), f.Reason, f.Attempts, f.Errors,
					f.Rescues, stamp(f.FailedAt), clip(f.ErrorMessage, 60)}
				if includeRequeued {
					cells = append(cells, stampPtr(f.RequeuedAt))
				}
				t.row(cells...)
			}
			return t.flush()
		},
	}
	ff.register(cmd)
	cmd.Flags().BoolVar(&includeRequeued, "include-requeued", false, "also list failures that were requeued (history)")
	cmd.Flags().IntVar(&limit, "limit", 1000, "list at most this many failures (at least 1)")
	return cmd
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
	cmd := &cobra.Command{
		Use:   "requeue [RUN_ID ...]",
		Short: "Put failed runs back in the queue: by ID, or by filter (try --dry-run first)",
		Long: `Put failed runs back in the queue. A requeued run keeps its ID and its
history; the step that failed gets a fresh budget and runs again; the failure
row is marked requeued and stays as history. Every requeue writes an audit
row (tenure audit) with the filter, the count and --note.

Give run IDs, or a filter (--workflow, --activity, --reason, --since,
--until; all must match), or --all. --dry-run lists what would be requeued
and changes nothing. Large requeues run in batches (--batch-size), one audit
row per batch, with a progress bar on stderr when it is a terminal.

Requeueing a run that failed as indeterminate invokes its at-most-once
activity again: do it only once you know its effect did not happen.`,
		Example: `  tenure failures requeue 0192c3e4-7b1a-7c52-9a3e-5d1f2b3c4d5e --note INC-42
  tenure failures requeue --activity charge --reason retries_exhausted --since 2h --dry-run
  tenure failures requeue --activity charge --reason retries_exhausted --since 2h --note INC-42`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				if ff.set() || all || dryRun {
					return usagef("give run IDs or a filter, not both (--dry-run applies to filters)")
				}
				return a.requeueIDs(args, note)
			}
			if !ff.set() && !all {
				return usagef("give run IDs, a filter (--workflow, --activity, --reason, --since, --until) or --all")
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
	cmd.Flags().BoolVar(&all, "all", false, "requeue every open failure (when no filter is given)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be requeued; change nothing")
	cmd.Flags().StringVar(&note, "note", "", "note recorded in the audit log (an incident number, say)")
	cmd.Flags().IntVar(&batch, "batch-size", 500, "requeue at most this many runs per statement")
	return cmd
}

// requeueIDs requeues runs one by one, reporting each. The exit status is 3
// when every failure was "not found", else 1 when anything failed.
func (a *app) requeueIDs(args []string, note string) error {
	ids := make([]uuid.UUID, len(args))
	for i, s := range args {
		id, err := parseRunID(s)
		if err != nil {
			return err
		}
		ids[i] = id
	}
	op, err := a.operator()
	if err != nil {
		return err
	}
	type result struct {
		RunID    uuid.UUID `json:"run_id"`
		Requeued bool      `json:"requeued"`
		Error    string    `json:"error,omitempty"`
	}
	var results []result
	var errs []error
	for _, id := range ids {
		err := op.Requeue(a.ctx, id, note)
		r := result{RunID: id, Requeued: err == nil}
		if err != nil {
			r.Error = err.Error()
			errs = append(errs, err)
			if !a.json {
				fmt.Fprintln(a.stderr, "tenure: "+message(err))
			}
		} else if !a.json {
			fmt.Fprintf(a.stdout, "requeued %s\n", id)
		}
		results = append(results, r)
	}
	if a.json {
		if err := a.printJSON(results); err != nil {
			return err
		}
	}
	if len(errs) == 0 {
		return nil
	}
	for _, err := range errs {
		if !errors.Is(err, operator.ErrNotFound) {
			return quiet{fmt.Errorf("%d of %s not requeued", len(errs), plural(int64(len(ids)), "run")), exitError}
		}
	}
	return quiet{fmt.Errorf("%d of %s not found", len(errs), plural(int64(len(ids)), "run")), exitNotFound}
}

func (a *app) printRequeued(res []operator.RequeueCandidate, dryRun bool) error {
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
