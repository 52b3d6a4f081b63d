package main

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/operator"
)

// runsStartCommand is tenure runs start: operator.Start.
func (a *app) runsStartCommand() *cobra.Command {
	var o operator.StartOptions
	var delay string
	cmd := &cobra.Command{
		Use:   "start WORKFLOW [INPUT_JSON]",
		Short: "Start a run of a workflow by its name, with a JSON input",
		Long: `Start a run of the workflow named WORKFLOW with INPUT_JSON as its input
(JSON null when omitted; a string needs its quotes: '"ada"'), as sdk.Start
does, and print its ID. Workers that registered the workflow and serve the
queue pick it up; when no live worker does, a warning on stderr says so, and
the run waits until one starts.

The input is not checked against the workflow's input type, which this
binary does not know: a worker fails a run whose input does not decode, with
reason bad_input.

With --key the start is idempotent: when a run of the workflow holds the key
with the same input (compared as JSON values), it is printed and nothing is
started; the same key with another input, or held by a run of another
workflow, is an error. tenure runs result waits for the run's end.

With --fair-key the run shares its queue fairly with the runs of other
fairness keys (a tenant, a customer), in proportion to --fair-weight, as
sdk.WithFairness does.`,
		Example: `  tenure runs start place-order '{"order_id": 42}' --key order-42
  tenure runs start nightly-report --queue reports --delay 10m
  tenure runs start place-order '{"order_id": 43}' --json | jq -r .run_id
  tenure runs start sync-account '{"account": 7}' --fair-key tenant-7 --fair-weight 3`,
		Args: rangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			workflow := args[0]
			if workflow == "" {
				return usagef("empty workflow name")
			}
			input := json.RawMessage("null")
			if len(args) == 2 {
				input = json.RawMessage(args[1])
				if err := json.Unmarshal(input, new(json.RawMessage)); err != nil {
					return usagef("input %q is not JSON: %v (a JSON string needs its quotes: '\"ada\"')", clip(args[1], 60), err)
				}
			}
			if o.Queue == "" {
				return usagef("--queue: empty queue name")
			}
			if cmd.Flags().Changed("key") && o.Key == "" {
				return usagef("--key: empty key")
			}
			switch {
			case cmd.Flags().Changed("fair-key") && o.FairKey == "":
				return usagef("--fair-key: empty fairness key")
			case cmd.Flags().Changed("fair-weight") && o.FairKey == "":
				return usagef("--fair-weight needs --fair-key")
			case cmd.Flags().Changed("fair-weight") && (o.FairWeight < 1 || o.FairWeight > 1_000_000):
				return usagef("--fair-weight: %d, want 1 to 1000000", o.FairWeight)
			case o.FairKey == "":
				o.FairWeight = 0 // not a fair run
			}
			if delay != "" {
				d, err := parseAge(delay)
				if err != nil {
					return usagef("--delay: %v", err)
				}
				o.Delay = d
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			started, err := op.Start(a.ctx, workflow, input, o)
			if err != nil {
				return err
			}
			served, err := op.Served(a.ctx, workflow, o.Queue)
			if err != nil {
				return err
			}
			if !served {
				fmt.Fprintf(a.stderr, "warning: no live worker serves workflow %q on queue %q: the run waits until one starts (tenure workers lists the live ones)\n",
					workflow, o.Queue)
			}
			if a.json {
				return a.printJSON(struct {
					RunID    uuid.UUID `json:"run_id"`
					Workflow string    `json:"workflow"`
					Queue    string    `json:"queue"`
					Key      string    `json:"key,omitempty"`
					FairKey  string    `json:"fair_key,omitempty"`
					Created  bool      `json:"created"`
				}{started.ID, workflow, o.Queue, o.Key, o.FairKey, started.Created})
			}
			if !started.Created {
				fmt.Fprintf(a.stdout, "run %s holds key %q already, with the same input: nothing started\n", started.ID, o.Key)
				return nil
			}
			fmt.Fprintf(a.stdout, "started run %s of workflow %q on queue %q\n", started.ID, workflow, o.Queue)
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Key, "key", "", "start idempotently under this key (sdk.WithKey)")
	cmd.Flags().StringVar(&o.Queue, "queue", "default", "the queue to put the run on")
	cmd.Flags().IntVar(&o.Priority, "priority", 0, "order within the queue: higher first")
	cmd.Flags().StringVar(&delay, "delay", "", "make the run due only after this long: 90s, 10m, 2h, 1d")
	cmd.Flags().StringVar(&o.FairKey, "fair-key", "", "share the queue fairly with other keys' runs (sdk.WithFairness)")
	cmd.Flags().IntVar(&o.FairWeight, "fair-weight", 1, "the fairness key's weight, 1 to 1000000; needs --fair-key")
	return cmd
}
