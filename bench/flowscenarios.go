package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/chaos/invariant"
	"github.com/tenurehq/tenure/sdk"
)

// The flow scenarios measure flow control on worker processes (bench
// worker, this binary re-executed) and judge each figure of issue 22
// against its target, from the database's own records: the attempts'
// times, the throttles, the breaker's rows in audit_log, and (F-conc) the
// activity's own record of its calls. The invariants (never over a limit,
// no capacity leaked) are invariant.CheckFlow, the chaos command's check.

// flowConfig is the flow scenarios' scale.
type flowConfig struct {
	workers           int           // worker processes
	workerConcurrency int           // runs each worker executes at once
	lease             time.Duration // the workers' LeaseTTL
	poll              time.Duration // the workers' PollInterval (0: the runtime's, 1 s)
	concRuns          int           // F-conc: runs timed for throughput
	concLimit         int           // F-conc: the concurrency limit
	activity          time.Duration // F-conc: how long each call takes
	rate, burst, keys int           // F-rate: starts per second and burst, per key; keys
	seconds           time.Duration // F-rate's window, F-breaker's outage
	breakerRPS        int           // F-breaker: runs started per second
	openFor           time.Duration // F-breaker: the breaker's open time (0: flow's 5 s)
}

// flowRun is one flow scenario's schema, its workers and its runs.
type flowRun struct {
	*tenureEnv
	c     config
	fleet fleet
	wf    *sdk.Workflow[flowIn, int]
	runs  int // started so far
}

// startFlow makes a fresh schema and starts (idle) the fleet that serves
// spec, its workers labelled label-1, label-2 …
func startFlow(ctx context.Context, c config, spec flowSpec, label string) (*flowRun, error) {
	e, err := newTenureEnv(ctx, c)
	if err != nil {
		return nil, err
	}
	f := &flowRun{tenureEnv: e, c: c, wf: newFlowWorkflow(flowSpec{}, nil)}
	if spec.Count {
		if err := createFlowTables(ctx, e.pool, e.schema); err != nil {
			e.close()
			return nil, err
		}
	}
	if spec.Scenario == "breaker" {
		if err := createFlowOrder(ctx, e.pool, e.schema); err != nil {
			e.close()
			return nil, err
		}
	}
	js, err := json.Marshal(spec)
	if err != nil {
		e.close()
		return nil, err
	}
	f.fleet, err = spawnFleet(ctx, c, c.flow.workers, func(i int) workerOpts {
		return workerOpts{url: c.url, schema: e.schema, label: fmt.Sprintf("%s-%d", label, i+1),
			concurrency: c.flow.workerConcurrency, lease: c.flow.lease, poll: c.flow.poll, flow: string(js)}
	})
	if err != nil {
		e.close()
		return nil, err
	}
	return f, nil
}

func (f *flowRun) close() {
	f.fleet.kill()
	f.tenureEnv.close()
}

// start starts n runs (one statement), the i-th with in(i).
func (f *flowRun) start(ctx context.Context, n int, in func(i int) flowIn) error {
	params := make([]sdk.StartParams[flowIn], n)
	for i := range params {
		params[i].Input = in(i)
	}
	if _, err := sdk.StartMany(ctx, f.client, f.wf, params); err != nil {
		return err
	}
	f.runs += n
	return nil
}

// awaitRuns waits until every run started is completed or failed.
func (f *flowRun) awaitRuns(ctx context.Context, m *meter, timeout time.Duration) error {
	runs := pgx.Identifier{f.schema, "runs"}.Sanitize()
	// Every 100 ms: the figures are the rows' own times, not this wait's,
	// and each count reads every run of the scenario (at 20 ms, in F-conc,
	// about 2.5 % of the machine the scenario measures).
	return waitFor(ctx, 100*time.Millisecond, timeout, "the runs to end", func() (bool, error) {
		var ended int
		err := m.conn.QueryRow(ctx, `SELECT count(*) FROM `+runs+` WHERE status IN ('completed', 'failed') AND workflow = $1`, flowWorkflow).Scan(&ended)
		return ended >= f.runs, err
	})
}

// sql is stmt with {s} the scenario's schema.
func (f *flowRun) sql(stmt string) string { return sqlIn(stmt, f.schema) }

// checkFlow runs the chaos command's flow invariants on the scenario's
// schema, and turns their verdicts into checks.
func (f *flowRun) checkFlow(ctx context.Context, opts invariant.FlowOptions) (*invariant.FlowReport, []check, error) {
	opts.Calls = map[string]string{flowActivity: flowDownstream}
	rep, err := invariant.CheckFlow(ctx, f.pool, f.schema, opts)
	if err != nil {
		return nil, nil, err
	}
	var over, leaked []string
	for _, v := range rep.Violations {
		if v.Rule == invariant.NeverOverLimit {
			over = append(over, v.String())
		} else {
			leaked = append(leaked, v.String())
		}
	}
	d := invariant.DownstreamFigures{}
	if len(rep.Downstreams) == 1 {
		d = rep.Downstreams[0]
	}
	figure := func(vs []string, ok string) string {
		if len(vs) == 0 {
			return ok
		}
		return fmt.Sprintf("%d violations, the first: %s", len(vs), vs[0])
	}
	limits := fmt.Sprintf("in flight at most %d", d.Peak)
	target := fmt.Sprintf("≤ %d in flight, per key", d.Concurrency)
	if d.Rate > 0 {
		limits = fmt.Sprintf("at most %d started within %d ms on one key", d.MaxWindow, d.Per)
		target = fmt.Sprintf("≤ %d + %d per %d ms, per key", d.Rate, d.Burst, d.Per)
	}
	return rep, []check{
		{Name: "never over the limit (attempts' and calls' own times)", Figure: figure(over, limits), Target: target, Pass: len(over) == 0, Invariant: true},
		{Name: "no capacity leaked (slots, throttles, waiters)", Figure: figure(leaked, fmt.Sprintf("0; in use %d, waiting %d", d.InUse, d.Waiting)),
			Target: "0 violations", Pass: len(leaked) == 0, Invariant: true},
	}, nil
}

// flowConc is F-conc: a concurrency limit over the worker processes, timed
// for throughput on concRuns runs of a call of c.flow.activity, then a
// worker holding 5 slots or more (fewer in the test's shortened run: see
// killHolding) is killed with SIGKILL while more runs wait, and its slots
// must be in use again within LeaseTTL + 1 s.
func flowConc(ctx context.Context, c config, m *meter) (res result, err error) {
	fc := c.flow
	res = result{Workload: "F-conc", System: "tenure", Runs: fc.concRuns, Steps: 1, Workers: fc.workers}
	f, err := startFlow(ctx, c, flowSpec{Scenario: "conc", Concurrency: fc.concLimit, Count: true}, "f-conc")
	if err != nil {
		return res, err
	}
	defer f.close()
	call := func(int) flowIn { return flowIn{MS: int(fc.activity / time.Millisecond)} }
	if err := f.start(ctx, fc.concRuns, call); err != nil {
		return res, err
	}
	if err := m.measure(ctx, &res, func() ([]time.Duration, error) {
		if err := f.fleet.start(); err != nil {
			return nil, err
		}
		return nil, f.awaitRuns(ctx, m, 10*time.Minute)
	}); err != nil {
		return res, err
	}
	res.Completed, err = f.completed(ctx, f.pool)
	if err != nil {
		return res, err
	}
	// The timed runs' span, first start to last end, by the database; the
	// time their attempts held a slot (admission to release, by their
	// rows), and their calls took (by the call log).
	var span, held, called float64
	if err := f.pool.QueryRow(ctx, f.sql(`SELECT extract(epoch FROM max(ended_at) - min(started_at)),
		extract(epoch FROM sum(ended_at - started_at)), (SELECT extract(epoch FROM sum(returned_at - at)) FROM {s}.`+flowCallsTable+`)
		FROM {s}.attempts WHERE activity = '`+flowActivity+`'`)).Scan(&span, &held, &called); err != nil {
		return res, err
	}
	ideal := float64(fc.concLimit) / fc.activity.Seconds()
	perS := float64(fc.concRuns) / span
	n := float64(fc.concRuns)
	res.Checks = append(res.Checks, check{Name: "throughput (runs ÷ first start to last end)",
		Figure: fmt.Sprintf("%.1f runs/s, %.1f %% of the ideal %.0f; per run, a slot held %.1f ms for a %.1f ms call, then free %.1f ms",
			perS, 100*perS/ideal, ideal, 1000*held/n, 1000*called/n, 1000*(float64(fc.concLimit)*span-held)/n),
		Target: "≥ 90 %", Pass: perS >= 0.9*ideal})

	k, err := f.killHolder(ctx, m, killHolding(fc.concLimit, fc.workers))
	if err != nil {
		return res, err
	}
	if err := f.awaitRuns(ctx, m, 10*time.Minute); err != nil {
		return res, err
	}
	if _, err := f.fleet.stop(); err != nil {
		return res, err
	}
	return f.concChecks(ctx, res, k)
}

// killHolding is how many slots the worker F-conc kills holds at least: 5,
// as the issue has it, or fewer when the limit is small for the workers
// (the test's 5 over 3), but never more than one of them is sure to hold
// whenever every slot is in use (limit ÷ workers, rounded up). A worker
// holding more is luck: with 5 slots over 3 workers one of them held all
// five within a minute in most runs, and in none, twice, on a slow machine.
func killHolding(limit, workers int) int {
	return max(1, min(5, (limit+workers-1)/workers))
}

// kill is what killHolder did: when, to which worker, what it held.
type kill struct {
	label   string
	at      time.Time // the database's clock, once the process was reaped
	held    int       // slots it held then
	expires time.Time // the last of its leases' expiry
}

// killHolder starts enough runs to keep every slot busy for LeaseTTL + 4 s,
// waits until every slot is in use and one worker holds at least least of
// them, kills that worker (SIGKILL) and ends its calls in the call log.
func (f *flowRun) killHolder(ctx context.Context, m *meter, least int) (k kill, err error) {
	fc := f.c.flow
	more := int(float64(fc.concLimit) / fc.activity.Seconds() * (fc.lease + 4*time.Second).Seconds())
	if err := f.start(ctx, more, func(int) flowIn { return flowIn{MS: int(fc.activity / time.Millisecond)} }); err != nil {
		return k, err
	}
	held := f.sql(`SELECT r.claimant, count(*)::int, sum(count(*)) OVER ()::int, max(max(r.lease_expires_at)) OVER ()
		FROM {s}.attempts a JOIN {s}.runs r ON r.id = a.run_id AND r.epoch = a.epoch
		WHERE a.hold_downstream = $1 AND a.hold_key IS NOT NULL AND a.status = 'running'
		  AND r.status = 'running' AND r.lease_expires_at > now()
		GROUP BY r.claimant ORDER BY 2 DESC LIMIT 1`)
	var total int
	var exp time.Time
	if err := waitFor(ctx, 10*time.Millisecond, time.Minute, fmt.Sprintf("a worker holding %d slots", least), func() (bool, error) {
		err := m.conn.QueryRow(ctx, held, flowDownstream).Scan(&k.label, &k.held, &total, &exp)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return err == nil && total == fc.concLimit && k.held >= least, err
	}); err != nil {
		return k, err
	}
	i := slices.IndexFunc(f.fleet, func(p *proc) bool { return p.label == k.label })
	if i < 0 {
		return k, fmt.Errorf("no worker process labelled %q", k.label)
	}
	p := f.fleet[i]
	if err := p.killOne(); err != nil {
		return k, err
	}
	if err := m.conn.QueryRow(ctx, f.sql(`SELECT clock_timestamp(), count(*)::int, coalesce(max(r.lease_expires_at), clock_timestamp())
		FROM {s}.attempts a JOIN {s}.runs r ON r.id = a.run_id AND r.epoch = a.epoch
		WHERE a.hold_downstream = $1 AND a.hold_key IS NOT NULL AND a.status = 'running'
		  AND r.status = 'running' AND r.claimant = $2`), flowDownstream, k.label).Scan(&k.at, &k.held, &k.expires); err != nil {
		return k, err
	}
	return k, endCallsOf(ctx, f.pool, f.schema, p.cmd.Process.Pid)
}

// concChecks are F-conc's figures after the kill: the activity's own peak
// of calls at once, the invariants, how soon the killed worker's slots were
// in use again, and the attempts charged.
func (f *flowRun) concChecks(ctx context.Context, res result, k kill) (result, error) {
	fc := f.c.flow
	var peak, peakCalls int
	if err := f.pool.QueryRow(ctx, f.sql(`SELECT (SELECT peak FROM {s}.flow_gauge), (SELECT coalesce(max(in_flight), 0) FROM {s}.`+flowCallsTable+`)`)).
		Scan(&peak, &peakCalls); err != nil {
		return res, err
	}
	res.Checks = append(res.Checks, check{Name: "calls at once, as the activity counted them (all processes)",
		Figure: fmt.Sprintf("at most %d (%d calls recorded the most at their start)", peak, peakCalls),
		Target: fmt.Sprintf("≤ %d", fc.concLimit), Pass: peak <= fc.concLimit && peakCalls <= fc.concLimit, Invariant: true})
	_, inv, err := f.checkFlow(ctx, invariant.FlowOptions{Invocations: flowCallsTable, Stopped: map[string][]time.Time{k.label: {k.at}}})
	if err != nil {
		return res, err
	}
	res.Checks = append(res.Checks, inv...)
	back, first, err := f.recovery(ctx, k)
	if err != nil {
		return res, err
	}
	figure := "never"
	if back > 0 {
		figure = fmt.Sprintf("%.2f s after the kill (first reused after %.2f s; its last lease expired after %.2f s)",
			back.Seconds(), first.Seconds(), k.expires.Sub(k.at).Seconds())
	}
	res.Checks = append(res.Checks, check{Name: fmt.Sprintf("the %d slots of a killed worker in use again", k.held),
		Figure: figure, Target: fmt.Sprintf("≤ LeaseTTL + 1 s = %.0f s", (fc.lease + time.Second).Seconds()),
		Pass: back > 0 && back <= fc.lease+time.Second})
	var attempts, runs, lost, failed int
	if err := f.pool.QueryRow(ctx, f.sql(`SELECT count(*), count(DISTINCT run_id), count(*) FILTER (WHERE status = 'lost'),
		count(*) FILTER (WHERE status NOT IN ('succeeded', 'lost')) FROM {s}.attempts WHERE activity = '`+flowActivity+`'`)).Scan(&attempts, &runs, &lost, &failed); err != nil {
		return res, err
	}
	charged := attempts - runs - lost
	res.Checks = append(res.Checks, check{Name: "attempts charged by the limit",
		Figure: fmt.Sprintf("%d (%d runs, %d attempts: %d lost to the kill, each rescued; %d failed)", charged+failed, runs, attempts, lost, failed),
		Target: "0", Pass: charged == 0 && failed == 0 && lost <= k.held, Invariant: true})
	return res, nil
}

// recovery reads from the attempts when, after the kill, the slots were all
// in use again (back) and when the first of the killed worker's was reused
// (first): the attempts of live workers in flight, by their rows' times,
// passed the limit less what the killed worker held, then reached it.
func (f *flowRun) recovery(ctx context.Context, k kill) (back, first time.Duration, err error) {
	rows, err := f.pool.Query(ctx, f.sql(`SELECT started_at, ended_at FROM {s}.attempts
		WHERE status <> 'lost' AND ended_at > $1 AND activity = $2`), k.at, flowActivity)
	if err != nil {
		return 0, 0, err
	}
	type event struct {
		at    time.Time
		delta int
	}
	var events []event
	var s, e time.Time
	if _, err := pgx.ForEachRow(rows, []any{&s, &e}, func() error {
		events = append(events, event{s, 1}, event{e, -1})
		return nil
	}); err != nil {
		return 0, 0, err
	}
	sort.Slice(events, func(i, j int) bool {
		if !events[i].at.Equal(events[j].at) {
			return events[i].at.Before(events[j].at)
		}
		return events[i].delta < events[j].delta
	})
	n, limit := 0, f.c.flow.concLimit
	for _, ev := range events {
		n += ev.delta
		if ev.delta < 0 || ev.at.Before(k.at) {
			continue
		}
		if first == 0 && n > limit-k.held {
			first = ev.at.Sub(k.at)
		}
		if n >= limit {
			return ev.at.Sub(k.at), first, nil
		}
	}
	return 0, first, nil
}

// flowRate is F-rate: a rate per key on c.flow.keys keys, with enough runs
// waiting on each for c.flow.seconds and a little more; the starts of each
// key's first c.flow.seconds are counted against the rate's ideal.
func flowRate(ctx context.Context, c config, m *meter) (res result, err error) {
	fc := c.flow
	ideal := int(float64(fc.rate)*fc.seconds.Seconds()) + fc.burst
	n := fc.keys * (ideal + ideal/20)
	res = result{Workload: "F-rate", System: "tenure", Runs: n, Steps: 1, Workers: fc.workers}
	f, err := startFlow(ctx, c, flowSpec{Scenario: "rate", Rate: fc.rate, Burst: fc.burst}, "f-rate")
	if err != nil {
		return res, err
	}
	defer f.close()
	if err := f.start(ctx, n, func(i int) flowIn { return flowIn{Key: fmt.Sprintf("key-%d", i%fc.keys)} }); err != nil {
		return res, err
	}
	if err := m.measure(ctx, &res, func() ([]time.Duration, error) {
		if err := f.fleet.start(); err != nil {
			return nil, err
		}
		return nil, f.awaitRuns(ctx, m, 2*fc.seconds+5*time.Minute)
	}); err != nil {
		return res, err
	}
	if _, err := f.fleet.stop(); err != nil {
		return res, err
	}
	if res.Completed, err = f.completed(ctx, f.pool); err != nil {
		return res, err
	}
	_, inv, err := f.checkFlow(ctx, invariant.FlowOptions{})
	if err != nil {
		return res, err
	}
	res.Checks = append(res.Checks, inv...)
	rows, err := f.pool.Query(ctx, f.sql(`
		WITH a AS (SELECT r.input->>'key' AS key, a.started_at FROM {s}.attempts a JOIN {s}.runs r ON r.id = a.run_id
		           WHERE a.activity = '`+flowActivity+`'),
		     t0 AS (SELECT key, min(started_at) AS t0 FROM a GROUP BY key)
		SELECT a.key, count(*)::int FROM a JOIN t0 USING (key)
		WHERE a.started_at < t0.t0 + $1 * interval '1 millisecond' GROUP BY a.key ORDER BY a.key`), fc.seconds.Milliseconds())
	if err != nil {
		return res, err
	}
	starts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		Key string
		N   int
	}])
	if err != nil {
		return res, err
	}
	least, figure := ideal, ""
	for _, s := range starts {
		least = min(least, s.N)
		figure += fmt.Sprintf("%s %d, ", s.Key, s.N)
	}
	if len(starts) < fc.keys {
		least = 0
	}
	res.Checks = append(res.Checks, check{Name: fmt.Sprintf("starts per key in its first %s", fc.seconds),
		Figure: fmt.Sprintf("%sthe least %.1f %% of the ideal %d (%d/s × %s + burst %d)", figure, 100*float64(least)/float64(ideal),
			ideal, fc.rate, fc.seconds, fc.burst),
		Target: "≥ 98 %", Pass: float64(least) >= 0.98*float64(ideal)})
	return res, nil
}
