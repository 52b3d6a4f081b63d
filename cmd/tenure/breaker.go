package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/flow"
)

// tenure breaker open and close: a downstream's circuit breaker moved by
// hand, through the SQL functions open_breaker and close_breaker, which
// audit it. A group of its own, as runs and failures are: a noun, then what
// is done to it, as SQL names the functions.

func (a *app) breakerCommand() *cobra.Command {
	return group("breaker", "Open or close a downstream's circuit breaker by hand (audited)",
		a.breakerMoveCommand(true), a.breakerMoveCommand(false))
}

// breakerMoveCommand is tenure breaker open (open) or tenure breaker close.
func (a *app) breakerMoveCommand(open bool) *cobra.Command {
	var note string
	cmd := &cobra.Command{
		Use:   "open NAME [--note TEXT]",
		Short: "Open a downstream's breaker by hand: no call of it starts until it is closed",
		Long: `Open the circuit breaker of a downstream by hand, through the SQL function
open_breaker: no attempt of an activity that calls it starts, whatever its
errors, until tenure breaker close (a breaker opened by hand sends no
probe). Steps that would call it wait, charged nothing: no attempt, no
retry spent. The change is written to the audit log with --note (tenure
audit, action breaker) and to the breaker's history (tenure limits show).`,
		Example: `  tenure breaker open payments --note "INC-9: the provider double-charges"`,
		Args:    rangeArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			op, err := a.operator()
			if err != nil {
				return err
			}
			move, state, text := op.OpenBreaker, flow.BreakerOpen,
				"opened the breaker of %s by hand: no call of it starts until tenure breaker close %[1]s\n"
			if !open {
				move, state, text = op.CloseBreaker, flow.BreakerClosed,
					"closed the breaker of %s: the steps waiting on it start again\n"
			}
			if err := move(a.ctx, args[0], note); err != nil {
				return noDownstream(err)
			}
			if a.json {
				return a.printJSON(struct {
					Downstream string `json:"downstream"`
					Breaker    string `json:"breaker"`
				}{args[0], state})
			}
			_, err = fmt.Fprintf(a.stdout, text, args[0])
			return err
		},
	}
	if !open {
		cmd.Use = "close NAME [--note TEXT]"
		cmd.Short = "Close a downstream's breaker by hand, and wake the steps waiting on it"
		cmd.Long = `Close the circuit breaker of a downstream by hand, through the SQL function
close_breaker, whether a person opened it or its errors did (without
waiting for a probe): the steps waiting on it start again at once, and its
error window starts afresh. The change is written to the audit log with
--note (tenure audit, action breaker) and to the breaker's history.`
		cmd.Example = `  tenure breaker close payments --note "INC-9: fixed by the provider"`
	}
	cmd.Flags().StringVar(&note, "note", "", "why, for the audit log and the breaker's history")
	return cmd
}
