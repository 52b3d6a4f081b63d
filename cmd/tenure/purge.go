package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/operator"
)

// purgeHelp is tenure purge's long help.
const purgeHelp = `Delete old finished runs with their steps and attempts, now, and write an
audit row with what was deleted (tenure audit). Nothing is deleted by a cap.
Until a retention is configured, nothing is deleted in the background
either: a purge is the only way history goes. Once one is (tenure retention
set), the workers also drop, every 10 minutes, each day's partitions of
steps and attempts whose runs may go, and those runs (tenure retention show
lists the drops); a purge works beside it.

--completed-older-than deletes runs that completed or were cancelled that
long ago, except runs with failure history (failed once, then requeued).
--failures-older-than deletes failed runs, and runs with failure history,
that finished that long ago, failure rows included. Give either or both.
Ages are Go durations or days: 30d, 36h, 90m. --dry-run counts only.`

func (a *app) purgeCommand() *cobra.Command {
	var completed, failures, workflow, note string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Delete old finished runs (retention); failure history only when asked",
		Long:  purgeHelp,
		Example: `  tenure purge --completed-older-than 30d --dry-run
  tenure purge --completed-older-than 30d
  tenure purge --failures-older-than 180d --note "retention policy RP-3"`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if completed == "" && failures == "" {
				return usagef("give --completed-older-than, --failures-older-than or both")
			}
			o := operator.PurgeOptions{Workflow: workflow, DryRun: dryRun, Note: note}
			type result struct {
				What     string `json:"what"`
				Runs     int64  `json:"runs"`
				Failures int64  `json:"failures"`
				DryRun   bool   `json:"dry_run"`
			}
			var todo []func() (result, error)
			if completed != "" {
				age, err := parseAge(completed)
				if err != nil {
					return usagef("--completed-older-than: %v", err)
				}
				todo = append(todo, func() (result, error) {
					o := o
					o.OlderThan = age
					p, err := a.op.PurgeCompleted(a.ctx, o)
					return result{"completed", p.Runs, p.Failures, dryRun}, err
				})
			}
			if failures != "" {
				age, err := parseAge(failures)
				if err != nil {
					return usagef("--failures-older-than: %v", err)
				}
				todo = append(todo, func() (result, error) {
					o := o
					o.OlderThan = age
					p, err := a.op.PurgeFailures(a.ctx, o)
					return result{"failures", p.Runs, p.Failures, dryRun}, err
				})
			}
			if _, err := a.operator(); err != nil {
				return err
			}
			var results []result
			for _, do := range todo {
				r, err := do()
				if err != nil {
					return err
				}
				results = append(results, r)
			}
			if a.json {
				return a.printJSON(results)
			}
			verb := "deleted"
			if dryRun {
				verb = "would delete"
			}
			for _, r := range results {
				if r.What == "completed" {
					fmt.Fprintf(a.stdout, "completed runs: %s %s\n", verb, plural(r.Runs, "run"))
				} else {
					fmt.Fprintf(a.stdout, "failure history: %s %s and %s\n", verb, plural(r.Runs, "run"), plural(r.Failures, "failure row"))
				}
			}
			if dryRun {
				fmt.Fprintln(a.stdout, "dry run: nothing changed")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&completed, "completed-older-than", "", "delete completed and cancelled runs that finished this long ago")
	cmd.Flags().StringVar(&failures, "failures-older-than", "", "delete failed runs and failure history that finished this long ago")
	cmd.Flags().StringVar(&workflow, "workflow", "", "only runs of this workflow")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be deleted; delete nothing")
	cmd.Flags().StringVar(&note, "note", "", "note recorded in the audit log")
	return cmd
}
