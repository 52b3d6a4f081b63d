package main

import (
	"fmt"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
)

// runsDeleteCommand is tenure runs delete: operator.DeleteRun, the SQL
// function delete_run.
func (a *app) runsDeleteCommand() *cobra.Command {
	var key, note string
	cmd := &cobra.Command{
		Use:   "delete {RUN_ID | --key KEY}",
		Short: "Delete one finished run with its history (audited)",
		Long: `Delete one run that has finished (completed, failed or cancelled) with
everything recorded for it: its steps, attempts, signals, events, wakes and
failure rows. Its child runs go with it, and theirs: a child holds what its
parent gave it, and would otherwise name a parent that no longer exists.

The deletion is written to the audit log with --note (tenure audit, action
delete), as a purge is: the run's ID, workflow and status, and the ID of
every run deleted; not the run's key, which is often an e-mail address or an
order number, since the audit log is kept for good. The note is kept as
given: say why (a ticket), not whose. tenure purge deletes by age.

A run still queued or running is refused: cancel it first (tenure runs
cancel), or wait for its end. So is a child run whose parent may still replay
it (the parent is queued, running, or failed and so may be requeued: delete
the parent instead, and the child goes with it), and a run whose child runs
have not all ended.`,
		Example: `  tenure runs delete 0192c3e4-7b1a-7c52-9a3e-5d1f2b3c4d5e --note "GDPR-7: erasure request"
  tenure runs delete --key order-42 --note "test order"`,
		Args: runArgs(0, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, _, err := a.runID(cmd, key, args)
			if err != nil {
				return err
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			d, err := op.DeleteRun(a.ctx, id, note)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(struct {
					RunID    uuid.UUID `json:"run_id"`
					Runs     int64     `json:"runs"`
					Failures int64     `json:"failures"`
				}{id, d.Runs, d.Failures})
			}
			if d.Runs > 1 {
				fmt.Fprintf(a.stdout, "deleted run %s and %s with their history (%s)\n", id,
					plural(d.Runs-1, "child run"), plural(d.Failures, "failure row"))
				return nil
			}
			fmt.Fprintf(a.stdout, "deleted run %s with its history (%s)\n", id, plural(d.Failures, "failure row"))
			return nil
		},
	}
	keyFlag(cmd, &key)
	cmd.Flags().StringVar(&note, "note", "", "why, for the audit log")
	return cmd
}
