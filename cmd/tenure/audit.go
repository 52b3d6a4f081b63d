package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
)

func (a *app) auditCommand() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the audit log: every requeue and every purge, newest first",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := atLeastOne("limit", limit); err != nil {
				return err
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			entries, err := op.AuditLog(a.ctx, limit)
			if err != nil {
				return err
			}
			if a.json {
				type row struct {
					ID       int64          `json:"id"`
					At       time.Time      `json:"at"`
					Actor    string         `json:"actor"`
					Action   string         `json:"action"`
					Runs     int64          `json:"runs"`
					Failures int64          `json:"failures"`
					Filter   map[string]any `json:"filter"`
					RunIDs   []uuid.UUID    `json:"run_ids"`
					Note     string         `json:"note,omitempty"`
				}
				out := make([]row, len(entries))
				for i, e := range entries {
					out[i] = row{e.ID, e.At, e.Actor, e.Action, e.Runs, e.Failures, e.Filter, e.RunIDs, e.Note}
				}
				return a.printJSON(out)
			}
			if len(entries) == 0 {
				fmt.Fprintln(a.stdout, "the audit log is empty")
				return nil
			}
			t := newTable(a.stdout, "ID", "AT", "ACTOR", "ACTION", "RUNS", "FAILURES", "FILTER", "NOTE")
			for _, e := range entries {
				filter, _ := json.Marshal(e.Filter)
				t.row(e.ID, stamp(e.At), e.Actor, e.Action, e.Runs, e.Failures, string(filter), dash(e.Note))
			}
			return t.flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "show at most this many entries (at least 1)")
	return cmd
}
