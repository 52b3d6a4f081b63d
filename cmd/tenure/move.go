package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
)

// runsMoveCommand is tenure runs move: pinned runs to another build.
func (a *app) runsMoveCommand() *cobra.Command {
	var from, to, workflow, note string
	var unpin, dryRun bool
	var batch int
	cmd := &cobra.Command{
		Use:   "move --build BUILD {--to BUILD | --unpin}",
		Short: "Move the runs pinned to a build to another build, on purpose and audited (try --dry-run first)",
		Long: `Move the runs pinned to --build (workflows declared with sdk.WithPinning) to
the build --to, or unpin them (--unpin) so that any worker of their workflow
claims them. It moves the runs that can still run: queued (waiting too),
running (the worker holding one goes on; its next claim is by the new build)
and failed (a requeue later is claimed by the new build). --workflow moves
one workflow's runs only. --dry-run counts what would move and changes
nothing; a move runs in batches (--batch-size), each writing one audit row
(tenure audit) with the builds, the runs and --note, and wakes the idle
workers of the runs' queues. A batch passes over the runs a claim or a
commit holds at that moment; the next batch moves them.

Runs pinned to a build that no live worker runs are named, with their
build, by tenure workers and by each worker's log once a minute. The new
build replays the runs it takes under its own code: replay their exported
histories against it first (tenure runs export, tenuretest.Replay).`,
		Example: `  tenure runs move --build 3f2a9c1b7d4e --to 8e1f0a2b3c4d --dry-run
  tenure runs move --build 3f2a9c1b7d4e --to 8e1f0a2b3c4d --workflow checkout --note "v1 retired, INC-42"`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case from == "":
				return usagef("--build: name the build the runs are pinned to")
			case unpin && to != "":
				return usagef("give --to or --unpin, not both")
			case !unpin && to == "":
				return usagef("give --to BUILD, or --unpin")
			}
			if err := atLeastOne("batch-size", batch); err != nil {
				return err
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			moved, err := op.MoveRuns(a.ctx, operator.MoveFilter{From: from, To: to, Workflow: workflow},
				operator.MoveOptions{DryRun: dryRun, Note: note, BatchSize: batch})
			if err != nil {
				return err
			}
			return a.printMoved(moved, from, to, dryRun)
		},
	}
	cmd.Flags().StringVar(&from, "build", "", "move the runs pinned to this build")
	cmd.Flags().StringVar(&to, "to", "", "pin them to this build")
	cmd.Flags().BoolVar(&unpin, "unpin", false, "unpin them: any worker of their workflow claims them")
	cmd.Flags().StringVar(&workflow, "workflow", "", "move the runs of this workflow only")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what would move; change nothing")
	cmd.Flags().StringVar(&note, "note", "", "note recorded in the audit log (an incident number, say)")
	cmd.Flags().IntVar(&batch, "batch-size", 500, "move at most this many runs per statement (and audit row)")
	return cmd
}

// printMoved prints what a move moved, or would move, per workflow, queue
// and status, and the total.
func (a *app) printMoved(moved []record.MovedRuns, from, to string, dryRun bool) error {
	if a.json {
		if moved == nil {
			moved = []record.MovedRuns{}
		}
		return a.printJSON(struct {
			From   string             `json:"from_build"`
			To     string             `json:"to_build"`
			DryRun bool               `json:"dry_run"`
			Runs   []record.MovedRuns `json:"runs"`
		}{from, to, dryRun, moved})
	}
	if len(moved) == 0 {
		_, err := fmt.Fprintf(a.stderr, "no run pinned to build %s can still run: nothing to move\n", from)
		return err
	}
	var total int64
	t := newTable(a.stdout, "WORKFLOW", "QUEUE", "STATUS", "RUNS")
	for _, m := range moved {
		t.row(m.Workflow, m.Queue, string(m.Status), m.Runs)
		total += m.Runs
	}
	if err := t.flush(); err != nil {
		return err
	}
	dest := "build " + to
	if to == "" {
		dest = "no build (unpinned)"
	}
	verb := "moved"
	if dryRun {
		verb = "would move"
	}
	_, err := fmt.Fprintf(a.stdout, "%s %s pinned to build %s to %s\n", verb, plural(total, "run"), from, dest)
	return err
}
