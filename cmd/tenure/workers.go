package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/record"
)

func (a *app) workersCommand() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "The worker registry: live workers, what they serve and hold; orphaned runs",
		Long: `List the live workers (--all: stopped and dead ones too) from the registry
their heartbeats keep: label, host and pid, version and build, the workflows
and queues each serves, its concurrency and the runs it holds, and its last
heartbeat. A worker is live while it beats within three heartbeat intervals
(or its lease TTL) and has not stopped.

Then the orphaned runs: runs of a workflow or a queue that no live worker
serves, queued, or running with their lease expired (their worker died),
and runs pinned to a build (sdk.WithPinning) no live worker of which serves
them, with the build. They wait until such a worker starts, or, pinned, until
they are moved to another build (tenure runs move).`,
		Example: `  tenure workers
  tenure workers --all --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			op, err := a.operator()
			if err != nil {
				return err
			}
			ws, err := op.Workers(a.ctx, all)
			if err != nil {
				return err
			}
			orphans, err := op.Orphans(a.ctx)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(struct {
					Workers []record.Worker  `json:"workers"`
					Orphans []record.Orphans `json:"orphaned_runs"`
				}{ws, orphans})
			}
			t := newTable(a.stdout, "WORKER", "STATE", "HOST", "PID", "VERSION", "BUILD", "WORKFLOWS", "QUEUES", "HELD", "HEARTBEAT")
			for _, w := range ws {
				state := "live"
				switch {
				case w.StoppedAt != nil:
					state = "stopped"
				case !w.Live:
					state = "dead"
				}
				t.row(w.Label, state, w.Host, w.PID, w.Version, dash(w.BuildID), strings.Join(w.Workflows, ","), strings.Join(w.Queues, ","),
					fmt.Sprintf("%d/%d", w.RunsHeld, w.Concurrency), ago(w.LastHeartbeatAt))
			}
			if err := t.flush(); err != nil {
				return err
			}
			if len(ws) == 0 {
				fmt.Fprintln(a.stdout, "no live worker")
			}
			return a.warnOrphans(a.stdout, orphans)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "also the workers that stopped or stopped beating")
	return cmd
}

// warnOrphans prints the runs no live worker serves (record.Orphans): for
// runs pinned to a build, the build, and how to move them.
func (a *app) warnOrphans(w io.Writer, orphans []record.Orphans) error {
	for _, o := range orphans {
		var err error
		if o.Build != "" {
			_, err = fmt.Fprintf(w, "warning: %s of workflow %q on queue %q waiting, oldest %s, pinned to build %s: no live worker of that build serves them "+
				"(start one, or move them: tenure runs move --build %s --to BUILD --dry-run)\n",
				plural(int64(o.Runs), "run"), o.Workflow, o.Queue, ago(o.OldestCreatedAt), o.Build, o.Build)
		} else {
			_, err = fmt.Fprintf(w, "warning: %s of workflow %q on queue %q waiting, oldest %s: no live worker serves them\n",
				plural(int64(o.Runs), "run"), o.Workflow, o.Queue, ago(o.OldestCreatedAt))
		}
		if err != nil {
			return err
		}
	}
	return nil
}
