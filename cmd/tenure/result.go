package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
)

// resultPoll is how often tenure runs result reads the run's status while
// it waits, besides the notice of the run's end (LISTEN): what a missed
// notice costs at most, or any wait behind a pooler that delivers none.
// followPoll is the same with --follow, which polls for steps too: a step's
// end sends no notice.
const (
	resultPoll = time.Second
	followPoll = 200 * time.Millisecond
)

// runsResultCommand is tenure runs result: it waits for a run's end.
func (a *app) runsResultCommand() *cobra.Command {
	var key, timeout string
	var follow bool
	cmd := &cobra.Command{
		Use:   "result {RUN_ID | --key KEY}",
		Short: "Wait for a run to end; print its output, or its failure",
		Long: `Wait until the run ends, then print its output (the JSON the workflow
returned) on stdout and exit 0; or, when it failed or was cancelled, say so
on stderr, with the failure's reason, step and last error, and exit 5. --json
prints the run's status, output and failure as one object either way. A run
that has ended already is printed at once.

--follow prints each step as it ends, on stderr (stdout keeps the output
alone): its number, its kind or activity, its status and, for an activity,
its attempts. --timeout gives up after that long (exit 1); without it the
wait lasts until the run ends or the command is interrupted.

While it waits it reads the run's status alone, not its input or output: at
the notice of the run's end (LISTEN, as sdk's Result waits), and every
second besides, in case a notice is missed or a connection pooler delivers
none; with --follow, every 200 ms, with how many of its steps have ended,
and the steps themselves only when one has. The whole run is read once, at
its end.`,
		Example: `  tenure runs result --key order-42
  tenure runs result 0192c3e4-7b1a-7c52-9a3e-5d1f2b3c4d5e --follow --timeout 10m
  tenure runs start place-order '{"order_id": 42}' --json | jq -r .run_id | xargs tenure runs result`,
		Args: runArgs(0, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			var limit time.Duration
			if timeout != "" {
				d, err := parseAge(timeout)
				if err != nil || d <= 0 {
					return usagef("--timeout: want a positive duration such as 30s, 10m or 1d")
				}
				limit = d
			}
			id, _, err := a.runID(cmd, key, args)
			if err != nil {
				return err
			}
			r, err := a.await(id, limit, follow)
			if err != nil {
				return err
			}
			return a.printResult(r)
		},
	}
	keyFlag(cmd, &key)
	cmd.Flags().StringVar(&timeout, "timeout", "", "give up after this long: 30s, 10m, 1d (default: wait until the run ends)")
	cmd.Flags().BoolVar(&follow, "follow", false, "print each step on stderr as it ends")
	return cmd
}

// await waits for run id's end (operator.AwaitRun: its status read at the
// notice of its end and every resultPoll, or followPoll with follow), for
// up to limit (0: no limit), or until the command is interrupted, and
// returns the run, read whole once it has ended. With follow it prints each
// step on stderr as it ends: the steps are read when the count of ended
// steps or the latest end has changed since the last read, the final read
// included, which follows the run's end.
func (a *app) await(id uuid.UUID, limit time.Duration, follow bool) (record.Run, error) {
	op, err := a.operator()
	if err != nil {
		return record.Run{}, err
	}
	ctx, cancel := a.ctx, context.CancelFunc(func() {})
	if limit > 0 {
		ctx, cancel = context.WithTimeout(a.ctx, limit)
	}
	defer cancel()
	o := operator.AwaitOptions{Poll: resultPoll}
	var last record.Progress
	printed := map[string]bool{}
	if follow {
		o.Poll, o.Steps = followPoll, true
	}
	o.Progress = func(p record.Progress) error {
		changed := p.StepsEnded != last.StepsEnded || !equalTimes(p.LastStepEnd, last.LastStepEnd)
		last = p
		if follow && changed {
			return a.printEndedSteps(op, id, printed)
		}
		return nil
	}
	r, err := op.AwaitRun(ctx, id, o)
	switch {
	case err == nil:
		return r, nil
	case a.ctx.Err() != nil:
		return record.Run{}, fmt.Errorf("stopped waiting for run %s: %w", id, a.ctx.Err())
	case ctx.Err() != nil && last.Status != "":
		return record.Run{}, fmt.Errorf("run %s has not ended after %s: it is %s", id, roughly(limit), last.Status)
	}
	return record.Run{}, err
}

// equalTimes reports whether two optional times are the same.
func equalTimes(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// printEndedSteps prints, on stderr, the steps of run id that have ended
// and are not in printed yet, and adds them. A step requeued after it
// failed ends again later, and is printed again then.
func (a *app) printEndedSteps(op *operator.Operator, id uuid.UUID, printed map[string]bool) error {
	steps, err := op.Steps(a.ctx, id)
	if err != nil {
		return err
	}
	var ended []record.Step
	for _, s := range steps {
		if s.Status != record.StepCompleted && s.Status != record.StepFailed {
			continue
		}
		mark := fmt.Sprint(s.Step, s.Status, s.FinishedAt)
		if !printed[mark] {
			printed[mark] = true
			ended = append(ended, s)
		}
	}
	if len(ended) == 0 {
		return nil
	}
	attempts, err := op.History(a.ctx, id)
	if err != nil {
		return err
	}
	count := map[int]int{}
	for _, at := range attempts {
		count[at.Step]++
	}
	for _, s := range ended {
		line := stepHead(newStepJSON(s, nil))
		if s.Kind == record.KindActivity {
			line += fmt.Sprintf("  (%s)", plural(int64(count[s.Step]), "attempt"))
		}
		if s.ErrorMessage != "" {
			line += ": " + clip(joinType(s.ErrorType, s.ErrorMessage), 120)
		}
		fmt.Fprintln(a.stderr, line)
	}
	return nil
}

// printResult prints a run that has ended: its output, or its failure as
// the error of exit status 5.
func (a *app) printResult(r record.Run) error {
	var failure *failureJSON
	if r.Failure != nil {
		f := newFailureJSON(*r.Failure)
		failure = &f
	}
	if a.json {
		out := struct {
			RunID   uuid.UUID        `json:"run_id"`
			Status  record.RunStatus `json:"status"`
			Output  json.RawMessage  `json:"output,omitempty"`
			Failure *failureJSON     `json:"failure,omitempty"`
			Error   string           `json:"error,omitempty"`
		}{RunID: r.ID, Status: r.Status, Output: r.Output, Failure: failure}
		if r.Status != record.RunCompleted {
			out.Output, out.Error = nil, r.ErrorMessage
		}
		if err := a.printJSON(out); err != nil {
			return err
		}
	}
	switch r.Status {
	case record.RunCompleted:
		if !a.json {
			out := r.Output
			if out == nil {
				out = []byte("null")
			}
			fmt.Fprintln(a.stdout, string(out))
		}
		return nil
	case record.RunCancelled:
		msg := fmt.Sprintf("run %s was cancelled", r.ID)
		if r.ErrorMessage != "" {
			msg += ": " + r.ErrorMessage
		}
		return quiet{errors.New(msg), exitRunFailed}
	}
	msg := fmt.Sprintf("run %s failed", r.ID)
	if f := r.Failure; f != nil {
		msg += ": " + string(f.Reason)
		if f.Step > 0 {
			msg += fmt.Sprintf(" at step %d (%s)", f.Step, f.Activity)
		}
		msg += fmt.Sprintf(" after %s: %s", plural(int64(f.Attempts), "attempt"), clip(joinType(f.ErrorType, f.ErrorMessage), 300))
	} else if r.ErrorMessage != "" {
		msg += ": " + r.ErrorMessage
	}
	return quiet{errors.New(msg), exitRunFailed}
}
