package main

import (
	"fmt"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/record"
)

// Every command that takes a run takes it by its ID, its first argument, or
// by the key it was started with (--key), the name people know it by.

// keyFlag registers --key on cmd, a command that takes a run.
func keyFlag(cmd *cobra.Command, key *string) {
	cmd.Flags().StringVar(key, "key", "", "the key the run was started with (sdk.WithKey), instead of its ID")
}

// runArgs checks the arguments of a command that takes a run and then lo to
// hi arguments more: with --key, lo to hi; without, the run's ID first.
func runArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		n, path := len(args), cmd.CommandPath()
		if cmd.Flags().Changed("key") {
			// No signal name or step number reads as a run ID.
			if n > 0 {
				if _, err := uuid.Parse(args[0]); err == nil {
					return usagef("give a run ID or --key, not both")
				}
			}
			if n < lo || n > hi {
				return usagef("%s --key KEY takes %s, got %d (see %s --help)", path, arguments(lo, hi), n, path)
			}
			return nil
		}
		if n == 0 {
			return usagef("give a run ID or --key KEY (see %s --help)", path)
		}
		if n < lo+1 || n > hi+1 {
			return usagef("%s takes %s, got %d (see %s --help)", path, arguments(lo+1, hi+1), n, path)
		}
		return nil
	}
}

// arguments says how many arguments a command takes: "2 arguments", "1 to
// 2 arguments", "no argument".
func arguments(lo, hi int) string {
	switch {
	case lo == hi && lo == 0:
		return "no argument"
	case lo == hi:
		return plural(int64(lo), "argument")
	}
	return fmt.Sprintf("%d to %d arguments", lo, hi)
}

// runID returns the run that args (checked by runArgs) or --key name, and
// the arguments after it. By ID it reads nothing; by key it looks the run
// up (operator.ErrNotFound when no run holds the key).
func (a *app) runID(cmd *cobra.Command, key string, args []string) (uuid.UUID, []string, error) {
	if !cmd.Flags().Changed("key") {
		id, err := parseRunID(cmd, args[0])
		return id, args[1:], err
	}
	r, rest, err := a.findRun(cmd, key, args)
	return r.ID, rest, err
}

// findRun is runID, and the run read.
func (a *app) findRun(cmd *cobra.Command, key string, args []string) (record.Run, []string, error) {
	byKey := cmd.Flags().Changed("key")
	var id uuid.UUID
	switch {
	case byKey && key == "":
		return record.Run{}, nil, usagef("--key: empty key")
	case !byKey:
		var err error
		if id, err = parseRunID(cmd, args[0]); err != nil {
			return record.Run{}, nil, err
		}
		args = args[1:]
	}
	op, err := a.operator()
	if err != nil {
		return record.Run{}, nil, err
	}
	var r record.Run
	if byKey {
		r, err = op.RunByKey(a.ctx, key)
	} else {
		r, err = op.Run(a.ctx, id)
	}
	return r, args, err
}
