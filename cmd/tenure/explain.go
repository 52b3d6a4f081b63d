package main

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
)

func (a *app) explainCommand() *cobra.Command {
	var key string
	cmd := &cobra.Command{
		Use:   "explain {RUN_ID | --key KEY} STEP",
		Short: "Explain the retry policy recorded on a step: delays, worst case, warnings",
		Long: `Explain the retry policy in force for a step's latest attempt, as recorded
in the database: the delay range after each failed attempt (jitter
included), the worst-case total time, and warnings where the policy cannot
fit its deadline. Error-type rules are explained one by one. Functions
(a RetryIf predicate, a function backoff) cannot be recorded and are named
as such.`,
		Example: `  tenure explain 0192c3e4-7b1a-7c52-9a3e-5d1f2b3c4d5e 1
  tenure explain --key order-42 2`,
		Args: runArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			arg := args[len(args)-1]
			n, err := strconv.Atoi(arg)
			if err != nil || n < 1 {
				return usagef("invalid step %q: want a step number (1, 2, 3 ...)", arg)
			}
			r, _, err := a.findRun(cmd, key, args)
			if err != nil {
				return err
			}
			id, op := r.ID, a.op
			steps, err := op.Steps(a.ctx, id)
			if err != nil {
				return err
			}
			var step *record.Step
			for i := range steps {
				if steps[i].Step == n {
					step = &steps[i]
				}
			}
			if step == nil {
				return fmt.Errorf("run %s has no step %d (it has %s): %w", id, n, plural(int64(len(steps)), "step"), operator.ErrNotFound)
			}
			if step.Kind != record.KindActivity {
				return fmt.Errorf("step %d of run %s is a step of kind %s (%s): it has no attempts and no retry policy", n, id, step.Kind, step.Activity)
			}
			var p policy.Retry
			if err := json.Unmarshal(step.Policy, &p); err != nil {
				return fmt.Errorf("step %d: recorded policy does not parse: %w", n, err)
			}
			e := policy.Explain(p)
			if a.json {
				return a.printJSON(map[string]any{
					"run_id": id, "step": n, "activity": step.Activity,
					"policy": json.RawMessage(step.Policy), "worst_case_ms": e.WorstCase.Milliseconds(),
					"warnings": append([]string{}, e.Warnings...), "explanation": e.String(),
				})
			}
			fmt.Fprintf(a.stdout, "run %s step %d (%s), policy of its latest attempt\n", id, n, step.Activity)
			fmt.Fprint(a.stdout, e.String())
			return nil
		},
	}
	keyFlag(cmd, &key)
	return cmd
}
