package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
)

// tenure retention: the retention by partition of migration 23
// (docs/sql.md, "Retention by partition"): the ages configured and the
// ledger of drops (show), a change of the ages (set, audited), and a pass
// now (run), as every worker does every ten minutes.

func (a *app) retentionCommand() *cobra.Command {
	return group("retention", "Retention by partition: show the ages and the drops, set the ages (audited), run a pass now",
		a.retentionShowCommand(), a.retentionSetCommand(), a.retentionRunCommand())
}

// keepAge is the value of an age flag of tenure retention set that unsets
// the age: that kind of run is kept for good.
const keepAge = "keep"

func (a *app) retentionShowCommand() *cobra.Command {
	var drops int
	cmd := &cobra.Command{
		Use:   "show [--drops N]",
		Short: "Show the retention configured and the last drops of its ledger",
		Long: `Show the retention configured: after how long completed, cancelled and
failed runs go (each an age, or kept: kept for good; a run with failure
history goes by the failed age alone, its failure rows with it), whether the
failure histories that go are copied to history_archive first, and who set
it, when and why. Then the last --drops rows of retention's ledger
(history_drops), newest first: the partitions dropped (named by their first
day, YYYYMMDD; 0 for the tables as they were before schema 22), the state
(detached until the drop is done), the runs kept (their histories moved to
the day's new partitions), archived, and deleted with their failure rows,
who did it (a worker's label, or the database role of tenure retention run)
and when it started and finished.

With --json: one object, {"retention": {...}, "drops": [...]}; an age is
in nanoseconds, null when kept.`,
		Example: `  tenure retention show
  tenure retention show --drops 100 --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := atLeastOne("drops", drops); err != nil {
				return err
			}
			_, r, ds, err := a.retentionState(drops)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(struct {
					Retention retentionJSON `json:"retention"`
					Drops     []dropJSON    `json:"drops"`
				}{retentionOut(r), dropsOut(ds)})
			}
			if err := a.printRetention(r); err != nil {
				return err
			}
			if len(ds) == 0 {
				_, err := fmt.Fprintln(a.stdout, "\nno drop yet")
				return err
			}
			fmt.Fprintln(a.stdout, "\ndrops, newest first")
			return a.printDrops(ds)
		},
	}
	cmd.Flags().IntVar(&drops, "drops", 20, "show at most this many drops of the ledger, newest first (at least 1)")
	return cmd
}

func (a *app) retentionSetCommand() *cobra.Command {
	var ages [3]string
	var archive bool
	var note string
	cmd := &cobra.Command{
		Use:   "set [--completed AGE] [--cancelled AGE] [--failed AGE] [--archive=BOOL] [--note TEXT]",
		Short: "Set after how long finished runs go, by kind (audited); keep keeps them for good",
		Long: `Set the retention, through the SQL function set_history_retention: after how
long completed (--completed), cancelled (--cancelled) and failed runs
(--failed: runs with failure history, failure rows included) go, and
whether the failure histories that go are copied to history_archive first
(--archive, the default; --archive=false drops them uncopied). Only the
settings given change; give at least one. An age is days (30d) or a Go
duration (36h, 90m), at least an hour; keep unsets it: that kind of run is
kept for good, as a new schema keeps every kind.

The change is written to the audit log with --note (tenure audit, action
retention). From then on every worker drops, within ten minutes, each day's
partitions of steps and attempts whose runs were all created longer ago
than the shortest age and of which some run may go, with those runs;
tenure retention run does it now. The partitions made from then on span a
sixth of the shortest age (at least a day). It prints the retention now
configured.`,
		Example: `  tenure retention set --completed 30d --cancelled 7d --note "policy RP-3"
  tenure retention set --failed 180d --archive --note "RP-3: failures after 180 days, archived"
  tenure retention set --failed keep --note "keep failures for good again"`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			set, err := retentionChange(cmd, ages, archive)
			if err != nil {
				return err
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			r, err := op.Retention(a.ctx)
			if err != nil {
				return err
			}
			set(&r)
			r.Note = note
			if err := op.SetRetention(a.ctx, r); err != nil {
				return err
			}
			if r, err = op.Retention(a.ctx); err != nil {
				return err
			}
			if a.json {
				return a.printJSON(retentionOut(r))
			}
			fmt.Fprintln(a.stdout, "retention set (audited)")
			return a.printRetention(r)
		},
	}
	f := cmd.Flags()
	f.StringVar(&ages[0], "completed", "", "completed runs go this long after they finished: an `AGE` (30d, 36h), or keep")
	f.StringVar(&ages[1], "cancelled", "", "cancelled runs go this long after they finished: an `AGE`, or keep")
	f.StringVar(&ages[2], "failed", "", "runs with failure history go this long after they finished, failure rows included: an `AGE`, or keep")
	f.BoolVar(&archive, "archive", true, "copy the failure histories that go to history_archive first")
	f.StringVar(&note, "note", "", "why, for the audit log")
	return cmd
}

// retentionChange reads the flags of tenure retention set that cmd was
// given into a change of a retention; it is a usage error when none was,
// or when an age does not parse.
func retentionChange(cmd *cobra.Command, ages [3]string, archive bool) (func(*record.HistoryRetention), error) {
	f := cmd.Flags()
	var changes []func(*record.HistoryRetention)
	for i, flag := range []string{"completed", "cancelled", "failed"} {
		if !f.Changed(flag) {
			continue
		}
		d, err := retentionAge(flag, ages[i])
		if err != nil {
			return nil, err
		}
		changes = append(changes, func(r *record.HistoryRetention) {
			switch flag {
			case "completed":
				r.Completed = d
			case "cancelled":
				r.Cancelled = d
			default:
				r.Failed = d
			}
		})
	}
	if f.Changed("archive") {
		changes = append(changes, func(r *record.HistoryRetention) { r.Archive = archive })
	}
	if len(changes) == 0 {
		return nil, usagef("give what to change: --completed, --cancelled, --failed or --archive (see %s --help)", cmd.CommandPath())
	}
	return func(r *record.HistoryRetention) {
		for _, c := range changes {
			c(r)
		}
	}, nil
}

// retentionAge reads an age flag of tenure retention set: an age of at
// least an hour, or keep (0: that kind of run is kept for good).
func retentionAge(flag, s string) (time.Duration, error) {
	if s == keepAge {
		return 0, nil
	}
	d, err := parseAge(s)
	if err != nil {
		return 0, usagef("--%s: %v, or keep to keep these runs for good", flag, err)
	}
	if d < time.Hour {
		return 0, usagef("--%s %s: an age must be at least an hour; give keep to keep these runs for good", flag, s)
	}
	return d, nil
}

func (a *app) retentionRunCommand() *cobra.Command {
	var note string
	cmd := &cobra.Command{
		Use:   "run [--note TEXT]",
		Short: "Carry the retention out now, as the workers do every ten minutes",
		Long: `Carry out the retention configured now, through the procedure
retain_history, as every worker does every ten minutes: first the drops a
killed pass left, then, oldest first, each day's partitions of steps and
attempts of which some run may go. It prints the drops it did, as tenure
retention show does (the ledger's BY is the database role tenure connects
as; the audit log has a row per drop, with --note), or says that none was
due, or that another pass (a worker's) is running, which then does the
work.

A pass takes as long as the days to drop take (about 13 s for a day of a
million attempts; docs/operations.md), each step a transaction of its own:
a pass interrupted is finished by the next. A day whose lock on steps and
attempts is not free within 100 ms is left to the next pass, and said so.
The role needs EXECUTE on retain_history, which migration 23 grants to the
roles of workers.

With --json: one object, {"drops": [...], "another_pass_running": false,
"notices": [...]}, the notices being what the pass said besides (a
partition left to the next pass).`,
		Example: `  tenure retention run --note "after the policy change"
  tenure retention run --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			op, r, before, err := a.retentionState(ledgerScan)
			if err != nil {
				return err
			}
			a.notices()
			if err := op.RetainHistory(a.ctx, a.pool.Config().ConnConfig.User, note); err != nil {
				return err
			}
			busy, notices := retentionNotices(a.notices())
			after, err := op.HistoryDrops(a.ctx, ledgerScan)
			if err != nil {
				return err
			}
			return a.printPass(r, passDrops(before, after), busy, notices)
		},
	}
	cmd.Flags().StringVar(&note, "note", "", "why, for the ledger and the audit log")
	return cmd
}

// retentionState reads the retention configured and the last drops rows
// of its ledger, through the operator it returns.
func (a *app) retentionState(drops int) (*operator.Operator, record.HistoryRetention, []record.HistoryDrop, error) {
	op, err := a.operator()
	if err != nil {
		return nil, record.HistoryRetention{}, nil, err
	}
	r, err := op.Retention(a.ctx)
	if err != nil {
		return nil, r, nil, err
	}
	ds, err := op.HistoryDrops(a.ctx, drops)
	return op, r, ds, err
}

// ledgerScan is how many rows of the ledger tenure retention run compares
// before and after its pass: more than a pass drops.
const ledgerScan = 10000

// passDrops are the drops of after that a pass did, the ledger before it
// being before: the rows it added, and those it finished (detached before).
func passDrops(before, after []record.HistoryDrop) []record.HistoryDrop {
	was := make(map[int64]string, len(before))
	for _, d := range before {
		was[d.ID] = d.State
	}
	var did []record.HistoryDrop
	for _, d := range after {
		if state, ok := was[d.ID]; !ok || state != d.State {
			did = append(did, d)
		}
	}
	return did
}

// retentionNotices reads retain_history's NOTICEs: whether another pass was
// running, and the others (a partition left to the next pass, its lock not
// free), without their prefix.
func retentionNotices(notices []string) (busy bool, others []string) {
	for _, n := range notices {
		msg, ok := strings.CutPrefix(n, "retain_history: ")
		switch {
		case !ok:
		case strings.HasPrefix(msg, "another pass is running"):
			busy = true
		default:
			others = append(others, msg)
		}
	}
	return busy, others
}

// printPass prints what a pass of tenure retention run did.
func (a *app) printPass(r record.HistoryRetention, did []record.HistoryDrop, busy bool, notices []string) error {
	if a.json {
		if notices == nil {
			notices = []string{}
		}
		return a.printJSON(struct {
			Drops       []dropJSON `json:"drops"`
			AnotherPass bool       `json:"another_pass_running"`
			Notices     []string   `json:"notices"`
		}{dropsOut(did), busy, notices})
	}
	switch {
	case busy:
		fmt.Fprintln(a.stdout, "another pass is running (a worker's): it does the work; tenure retention show lists its drops")
	case len(did) > 0:
		fmt.Fprintf(a.stdout, "carried out %s (a partition dropped, or its expired runs deleted in place)\n", plural(int64(len(did)), "drop"))
		if err := a.printDrops(did); err != nil {
			return err
		}
	case r.Completed == 0 && r.Cancelled == 0 && r.Failed == 0:
		fmt.Fprintln(a.stdout, "no retention is configured: nothing is dropped (tenure retention set sets the ages)")
	default:
		fmt.Fprintln(a.stdout, "nothing was due: no day's partitions have runs that may go yet")
	}
	for _, n := range notices {
		fmt.Fprintln(a.stdout, n)
	}
	return nil
}

// ageText is a retention age as a person reads it: in days when it is
// whole days, "kept" when unset.
func ageText(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d == 0:
		return "kept"
	case d%day == 0:
		return fmt.Sprintf("%dd", d/day)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// printRetention prints the retention configured.
func (a *app) printRetention(r record.HistoryRetention) error {
	t := newTable(a.stdout, "FIELD", "VALUE")
	t.row("completed", ageText(r.Completed))
	t.row("cancelled", ageText(r.Cancelled))
	t.row("failed", ageText(r.Failed))
	archive := "no: the failure histories that go are not copied"
	if r.Archive {
		archive = "yes: the failure histories that go are copied to history_archive first"
	}
	t.row("archive", archive)
	t.row("changed", fmt.Sprintf("%s (%s) by %s", stamp(r.ChangedAt), ago(r.ChangedAt), r.ChangedBy))
	if r.Note != "" {
		t.row("note", r.Note)
	}
	state := "every kind of run is kept: nothing is dropped"
	if r.Completed != 0 || r.Cancelled != 0 || r.Failed != 0 {
		state = "every 10 minutes the workers drop each day's partitions of steps and attempts whose runs may go"
	}
	t.row("in force", state)
	return t.flush()
}

// printDrops prints rows of retention's ledger.
func (a *app) printDrops(ds []record.HistoryDrop) error {
	t := newTable(a.stdout, "ID", "PARTITION", "STATE", "KEPT", "ARCHIVED", "RUNS DELETED", "FAILURES DELETED", "BY", "STARTED", "FINISHED", "NOTE")
	for _, d := range ds {
		t.row(d.ID, d.Partition, d.State, d.Kept, d.Archived, d.RunsDeleted, d.FailuresDeleted, d.By, stamp(d.StartedAt),
			stampPtr(d.FinishedAt), dash(clip(d.Note, 60)))
	}
	return t.flush()
}

// retentionJSON is record.HistoryRetention as --json prints it: an age in
// nanoseconds, null when that kind of run is kept.
type retentionJSON struct {
	Completed *time.Duration `json:"completed_after_ns"`
	Cancelled *time.Duration `json:"cancelled_after_ns"`
	Failed    *time.Duration `json:"failed_after_ns"`
	Archive   bool           `json:"archive"`
	ChangedAt time.Time      `json:"changed_at"`
	ChangedBy string         `json:"changed_by"`
	Note      string         `json:"note"`
}

func retentionOut(r record.HistoryRetention) retentionJSON {
	age := func(d time.Duration) *time.Duration {
		if d == 0 {
			return nil
		}
		return &d
	}
	return retentionJSON{age(r.Completed), age(r.Cancelled), age(r.Failed), r.Archive, r.ChangedAt, r.ChangedBy, r.Note}
}

// dropJSON is record.HistoryDrop as --json prints it.
type dropJSON struct {
	ID              int64      `json:"id"`
	Partition       string     `json:"partition"`
	State           string     `json:"state"`
	Kept            int64      `json:"kept"`
	Archived        int64      `json:"archived"`
	RunsDeleted     int64      `json:"runs_deleted"`
	FailuresDeleted int64      `json:"failures_deleted"`
	By              string     `json:"by"`
	Note            string     `json:"note"`
	StartedAt       time.Time  `json:"started_at"`
	FinishedAt      *time.Time `json:"finished_at"`
}

func dropsOut(ds []record.HistoryDrop) []dropJSON {
	out := make([]dropJSON, 0, len(ds))
	for _, d := range ds {
		out = append(out, dropJSON{d.ID, d.Partition, d.State, d.Kept, d.Archived, d.RunsDeleted, d.FailuresDeleted, d.By, d.Note,
			d.StartedAt, d.FinishedAt})
	}
	return out
}
