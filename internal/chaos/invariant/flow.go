package invariant

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/store"
)

// The flow-control invariants (migration 16), checked by CheckFlow, and by
// Check when Options.Flow is set.
const (
	// NeverOverLimit: at no instant are more calls of a downstream's
	// activities in flight, per key, than its concurrency limit, and in no
	// window of its rate's interval do more of their attempts start, per
	// key, than its rate plus its burst.
	//
	// A call is in flight from its invocation (the activity's own record,
	// FlowOptions.Invocations) to the first of its return, its attempt's
	// recorded end and the stop of its worker (FlowOptions.Stopped): every
	// one of these instants lies inside the time its attempt held its
	// slot, from the commit that admitted it to the commit that gave it
	// back or the expiry of its lease. The attempt's started_at is not used
	// for concurrency: it is the admitting transaction's start, which can
	// precede the commit of the release that made room for it (by under a
	// millisecond, seen in chaos runs), so that two rows would seem to
	// overlap where the slots never did. For the rate it is exact: the rate
	// is judged at that very instant (GCRA, by now()).
	NeverOverLimit Rule = "never-over-limit"
	// NoCapacityLeaked: nothing is held or waits on a downstream's limits
	// for a run that no longer does: no slot is left to a run that ended
	// under the lease that took it, or counted in use by a run with no
	// attempt of the downstream's running; no open throttle of a finished
	// step or run is counted as waiting; no waiter is left for a run that
	// does not wait; and once every run has ended the database counts
	// nothing in use and nothing waiting.
	NoCapacityLeaked Rule = "no-capacity-leaked"
)

// FlowOptions are what CheckFlow needs beyond the database.
type FlowOptions struct {
	// Calls maps each activity that calls a downstream to the downstream's
	// name. The key of an attempt is its run input's "key" field ("" when
	// absent): the workloads that use CheckFlow key their limits so.
	Calls map[string]string
	// Invocations is the table, in the schema, in which the activities
	// record their calls as they make them: columns run_id, step, attempt,
	// at (the call began) and returned_at (it returned; NULL if it never
	// did), on the database's clock (clock_timestamp()). The chaos
	// workload's is "ledger". An attempt with no row there made no call.
	// "": no such table; the concurrency limits are not checked.
	Invocations string
	// Stopped lists, per worker label, the instants (on the database's
	// clock) at which its process was killed, frozen or found dead: a call
	// of that worker in flight then ended there. Without them, the call of
	// a killed worker counts until its attempt was recorded lost, at its
	// rescue, after its lease expired: later than its slot could be reused.
	Stopped map[string][]time.Time
}

// FlowReport is what CheckFlow found, per downstream, and the violations of
// NeverOverLimit and NoCapacityLeaked.
type FlowReport struct {
	Downstreams []DownstreamFigures
	Violations  []Violation
	Checked     map[Rule]int
}

// DownstreamFigures are one downstream's limits and what its attempts did
// under them.
type DownstreamFigures struct {
	Name        string
	Concurrency int   // 0: no limit
	Rate, Burst int   // 0: no rate
	Per         int64 // the rate's interval, ms
	Attempts    int   // attempts of its activities
	Keys        int   // keys they used
	// Peak is the most attempts in flight at once on one key; PeakAt when.
	Peak   int
	PeakAt time.Time
	// MaxWindow is the most attempts started on one key within one rate
	// interval (0 without a rate).
	MaxWindow int
	// Throttles counts the waits on its limits, by cause.
	Throttles map[string]int
	// LostSlots counts the slot rows still naming a lease that was lost:
	// the database counts them free.
	LostSlots int
	// InUse and Waiting are the database's own counts (downstream_status)
	// when the check ran.
	InUse, Waiting int
}

// CheckFlow checks NeverOverLimit and NoCapacityLeaked on schema. An error
// means the check could not be made.
func CheckFlow(ctx context.Context, pool *pgxpool.Pool, schema string, opts FlowOptions) (*FlowReport, error) {
	s := pgx.Identifier{schema}.Sanitize()
	r := &FlowReport{Checked: map[Rule]int{}}
	figs, err := readDownstreams(ctx, pool, s, opts.Calls)
	if err != nil {
		return nil, err
	}
	calls, err := readCalls(ctx, pool, s, opts)
	if err != nil {
		return nil, err
	}
	for i := range figs {
		r.overLimit(&figs[i], calls[figs[i].Name])
	}
	if err := r.leaks(ctx, pool, s, figs, opts.Calls); err != nil {
		return nil, err
	}
	r.Downstreams = figs
	return r, nil
}

// OK reports whether neither rule was violated.
func (r *FlowReport) OK() bool { return len(r.Violations) == 0 }

func (r *FlowReport) add(rule Rule, run uuid.UUID, step int, format string, args ...any) {
	r.Violations = append(r.Violations, Violation{Rule: rule, RunID: run, Step: step, Detail: fmt.Sprintf(format, args...)})
}

// readDownstreams reads the limits of the downstreams that calls names, as
// their rows hold them when the check runs, with the database's counts.
func readDownstreams(ctx context.Context, pool *pgxpool.Pool, s string, calls map[string]string) ([]DownstreamFigures, error) {
	var names []string
	for _, d := range calls {
		if !slices.Contains(names, d) {
			names = append(names, d)
		}
	}
	sort.Strings(names)
	rows, err := pool.Query(ctx, `
		SELECT name, coalesce(concurrency, 0), coalesce(rate, 0), coalesce(burst, 0), coalesce(rate_interval_ms, 0),
		       in_use, waiting
		FROM `+s+`.downstream_status WHERE name = ANY ($1) ORDER BY name`, names)
	if err != nil {
		return nil, fmt.Errorf("invariant: read downstreams: %w", err)
	}
	var figs []DownstreamFigures
	var d DownstreamFigures
	if _, err := pgx.ForEachRow(rows, []any{&d.Name, &d.Concurrency, &d.Rate, &d.Burst, &d.Per, &d.InUse, &d.Waiting}, func() error {
		c := d
		c.Throttles = map[string]int{}
		figs = append(figs, c)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("invariant: read downstreams: %w", err)
	}
	return figs, nil
}

// call is one attempt of an activity that calls a downstream: started (as
// its row says) at start; its call in flight from invoked (nil: it made
// none) to end (see NeverOverLimit).
type call struct {
	run     uuid.UUID
	step    int
	attempt int
	key     string
	worker  string
	status  store.AttemptStatus
	start   time.Time
	invoked *time.Time
	end     time.Time
}

// readCalls reads the attempts of the activities of opts.Calls, by
// downstream, with their calls' spans (see NeverOverLimit).
func readCalls(ctx context.Context, pool *pgxpool.Pool, s string, opts FlowOptions) (map[string][]call, error) {
	var acts []string
	for a := range opts.Calls {
		acts = append(acts, a)
	}
	invocations := `SELECT NULL::timestamptz AS at, NULL::timestamptz AS returned_at` // none: no concurrency to check
	if opts.Invocations != "" {
		invocations = `SELECT min(x.at) AS at, max(x.returned_at) AS returned_at
			FROM ` + s + `.` + pgx.Identifier{opts.Invocations}.Sanitize() + ` x
			WHERE x.run_id = a.run_id AND x.step = a.step AND x.attempt = a.attempt`
	}
	rows, err := pool.Query(ctx, `
		SELECT a.activity, a.worker, coalesce(r.input->>'key', ''), a.run_id, a.step, a.attempt, a.status,
		       a.started_at, l.at, least(a.ended_at, l.returned_at, clock_timestamp())
		FROM `+s+`.attempts a JOIN `+s+`.runs r ON r.id = a.run_id
		LEFT JOIN LATERAL (`+invocations+`) AS l ON true
		WHERE a.activity = ANY ($1)`, acts)
	if err != nil {
		return nil, fmt.Errorf("invariant: read attempts of limited activities: %w", err)
	}
	out := map[string][]call{}
	var activity string
	var c call
	if _, err := pgx.ForEachRow(rows, []any{&activity, &c.worker, &c.key, &c.run, &c.step, &c.attempt, &c.status,
		&c.start, &c.invoked, &c.end}, func() error {
		if c.invoked != nil {
			for _, at := range opts.Stopped[c.worker] {
				if !at.Before(*c.invoked) && at.Before(c.end) {
					c.end = at
					break
				}
			}
		}
		x := c
		if c.invoked != nil {
			t := *c.invoked
			x.invoked = &t
		}
		d := opts.Calls[activity]
		out[d] = append(out[d], x)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("invariant: read attempts of limited activities: %w", err)
	}
	return out, nil
}

// overLimit checks the calls of downstream d against its limits, key by
// key, and fills d's figures.
func (r *FlowReport) overLimit(d *DownstreamFigures, calls []call) {
	byKey := map[string][]call{}
	for _, c := range calls {
		byKey[c.key] = append(byKey[c.key], c)
	}
	d.Attempts, d.Keys = len(calls), len(byKey)
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r.Checked[NeverOverLimit] += len(byKey[k])
		r.concurrency(d, k, byKey[k])
		r.rate(d, k, byKey[k])
	}
}

// concurrency sweeps the beginnings and ends of one key's calls in time
// order, an end before a beginning at the same instant, and reports each
// instant at which more calls than the limit were in flight (the first few
// of each key).
func (r *FlowReport) concurrency(d *DownstreamFigures, key string, calls []call) {
	type event struct {
		at    time.Time
		delta int
		c     *call
	}
	events := make([]event, 0, 2*len(calls))
	for i := range calls {
		if c := &calls[i]; c.invoked != nil && c.end.After(*c.invoked) {
			events = append(events, event{*c.invoked, 1, c}, event{c.end, -1, c})
		}
	}
	sort.Slice(events, func(i, j int) bool {
		if !events[i].at.Equal(events[j].at) {
			return events[i].at.Before(events[j].at)
		}
		return events[i].delta < events[j].delta
	})
	inFlight := map[*call]bool{}
	reported := 0
	for _, e := range events {
		if e.delta < 0 {
			delete(inFlight, e.c)
			continue
		}
		inFlight[e.c] = true
		n := len(inFlight)
		if n > d.Peak {
			d.Peak, d.PeakAt = n, e.at
		}
		if d.Concurrency > 0 && n > d.Concurrency && reported < 5 {
			reported++
			var others []string
			for c := range inFlight {
				if c != e.c {
					others = append(others, c.String())
				}
			}
			sort.Strings(others)
			r.add(NeverOverLimit, e.c.run, e.c.step, "downstream %s key %q: attempt %d (%s) started with %d attempts in flight, limit %d: %s",
				d.Name, key, e.c.attempt, e.c, n, d.Concurrency, strings.Join(others, "; "))
		}
	}
}

// String describes the call: its attempt, its worker and when it was in
// flight.
func (c *call) String() string {
	invoked := "never invoked"
	if c.invoked != nil {
		invoked = "called " + c.invoked.Format("15:04:05.000000")
	}
	return fmt.Sprintf("run %s step %d attempt %d %s by %s, started %s, %s to %s", c.run, c.step, c.attempt, c.status, c.worker,
		c.start.Format("15:04:05.000000"), invoked, c.end.Format("15:04:05.000000"))
}

// rate counts, for each call of one key, the calls that started within one
// rate interval from its start, and reports the windows holding more than
// the rate plus the burst (the first few of each key).
func (r *FlowReport) rate(d *DownstreamFigures, key string, calls []call) {
	if d.Rate == 0 {
		return
	}
	starts := make([]time.Time, len(calls))
	for i, c := range calls {
		starts[i] = c.start
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	per := time.Duration(d.Per) * time.Millisecond
	reported := 0
	for i, j := 0, 0; i < len(starts); i++ {
		for j < len(starts) && starts[j].Before(starts[i].Add(per)) {
			j++
		}
		n := j - i
		d.MaxWindow = max(d.MaxWindow, n)
		if n > d.Rate+d.Burst && reported < 5 {
			reported++
			r.add(NeverOverLimit, uuid.Nil, 0, "downstream %s key %q: %d attempts started within %s from %s, rate %d per %s with burst %d",
				d.Name, key, n, per, starts[i].Format(time.RFC3339Nano), d.Rate, per, d.Burst)
		}
	}
}

// Write prints the figures of each downstream and the flow rules' lines.
func (r *FlowReport) Write(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, d := range r.Downstreams {
		limits := "no concurrency limit"
		if d.Concurrency > 0 {
			limits = fmt.Sprintf("concurrency %d", d.Concurrency)
		}
		if d.Rate > 0 {
			limits += fmt.Sprintf(", rate %d per %dms burst %d (max %d started in one interval)", d.Rate, d.Per, d.Burst, d.MaxWindow)
		}
		fmt.Fprintf(tw, "downstream %s\t%d attempts on %d keys\t%s; peak in flight %d; throttles %s; in use %d, waiting %d; slots naming a lost lease %d\n",
			d.Name, d.Attempts, d.Keys, limits, d.Peak, counts(d.Throttles), d.InUse, d.Waiting, d.LostSlots)
	}
	_ = tw.Flush()
}
