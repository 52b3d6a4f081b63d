package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
)

// tenure limits and tenure breaker: the downstreams of flow control
// (package flow), read from view downstream_status, and the changes a
// person makes at run time through the SQL functions set_downstream,
// reset_downstream, open_breaker and close_breaker, which audit them.

func (a *app) limitsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "Flow control: each downstream's limits, what is in use and waiting, its breaker",
		Long: `List the downstreams of flow control (package flow): the limits in force
(concurrency, rate, retry budget, breaker), who set them (the code that
declares them, or a person by hand), the concurrency slots in use, the steps
waiting on the limits, and the breaker's state. A downstream is listed once a
worker whose code declares it has called it.

  tenure limits show NAME    everything about one downstream, with the
                             breaker's history
  tenure limits set NAME     change limits at run time (audited)
  tenure limits reset NAME   give them back to what the code declares
  tenure breaker open NAME   hold every call of it (audited)
  tenure breaker close NAME  let calls through again`,
		Example: `  tenure limits
  tenure limits --json
  tenure limits show payments`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			op, err := a.operator()
			if err != nil {
				return err
			}
			ds, err := op.Downstreams(a.ctx)
			if err != nil {
				return err
			}
			if a.json {
				if ds == nil {
					ds = []record.Downstream{}
				}
				return a.printJSON(ds)
			}
			if len(ds) == 0 {
				return a.noneMatch("downstreams")
			}
			t := newTable(a.stdout, "DOWNSTREAM", "LIMITS", "SET BY", "IN USE", "WAITING", "BREAKER")
			for _, d := range ds {
				t.row(d.Name, d.Limits, setBy(d), d.InUse, d.Waiting, breakerText(d))
			}
			return t.flush()
		},
	}
	cmd.AddCommand(a.limitsShowCommand(), a.limitsSetCommand(), a.limitsResetCommand())
	return cmd
}

// setBy says who set a downstream's limits: its code, or a person.
func setBy(d record.Downstream) string {
	if d.OverriddenAt == nil {
		return "code"
	}
	return d.OverriddenBy + ", " + ago(*d.OverriddenAt)
}

// breakerText is a breaker's state as a person reads it.
func breakerText(d record.Downstream) string {
	switch {
	case d.Breaker == flow.BreakerOpen && d.BreakerManual:
		return "open by hand"
	case d.Breaker == flow.BreakerOpen && d.OpenUntil != nil:
		return "open, probes " + when(*d.OpenUntil)
	case d.Breaker == flow.BreakerHalfOpen:
		return "half open (a probe is out)"
	}
	return d.Breaker
}

// noDownstream explains ErrNoDownstream, which is exit status 3.
func noDownstream(err error) error {
	if errors.Is(err, operator.ErrNoDownstream) {
		return fmt.Errorf("%w (tenure limits lists the downstreams; one is listed once a worker has called it)", err)
	}
	return err
}

func (a *app) limitsShowCommand() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a downstream: its limits, as declared and as in force, its load, breaker and counters",
		Long: `Show one downstream: the limits in force and who set them, the limits its
code declares (which no longer apply once a person changed them, until
tenure limits reset), the concurrency slots in use and the keys called, the
steps waiting, the breaker's state with its current window, the retry
budget's balance, the attempts admitted and the denials by cause, and the
calls that ended and those in an error. The counters count from the
downstream's first call.

Then the breaker's history, newest first: each change of state, why (the
errors counted, a probe's outcome, a person's note) and by whom.`,
		Example: `  tenure limits show payments
  tenure limits show payments --limit 100 --json`,
		Args: rangeArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := atLeastOne("limit", limit); err != nil {
				return err
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			d, err := op.Downstream(a.ctx, args[0])
			if err != nil {
				return noDownstream(err)
			}
			hist, err := op.BreakerHistory(a.ctx, d.Name, limit)
			if err != nil {
				return err
			}
			if hist == nil {
				hist = []record.BreakerChange{}
			}
			if a.json {
				return a.printJSON(struct {
					Downstream     record.Downstream      `json:"downstream"`
					BreakerHistory []record.BreakerChange `json:"breaker_history"`
				}{d, hist})
			}
			return a.showDownstream(d, hist)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "show at most this many changes of the breaker (at least 1)")
	return cmd
}

// showDownstream prints one downstream and its breaker's history.
func (a *app) showDownstream(d record.Downstream, hist []record.BreakerChange) error {
	t := newTable(a.stdout, "downstream", d.Name)
	t.row("limits", d.Limits)
	if d.OverriddenAt != nil {
		t.row("", fmt.Sprintf("set by hand by %s %s (%s): declarations no longer apply until tenure limits reset",
			d.OverriddenBy, stamp(*d.OverriddenAt), ago(*d.OverriddenAt)))
	} else {
		t.row("", "as declared")
	}
	if d.Declared != nil {
		when := ""
		if d.DeclaredAt != nil {
			when = " " + stamp(*d.DeclaredAt) + " (" + ago(*d.DeclaredAt) + ")"
		}
		t.row("declared", fmt.Sprintf("%s, by %s%s", d.Declared, d.DeclaredBy, when))
	}
	t.row("in use", fmt.Sprintf("%s, %s called", plural(d.InUse, "slot"), plural(d.Keys, "key")))
	t.row("waiting", plural(d.Waiting, "step"))
	breaker := breakerText(d)
	if d.BreakerSince != nil {
		breaker += " since " + stamp(*d.BreakerSince) + " (" + ago(*d.BreakerSince) + ")"
	}
	t.row("breaker", breaker)
	t.row("window", fmt.Sprintf("%s in %s", plural(d.WindowErrors, "error"), plural(d.WindowCalls, "call")))
	if d.RetryTokens != nil {
		t.row("retry budget", fmt.Sprintf("%.1f retries allowed now", *d.RetryTokens))
	}
	retries := fmt.Sprintf("%d retries", d.Retries) // plural adds an s
	if d.Retries == 1 {
		retries = "1 retry"
	}
	t.row("admitted", fmt.Sprintf("%d (%s)", d.Admitted, retries))
	t.row("denied", fmt.Sprintf("%d (concurrency %d, rate %d, breaker %d, retry budget %d)",
		d.Denied(), d.DeniedConcurrency, d.DeniedRate, d.DeniedBreaker, d.DeniedRetryBudget))
	t.row("calls", fmt.Sprintf("%d ended, %s", d.Calls, plural(d.Errors, "error")))
	if err := t.flush(); err != nil {
		return err
	}
	return breakerHistory(a.stdout, hist)
}

// breakerHistory prints the changes of a breaker, or says there were none.
func breakerHistory(w io.Writer, hist []record.BreakerChange) error {
	if len(hist) == 0 {
		_, err := fmt.Fprintln(w, "\nthe breaker never changed")
		return err
	}
	fmt.Fprintln(w, "\nbreaker history, newest first")
	t := newTable(w, "  AT", "FROM", "TO", "BY", "ACTOR", "WHY")
	for _, c := range hist {
		t.row("  "+stamp(c.At), dash(c.From), c.To, c.By, c.Actor, clip(c.Why, 120))
	}
	return t.flush()
}

// limitFlags are the flags of tenure limits set, as given.
type limitFlags struct {
	concurrency, rate, burst      string
	retryRatio, retryPerSecond    string
	breakerRatio, breakerMinCalls string
	breakerWindow, breakerOpenFor string
}

func (f *limitFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.concurrency, "concurrency", "", "calls at once, per key: `N` (at least 1), or none to remove the limit")
	fs.StringVar(&f.rate, "rate", "", "starts per interval, per key: `N/INTERVAL` (50/1s, 600/1m, 10/s), N alone (the interval kept; 1s for a new rate), or none to remove the rate limit")
	fs.StringVar(&f.burst, "burst", "", "`N` starts at once within the rate (at least 1; 1 for a new rate)")
	fs.StringVar(&f.retryRatio, "retry-ratio", "", "retries allowed per first attempt: a `RATIO` (0.2 or 20%), or none to remove the retry budget")
	fs.StringVar(&f.retryPerSecond, "retry-per-second", "", "`N` retries allowed a second besides the ratio, or none to remove the retry budget")
	fs.StringVar(&f.breakerRatio, "breaker-ratio", "", "the `RATIO` of calls in an error that opens the breaker (0.5 or 50%), or none to remove the breaker")
	fs.StringVar(&f.breakerMinCalls, "breaker-min-calls", "", "`N` calls within the window before the breaker may open (10 for a new breaker)")
	fs.StringVar(&f.breakerWindow, "breaker-window", "", "the `DURATION` of the window calls and errors are counted in (10s for a new breaker)")
	fs.StringVar(&f.breakerOpenFor, "breaker-open-for", "", "how long (a `DURATION`) the breaker stays open before a probe (5s for a new breaker)")
}

// change reads the flags cmd was given into a LimitsChange; a value that
// does not parse is a usage error naming its flag.
func (f *limitFlags) change(cmd *cobra.Command) (operator.LimitsChange, error) {
	var c operator.LimitsChange
	var err error
	given := func(name string) bool { return err == nil && cmd.Flags().Changed(name) }
	var removeRetries bool
	if given("concurrency") {
		c.Concurrency, c.RemoveConcurrency, err = countFlag("concurrency", f.concurrency, true)
	}
	if given("rate") {
		c.Rate, c.RateInterval, c.RemoveRate, err = rateFlag(f.rate)
	}
	if given("burst") {
		c.Burst, _, err = countFlag("burst", f.burst, false)
	}
	if given("retry-ratio") {
		c.RetryRatio, c.RemoveRetryBudget, err = numberFlag("retry-ratio", f.retryRatio, true)
	}
	if given("retry-per-second") {
		c.RetryPerSecond, removeRetries, err = numberFlag("retry-per-second", f.retryPerSecond, false)
		c.RemoveRetryBudget = c.RemoveRetryBudget || removeRetries
	}
	if given("breaker-ratio") {
		c.BreakerErrorRatio, c.RemoveBreaker, err = numberFlag("breaker-ratio", f.breakerRatio, true)
	}
	if given("breaker-min-calls") {
		c.BreakerMinCalls, _, err = countFlag("breaker-min-calls", f.breakerMinCalls, false)
	}
	if given("breaker-window") {
		c.BreakerWindow, err = durationFlag("breaker-window", f.breakerWindow)
	}
	if given("breaker-open-for") {
		c.BreakerOpenFor, err = durationFlag("breaker-open-for", f.breakerOpenFor)
	}
	return c, err
}

// countFlag reads a whole number, or none (remove) where removable.
func countFlag(flag, s string, removable bool) (*int, bool, error) {
	if s == "none" && removable {
		return nil, true, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		if removable {
			return nil, false, usagef("--%s %q: want a whole number, or none to remove the limit", flag, s)
		}
		return nil, false, usagef("--%s %q: want a whole number", flag, s)
	}
	return &n, false, nil
}

// numberFlag reads a number, or none (remove); a ratio may be written as a
// percentage (20% is 0.2).
func numberFlag(flag, s string, ratio bool) (*float64, bool, error) {
	if s == "none" {
		return nil, true, nil
	}
	text, percent := strings.CutSuffix(s, "%")
	x, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) || (percent && !ratio) {
		want := "a number such as 0.2 or 20%"
		if !ratio {
			want = "a number such as 10"
		}
		return nil, false, usagef("--%s %q: want %s, or none to remove the limit", flag, s, want)
	}
	if percent {
		x /= 100
	}
	return &x, false, nil
}

// rateFlag reads --rate: N, N/INTERVAL (an interval without a number is one
// of it: 10/s is 10/1s), or none.
func rateFlag(s string) (*int, *time.Duration, bool, error) {
	if s == "none" {
		return nil, nil, true, nil
	}
	bad := usagef("--rate %q: want N/INTERVAL (50/1s, 600/1m, 10/s), N alone, or none to remove the rate limit", s)
	ns, per, hasPer := strings.Cut(s, "/")
	n, err := strconv.Atoi(ns)
	if err != nil {
		return nil, nil, false, bad
	}
	if !hasPer {
		return &n, nil, false, nil
	}
	if per != "" && strings.Trim(per[:1], "0123456789.") != "" {
		per = "1" + per
	}
	d, err := time.ParseDuration(per)
	if err != nil {
		return nil, nil, false, bad
	}
	return &n, &d, false, nil
}

// durationFlag reads a duration as Go writes it (10s, 1m30s).
func durationFlag(flag, s string) (*time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return nil, usagef("--%s %q: want a duration such as 10s or 1m", flag, s)
	}
	return &d, nil
}

func (a *app) limitsSetCommand() *cobra.Command {
	var lf limitFlags
	var note string
	cmd := &cobra.Command{
		Use:   "set NAME --LIMIT VALUE ... [--note TEXT]",
		Short: "Change a downstream's limits at run time (audited); none removes a limit",
		Long: `Change the limits of a downstream at run time, through the SQL function
set_downstream: every worker applies them at its next admission, and steps
waiting on a concurrency limit that rises start at once. Only the limits
given change. A limit whose flag takes none is removed by it: --concurrency
none, --rate none (and its burst), --retry-ratio none or --retry-per-second
none (the retry budget), --breaker-ratio none (the breaker; it can still be
opened by hand with tenure breaker open).

A new rate takes an interval of 1s and a burst of 1 unless given; a new
retry budget takes 0 for the setting not given; a new breaker takes 10
calls, a window of 10s and 5s open unless given. Limits that make no sense
once changed are refused, and nothing is changed.

The change is written to the audit log with --note (tenure audit, action
limits, with the limits before and after), and from then on the downstream
is set by hand: the limits its code declares are recorded but no longer
applied, until tenure limits reset. It prints the limits now in force.`,
		Example: `  tenure limits set payments --concurrency 5 --note "INC-7: the provider throttles us"
  tenure limits set payments --rate 50/1s --burst 10
  tenure limits set payments --rate none --retry-ratio 10% --retry-per-second 2
  tenure limits set mail-relay --breaker-ratio 50% --breaker-min-calls 20 --breaker-open-for 30s`,
		Args: rangeArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			change, err := lf.change(cmd)
			if err != nil {
				return err
			}
			if change == (operator.LimitsChange{}) {
				return usagef("give the limits to change: --concurrency, --rate, --burst, --retry-ratio, --retry-per-second, --breaker-ratio, --breaker-min-calls, --breaker-window or --breaker-open-for (see %s --help)", cmd.CommandPath())
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			limits, err := op.SetLimits(a.ctx, args[0], change, note)
			if errors.Is(err, flow.ErrInvalid) {
				return usageError{err}
			}
			if err != nil {
				return noDownstream(err)
			}
			return a.printLimits(args[0], limits, "set by hand: the limits its code declares no longer apply until tenure limits reset")
		},
	}
	lf.register(cmd)
	cmd.Flags().StringVar(&note, "note", "", "why, for the audit log")
	return cmd
}

func (a *app) limitsResetCommand() *cobra.Command {
	var note string
	cmd := &cobra.Command{
		Use:   "reset NAME [--note TEXT]",
		Short: "Give a downstream back the limits its code declares (audited)",
		Long: `Give a downstream back the limits its code declared last, through the SQL
function reset_downstream, and print them: from then on, what the code
declares applies again (a worker's declaration at its start). The reset is
written to the audit log with --note (tenure audit, action limits).`,
		Example: `  tenure limits reset payments --note "INC-7 closed"`,
		Args:    rangeArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			op, err := a.operator()
			if err != nil {
				return err
			}
			limits, err := op.ResetLimits(a.ctx, args[0], note)
			if err != nil {
				return noDownstream(err)
			}
			return a.printLimits(args[0], limits, "as its code declares them")
		},
	}
	cmd.Flags().StringVar(&note, "note", "", "why, for the audit log")
	return cmd
}

// printLimits prints the limits now in force of a downstream.
func (a *app) printLimits(name string, limits flow.Limits, how string) error {
	if a.json {
		return a.printJSON(struct {
			Downstream string      `json:"downstream"`
			Limits     flow.Limits `json:"limits"`
		}{name, limits})
	}
	_, err := fmt.Fprintf(a.stdout, "limits of %s: %s\n%s\n", name, limits, how)
	return err
}
