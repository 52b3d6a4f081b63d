package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/operator"
)

// runsExportCommand is tenure runs export: histories for the replay kit.
func (a *app) runsExportCommand() *cobra.Command {
	var rf runFilter
	var limit int
	cmd := &cobra.Command{
		Use:   "export [RUN_ID ...]",
		Short: "Write runs' histories as JSON, one a line, for tenuretest.Replay",
		Long: `Write the histories of runs, one JSON object a line (record.History): each
step's kind, name, status, output or error and input hash, the run's input,
status and output. tenuretest.Replay replays them against new workflow code
without a database and without invoking any activity, and fails naming the
first step where the code now does something else (docs/deploying.md).

Give run IDs, or select runs as runs list does (--workflow, --status,
--queue, --key), newest first, at most --limit of them.`,
		Example: `  tenure runs export --workflow checkout --status running --limit 500 > testdata/checkout.jsonl
  tenure runs export 0192c3e4-7b1a-7c52-9a3e-5d1f2b3c4d5e`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ids := make([]uuid.UUID, 0, len(args))
			for _, arg := range args {
				id, err := parseRunID(cmd, arg)
				if err != nil {
					return err
				}
				ids = append(ids, id)
			}
			q, err := rf.search()
			if err != nil {
				return err
			}
			if err := atLeastOne("limit", limit); err != nil {
				return err
			}
			if len(ids) > 0 && q != (operator.RunSearch{}) {
				return usagef("give run IDs or filters, not both")
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			if len(ids) == 0 {
				q.Limit = limit
				runs, err := op.SearchRuns(a.ctx, q)
				if err != nil {
					return err
				}
				for _, r := range runs {
					ids = append(ids, r.ID)
				}
			}
			enc := json.NewEncoder(a.stdout)
			selected := len(args) == 0
			for _, id := range ids {
				h, err := op.ExportHistory(a.ctx, id)
				if selected && errors.Is(err, operator.ErrNotFound) {
					fmt.Fprintf(a.stderr, "tenure: run %s was deleted since it was selected: not exported\n", id)
					continue
				}
				if err != nil {
					return err
				}
				if err := enc.Encode(h); err != nil {
					return err
				}
			}
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().IntVar(&limit, "limit", 100, "export at most this many runs that the filters select (at least 1)")
	return cmd
}
