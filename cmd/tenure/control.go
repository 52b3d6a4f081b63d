package main

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
)

// runsSignalCommand is tenure runs signal: operator.Signal, the SQL
// function send_signal.
func (a *app) runsSignalCommand() *cobra.Command {
	var key string
	cmd := &cobra.Command{
		Use:   "signal {RUN_ID | --key KEY} NAME [PAYLOAD_JSON]",
		Short: "Send a signal to a run, for its workflow's Receive",
		Long: `Send the signal NAME to a run with PAYLOAD_JSON as its payload (JSON null
when omitted), as sdk.Client.Send does, and print the signal's ID. A run
waiting for a signal of that name wakes at once; otherwise the signal is kept
until the workflow receives it. Signals are received once each, in the order
sent per name. A signal is not idempotent: sending it twice sends two.
Sending to a run that has ended is an error; so is a payload that is not
JSON (a string needs its quotes: '"yes"'), and then nothing is sent.`,
		Example: `  tenure runs signal 0192c3e4-7b1a-7c52-9a3e-5d1f2b3c4d5e approve
  tenure runs signal 0192c3e4-7b1a-7c52-9a3e-5d1f2b3c4d5e approve '{"by": "ada"}'
  tenure runs signal --key order-42 approve '"yes"'`,
		Args: runArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The arguments are checked before the key is looked up.
			rest := args
			if !cmd.Flags().Changed("key") {
				rest = args[1:]
			}
			name := rest[0]
			if name == "" {
				return usagef("empty signal name")
			}
			payload := []byte("null")
			if len(rest) == 2 {
				payload = []byte(rest[1])
				if err := json.Unmarshal(payload, new(json.RawMessage)); err != nil {
					return usagef("payload %q is not JSON: %v (a JSON string needs its quotes: '\"yes\"')", clip(rest[1], 60), err)
				}
			}
			id, _, err := a.runID(cmd, key, args)
			if err != nil {
				return err
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			sid, err := op.Signal(a.ctx, id, name, payload)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(struct {
					RunID    uuid.UUID `json:"run_id"`
					Name     string    `json:"name"`
					SignalID int64     `json:"signal_id"`
				}{id, name, sid})
			}
			fmt.Fprintf(a.stdout, "sent signal %d %q to run %s\n", sid, name, id)
			return nil
		},
	}
	keyFlag(cmd, &key)
	return cmd
}

// runsCancelCommand is tenure runs cancel: operator.Cancel, the SQL
// function cancel_run_noted.
func (a *app) runsCancelCommand() *cobra.Command {
	var key, note string
	cmd := &cobra.Command{
		Use:   "cancel {RUN_ID | --key KEY}",
		Short: "Cancel a run: at once if it has not started, else through its worker",
		Long: `Cancel a run, as sdk.Client.Cancel does. A run that has not started ends
cancelled at once, and so do its children. A run that has started (running,
or queued waiting for a sleep, a signal or a child) is marked for
cancellation: its worker cancels the running activity's context
(sdk.ErrCancelled), lets the workflow clean up, and ends the run cancelled,
its unfinished children in turn. A waiting run is woken for that, so it needs
a live worker of its workflow. Cancelling a run that has ended is an error.
The cancel is written to the audit log with --note (tenure audit).`,
		Example: `  tenure runs cancel 0192c3e4-7b1a-7c52-9a3e-5d1f2b3c4d5e --note "INC-7: customer withdrew"
  tenure runs cancel --key order-42`,
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
			requested, err := op.Cancel(a.ctx, id, note)
			if err != nil {
				return err
			}
			if a.json {
				outcome := "cancelled"
				if requested {
					outcome = "requested"
				}
				return a.printJSON(struct {
					RunID   uuid.UUID `json:"run_id"`
					Outcome string    `json:"outcome"`
				}{id, outcome})
			}
			if requested {
				fmt.Fprintf(a.stdout, "cancel requested for run %s: its worker stops the running activity and ends the run\n", id)
			} else {
				fmt.Fprintf(a.stdout, "cancelled run %s\n", id)
			}
			return nil
		},
	}
	keyFlag(cmd, &key)
	cmd.Flags().StringVar(&note, "note", "", "why, for the audit log")
	return cmd
}
