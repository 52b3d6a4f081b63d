package main

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

func (a *app) explainCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "explain RUN_ID STEP",
		Short: "Explain the retry policy recorded on a step: delays, worst case, warnings",
		Long: `Explain the retry policy in force for a step's latest attempt, as recorded
in the database: the delay range after each failed attempt (jitter
included), the worst-case total time, and warnings where the policy cannot
fit its deadline. Error-type rules are explained one by one. Functions
(a RetryIf predicate, a function backoff) cannot be recorded and are named
as such.`,
		Example: `  tenure explain 0192c3e4-7b1a-7c52-9a3e-5d1f2b3c4d5e 1`,
		Args:    exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseRunID(args[0])
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 {
				return usagef("invalid step %q: want a step number (1, 2, 3 ...)", args[1])
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			if _, err := op.Run(a.ctx, id); err != nil {
				return err
			}
			steps, err := op.Steps(a.ctx, id)
			if err != nil {
				return err
			}
			var step *operator.Step
			for i := range steps {
				if steps[i].Step == n {
					step = &steps[i]
				}
			}
			if step == nil {
				return fmt.Errorf("run %s has no step %d (it has %s): %w", id, n, plural(int64(len(steps)), "step"), operator.ErrNotFound)
			}
			if step.Kind != sdk.KindActivity {
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
}
