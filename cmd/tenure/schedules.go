package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/schedule"
)

// tenure schedules: list, show, pause, resume, trigger, backfill, set and
// delete schedules (docs/schedules.md), each change audited.

func (a *app) schedulesCommand() *cobra.Command {
	return group("schedules", "List and show schedules and their ticks; pause, resume, trigger, backfill, set and delete them (audited)",
		a.schedulesListCommand(), a.schedulesShowCommand(),
		a.schedulesChangeCommand("pause"), a.schedulesChangeCommand("resume"), a.schedulesChangeCommand("trigger"),
		a.schedulesBackfillCommand(), a.schedulesSetCommand(), a.schedulesDeleteCommand())
}

func (a *app) schedulesSetCommand() *cobra.Command {
	var d schedule.Declaration
	var input, note string
	cmd := &cobra.Command{
		Use:   "set NAME [--spec SPEC --workflow WORKFLOW] [flags]",
		Short: "Create a schedule, or change one, as a person (audited; declarations no longer change it)",
		Long: `Create the schedule NAME (--spec and --workflow required), or change the one
of that name: the flags given replace its settings, the others stay. Written
to the audit log with --note; from then on a worker's declaration of the
schedule in code no longer changes it. A change of its timing (spec, zone)
decides the ticks due since under the new one. The spec is a cron spec (5
fields, or 6 with seconds), a macro (@daily) or "@every <duration>"; the
zone an IANA name.`,
		Example: `  tenure schedules set nightly-report --spec "0 3 * * *" --zone Europe/Berlin --workflow report --input '{"tenant":"all"}' --note INC-14
  tenure schedules set nightly-report --spec "30 3 * * *" --note "after the backup"`,
		Args: rangeArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			op, err := a.operator()
			if err != nil {
				return err
			}
			name := args[0]
			cur, err := op.Schedule(a.ctx, name)
			switch {
			case err == nil:
				base := schedule.Declaration{Name: name, Spec: cur.Spec, Zone: cur.Zone, Workflow: cur.Workflow, Queue: cur.Queue,
					Input: cur.Input, Priority: cur.Priority, Jitter: cur.Jitter, StartsAt: cur.StartsAt, EndsAt: cur.EndsAt,
					Overlap: cur.Overlap, BufferMax: cur.BufferMax, Catchup: cur.Catchup, CatchupWindow: cur.CatchupWindow, CatchupMax: cur.CatchupMax}
				f := cmd.Flags()
				for flag, apply := range map[string]func(){
					"spec": func() { base.Spec = d.Spec }, "zone": func() { base.Zone = d.Zone }, "workflow": func() { base.Workflow = d.Workflow },
					"queue": func() { base.Queue = d.Queue }, "priority": func() { base.Priority = d.Priority }, "jitter": func() { base.Jitter = d.Jitter },
					"overlap": func() { base.Overlap = d.Overlap }, "buffer": func() { base.BufferMax = d.BufferMax },
					"catchup": func() { base.Catchup = d.Catchup }, "catchup-window": func() { base.CatchupWindow = d.CatchupWindow },
					"catchup-max": func() { base.CatchupMax = d.CatchupMax }, "input": func() {},
				} {
					if f.Changed(flag) {
						apply()
					}
				}
				d = base
			case errors.Is(err, operator.ErrNoSchedule):
				if d.Spec == "" || d.Workflow == "" {
					return usagef("a new schedule needs --spec and --workflow")
				}
			default:
				return err
			}
			d.Name = name
			if cmd.Flags().Changed("input") {
				if !json.Valid([]byte(input)) {
					return usagef("--input: not JSON: %s", input)
				}
				d.Input = []byte(input)
			}
			changed, err := op.SetSchedule(a.ctx, d, note)
			if err != nil {
				return err
			}
			if !changed {
				_, err := fmt.Fprintf(a.stdout, "%s has these settings already: nothing changed\n", name)
				return err
			}
			if a.json {
				return a.printJSON(map[string]string{"schedule": name, "action": "set"})
			}
			zone := d.Zone
			if zone == "" {
				zone = "UTC"
			}
			_, err = fmt.Fprintf(a.stdout, "set %s: %s in %s starts %s (declarations no longer change it)\n", name, d.Spec, zone, d.Workflow)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&d.Spec, "spec", "", "when it ticks: a cron spec, a macro or @every <duration>")
	f.StringVar(&d.Zone, "zone", "", "the IANA time zone of a cron spec (default UTC)")
	f.StringVar(&d.Workflow, "workflow", "", "the workflow each tick starts")
	f.StringVar(&d.Queue, "queue", "", "the queue of its runs (default default)")
	f.StringVar(&input, "input", "", "the runs' input, as JSON (default null)")
	f.IntVar(&d.Priority, "priority", 0, "the priority of its runs")
	f.DurationVar(&d.Jitter, "jitter", 0, "delay each tick's run by up to this")
	f.StringVar(&d.Overlap, "overlap", "", "skip (default), buffer_one, buffer_all, allow or cancel_other")
	f.IntVar(&d.BufferMax, "buffer", 0, "buffer_all's most waiting ticks (default 100)")
	f.StringVar(&d.Catchup, "catchup", "", "none, latest (default) or all")
	f.DurationVar(&d.CatchupWindow, "catchup-window", 0, "catch-up all's window (default 24h)")
	f.IntVar(&d.CatchupMax, "catchup-max", 0, "catch-up all's most runs (default 100, at most 1000)")
	f.StringVar(&note, "note", "", "why, for the audit log")
	return cmd
}

func (a *app) schedulesDeleteCommand() *cobra.Command {
	var note string
	cmd := &cobra.Command{
		Use:   "delete NAME [--note TEXT]",
		Short: "Delete a schedule and its ticks, not their runs (audited)",
		Long: `Delete a schedule and its tick rows; the runs its ticks started stay. Written
to the audit log with --note. A worker whose code declares the schedule
creates it again at its next start: remove it from the code, or pause it
instead.`,
		Example: `  tenure schedules delete old-report --note "replaced by nightly-report"`,
		Args:    rangeArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			op, err := a.operator()
			if err != nil {
				return err
			}
			if err := op.DeleteSchedule(a.ctx, args[0], note); err != nil {
				return err
			}
			if a.json {
				return a.printJSON(map[string]string{"schedule": args[0], "action": "delete"})
			}
			_, err = fmt.Fprintf(a.stdout, "deleted %s and its ticks (not their runs)\n", args[0])
			return err
		},
	}
	cmd.Flags().StringVar(&note, "note", "", "why, for the audit log")
	return cmd
}

func (a *app) schedulesBackfillCommand() *cobra.Command {
	var from, to, note string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "backfill NAME --from TIME [--to TIME] [--dry-run] [--note TEXT]",
		Short: "Start the ticks of a past range that have no run: the missed and skipped ones (audited)",
		Long: `Start a run for each tick of the schedule between --from and --to (default
now) that has none: the ticks decided missed (no worker decided them in
time, or the schedule was paused) or skipped (overlap), and those from
before the schedule existed. Each is decided "backfilled", its run of the
tick's key (sdk.ScheduledTick reads its nominal time), outside the overlap
policy, all in one transaction, written to the audit log with --note.
--dry-run lists the ticks it would start. Times are RFC 3339, a date, or an
age (2h: two hours ago). At most 10,000 ticks a backfill.`,
		Example: `  tenure schedules backfill nightly-report --from 2026-11-28 --dry-run
  tenure schedules backfill nightly-report --from 72h --note "INC-12: the warehouse is back"`,
		Args: rangeArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" {
				return usagef("--from: give the start of the range")
			}
			start, err := parseSince(from)
			if err != nil {
				return usagef("--from: %v", err)
			}
			end, err := parseSince(to)
			if err != nil {
				return usagef("--to: %v", err)
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			ticks, err := op.BackfillSchedule(a.ctx, args[0], start, end, dryRun, note)
			if errors.Is(err, operator.ErrBackfillRange) {
				return usagef("%v", err)
			}
			if err != nil {
				return err
			}
			if a.json {
				if ticks == nil {
					ticks = []time.Time{}
				}
				return a.printJSON(struct {
					Schedule string      `json:"schedule"`
					DryRun   bool        `json:"dry_run"`
					Ticks    []time.Time `json:"ticks"`
				}{args[0], dryRun, ticks})
			}
			for _, t := range ticks {
				fmt.Fprintln(a.stdout, stamp(t))
			}
			verb := "started"
			if dryRun {
				verb = "would start"
			}
			_, err = fmt.Fprintf(a.stdout, "%s %s of %s\n", verb, plural(int64(len(ticks)), "tick"), args[0])
			return err
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the range's start: RFC 3339, a date, or an age (72h)")
	cmd.Flags().StringVar(&to, "to", "", "the range's end (default now)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list the ticks it would start; change nothing")
	cmd.Flags().StringVar(&note, "note", "", "why, for the audit log")
	return cmd
}

func (a *app) schedulesListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the schedules: spec, zone, workflow, next tick, last run, state",
		Long: `List every schedule, by name: its spec and time zone, the workflow it
starts, when its next tick is due (by the database's clock), its last run's
status, and whether it is paused (with the note), ended, or cannot be
computed (its error). Any worker decides any schedule's ticks.`,
		Example: `  tenure schedules list
  tenure schedules list --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			op, err := a.operator()
			if err != nil {
				return err
			}
			scs, err := op.Schedules(a.ctx)
			if err != nil {
				return err
			}
			if a.json {
				if scs == nil {
					scs = []record.Schedule{}
				}
				return a.printJSON(scs)
			}
			if len(scs) == 0 {
				_, err := fmt.Fprintln(a.stderr, "no schedule")
				return err
			}
			t := newTable(a.stdout, "NAME", "SPEC", "ZONE", "WORKFLOW", "NEXT", "LAST RUN", "STATE")
			for _, s := range scs {
				t.row(s.Name, s.Spec, s.Zone, s.Workflow, nextText(s), dash(string(s.LastRunStatus)), stateText(s))
			}
			return t.flush()
		},
	}
}

// nextText is when s's next tick is due, for a table cell.
func nextText(s record.Schedule) string {
	switch {
	case s.Ended:
		return "-"
	case s.NextAt == nil:
		return "to compute"
	}
	return stamp(*s.NextAt) + " (" + when(*s.NextAt) + ")"
}

// stateText is s's state: active, paused (note), ended or its error.
func stateText(s record.Schedule) string {
	switch {
	case s.Error != "":
		return "error: " + clip(s.Error, 60)
	case s.PausedAt != nil && s.PauseNote != "":
		return "paused " + ago(*s.PausedAt) + ": " + clip(s.PauseNote, 40)
	case s.PausedAt != nil:
		return "paused " + ago(*s.PausedAt)
	case s.Ended:
		return "ended"
	case s.Buffered > 0:
		return fmt.Sprintf("active, %d buffered", s.Buffered)
	}
	return "active"
}

func (a *app) schedulesShowCommand() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a schedule: its settings and its last ticks, each decision with its lag and run",
		Long: `Show one schedule: its spec and zone, what each tick starts, its overlap
and catch-up policies, its next tick and its state; then its last --limit
ticks decided, newest first: the tick's nominal time, the decision
(started, skipped for overlap, missed, buffered, triggered, backfilled), how late it was
decided (its lag), by which worker, and its run.`,
		Example: `  tenure schedules show nightly-report
  tenure schedules show nightly-report --limit 100 --json`,
		Args: rangeArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := atLeastOne("limit", limit); err != nil {
				return err
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			s, err := op.Schedule(a.ctx, args[0])
			if err != nil {
				return err
			}
			ticks, err := op.ScheduleTicks(a.ctx, args[0], limit)
			if err != nil {
				return err
			}
			if a.json {
				if ticks == nil {
					ticks = []record.ScheduleTick{}
				}
				return a.printJSON(struct {
					Schedule record.Schedule       `json:"schedule"`
					Ticks    []record.ScheduleTick `json:"ticks"`
				}{s, ticks})
			}
			t := newTable(a.stdout, "FIELD", "VALUE")
			t.row("name", s.Name)
			t.row("spec", s.Spec+" in "+s.Zone)
			t.row("starts", fmt.Sprintf("%s on queue %s, priority %d, input %s", s.Workflow, s.Queue, s.Priority, clip(string(s.Input), 80)))
			if s.Jitter > 0 {
				t.row("jitter", "up to "+s.Jitter.String())
			}
			if s.StartsAt != nil || s.EndsAt != nil {
				t.row("between", stampPtr(s.StartsAt)+" and "+stampPtr(s.EndsAt))
			}
			t.row("overlap", overlapText(s))
			t.row("catch-up", catchupText(s))
			t.row("next", nextText(s))
			t.row("state", stateText(s))
			if s.LastRunID != nil {
				t.row("last run", fmt.Sprintf("%s (%s)", s.LastRunID, dash(string(s.LastRunStatus))))
			}
			by := "by hand"
			if s.DeclaredBy != "" {
				by = "declared by " + s.DeclaredBy
			}
			if s.OverriddenAt != nil {
				by += ", changed by a person " + ago(*s.OverriddenAt) + " (declarations no longer change it)"
			}
			t.row("made", by)
			if err := t.flush(); err != nil {
				return err
			}
			if len(ticks) == 0 {
				_, err := fmt.Fprintln(a.stdout, "\nno tick decided yet")
				return err
			}
			fmt.Fprintln(a.stdout)
			tt := newTable(a.stdout, "TICK", "DECISION", "LAG", "BY", "RUN")
			for _, k := range ticks {
				run := "-"
				if k.RunID != nil {
					run = k.RunID.String()
				}
				if k.CancelledRunID != nil {
					run += " (cancelled " + k.CancelledRunID.String() + ")"
				}
				tt.row(stamp(k.NominalAt), k.Decision, roughly(k.DecidedAt.Sub(k.NominalAt)), k.DecidedBy, run)
			}
			return tt.flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "show at most this many ticks, newest first")
	return cmd
}

// overlapText says what a tick due while the last run is open does.
func overlapText(s record.Schedule) string {
	switch s.Overlap {
	case "buffer_one":
		return "buffer_one: waits for the open run, one at most"
	case "buffer_all":
		return fmt.Sprintf("buffer_all: waits for the open run, %d at most", s.BufferMax)
	case "allow":
		return "allow: starts beside the open run"
	case "cancel_other":
		return "cancel_other: cancels the open run and starts"
	}
	return "skip: skipped while the last run is open"
}

// catchupText says what happens to the ticks no worker decided in time.
func catchupText(s record.Schedule) string {
	switch s.Catchup {
	case "none":
		return "none: the missed ticks start no run"
	case "all":
		return fmt.Sprintf("all: every missed tick of the last %s starts, %d at most", s.CatchupWindow, s.CatchupMax)
	}
	return "latest: the latest missed tick starts, the others are missed"
}

// schedulesChangeCommand is tenure schedules pause, resume or trigger.
func (a *app) schedulesChangeCommand(verb string) *cobra.Command {
	var note string
	cmd := &cobra.Command{
		Use:  verb + " NAME [--note TEXT]",
		Args: rangeArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			op, err := a.operator()
			if err != nil {
				return err
			}
			name := args[0]
			var text string
			result := map[string]string{"schedule": name, "action": verb}
			switch verb {
			case "pause":
				err = op.PauseSchedule(a.ctx, name, note)
				text = fmt.Sprintf("paused %s: no tick is decided until tenure schedules resume %[1]s", name)
			case "resume":
				err = op.ResumeSchedule(a.ctx, name, note)
				text = fmt.Sprintf("resumed %s: the ticks due while it was paused are decided as its catch-up policy says", name)
			default:
				var run fmt.Stringer
				run, err = op.TriggerSchedule(a.ctx, name, note)
				if err == nil {
					result["run_id"] = run.String()
					text = fmt.Sprintf("triggered %s: run %s", name, run)
				}
			}
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(result)
			}
			_, err = fmt.Fprintln(a.stdout, text)
			return err
		},
	}
	switch verb {
	case "pause":
		cmd.Short = "Pause a schedule: no tick is decided until it is resumed (audited)"
		cmd.Long = `Pause a schedule: no worker decides its ticks until tenure schedules resume.
The ticks due meanwhile are decided at its resumption, as its catch-up policy
says (latest, by default: one run). The pause is written to the audit log
with --note (tenure audit, action schedule), and from then on a worker's
declaration of the schedule in code no longer changes it: a person did.`
		cmd.Example = `  tenure schedules pause nightly-report --note "INC-12: the warehouse is being migrated"`
	case "resume":
		cmd.Short = "Resume a paused schedule (audited)"
		cmd.Long = `Resume a schedule that tenure schedules pause (or SQL) paused: the ticks
due while it was paused are decided at the next pass, as its catch-up policy
says. Written to the audit log with --note.`
		cmd.Example = `  tenure schedules resume nightly-report --note "INC-12: done"`
	default:
		cmd.Short = "Start a schedule's run now, outside its spec (audited)"
		cmd.Long = `Start a run of the schedule's workflow now, with its input, whatever its
spec, its overlap policy or its pause: a tick decided "triggered" at the
database's time. Written to the audit log with --note; prints the run's ID.`
		cmd.Example = `  tenure schedules trigger nightly-report --note "rerun after the fix"`
	}
	cmd.Flags().StringVar(&note, "note", "", "why, for the audit log")
	return cmd
}
