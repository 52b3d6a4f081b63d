package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/chaos/invariant"
)

// flowBreaker is F-breaker: runs start at c.flow.breakerRPS a second while
// the downstream answers 503 for c.flow.seconds (after a healthy start, and
// for as long again as that start after it); its breaker and the default
// retry budget must hold the retries back, charge no run its retries, and
// let every run complete soon after the outage.
func flowBreaker(ctx context.Context, c config, m *meter) (res result, err error) {
	fc := c.flow
	calm := min(max(fc.seconds/12, time.Second), 5*time.Second) // healthy, before and after
	n := int(float64(fc.breakerRPS) * (2*calm + fc.seconds).Seconds())
	res = result{Workload: "F-breaker", System: "tenure", Runs: n, Steps: 1, Workers: fc.workers}
	f, err := startFlow(ctx, c, flowSpec{Scenario: "breaker", OpenFor: fc.openFor}, "f-breaker")
	if err != nil {
		return res, err
	}
	defer f.close()
	var from, until time.Time
	if err := m.measure(ctx, &res, func() ([]time.Duration, error) {
		if err := f.fleet.start(); err != nil {
			return nil, err
		}
		began := time.Now()
		from, until = began.Add(calm), began.Add(calm+fc.seconds)
		if err := f.submit(ctx, n, 2*calm+fc.seconds, flowIn{MS: 5, DownFrom: from.UnixMilli(), DownUntil: until.UnixMilli()}); err != nil {
			return nil, err
		}
		return nil, f.awaitRuns(ctx, m, time.Until(until)+2*fc.seconds+time.Minute)
	}); err != nil {
		return res, err
	}
	if _, err := f.fleet.stop(); err != nil {
		return res, err
	}
	if res.Completed, err = f.completed(ctx, f.pool); err != nil {
		return res, err
	}
	return f.breakerChecks(ctx, res, from, until)
}

// submit starts n runs of in evenly over d, a batch every 100 ms.
func (f *flowRun) submit(ctx context.Context, n int, d time.Duration, in flowIn) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	began := time.Now()
	for sent := 0; sent < n; <-tick.C {
		due := min(n, int(float64(n)*float64(time.Since(began)+100*time.Millisecond)/float64(d)))
		if due > sent {
			if err := f.start(ctx, due-sent, func(int) flowIn { return in }); err != nil {
				return err
			}
			sent = due
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// breakerChecks are F-breaker's figures: the probes of each open interval
// (from audit_log's breaker rows and the attempts' starts), the retries
// during the outage against the retry budget, the runs that ran out of
// retries, how soon all completed after the outage, and the invariants.
func (f *flowRun) breakerChecks(ctx context.Context, res result, from, until time.Time) (result, error) {
	fc := f.c.flow
	intervals, most, err := f.probes(ctx)
	if err != nil {
		return res, err
	}
	res.Checks = append(res.Checks, check{Name: "probes per open interval (attempts admitted while open)",
		Figure: fmt.Sprintf("at most %d, in %d open intervals", most, intervals), Target: "≤ 1", Pass: intervals > 0 && most <= 1, Invariant: true})
	var firsts, retries, exhausted, failed int
	var last time.Time
	if err := f.pool.QueryRow(ctx, f.sql(`SELECT
		(SELECT count(*) FROM {s}.attempts WHERE started_at >= $1 AND started_at < $2 AND attempt = 1),
		(SELECT count(*) FROM {s}.attempts WHERE started_at >= $1 AND started_at < $2 AND attempt > 1 AND NOT is_rescue),
		(SELECT count(*) FROM {s}.failures WHERE reason = 'retries_exhausted' AND workflow = '`+flowWorkflow+`'),
		(SELECT count(*) FROM {s}.runs WHERE status <> 'completed' AND workflow = '`+flowWorkflow+`'),
		(SELECT max(finished_at) FROM {s}.runs)`), from, until).Scan(&firsts, &retries, &exhausted, &failed, &last); err != nil {
		return res, err
	}
	budget := 0.2*float64(firsts) + 10*fc.seconds.Seconds()
	res.Checks = append(res.Checks,
		check{Name: "retries during the outage", Figure: fmt.Sprintf("%d (%d first attempts)", retries, firsts),
			Target: fmt.Sprintf("≤ 0.2 × first attempts + 10/s = %.0f", budget), Pass: float64(retries) <= budget, Invariant: true},
		check{Name: "runs retries_exhausted", Figure: fmt.Sprintf("%d (%d runs not completed)", exhausted, failed),
			Target: "0", Pass: exhausted == 0 && failed == 0},
		check{Name: "every run completed, after the outage's end", Figure: fmt.Sprintf("%d of %d runs completed, the last %.1f s after it",
			res.Completed, res.Runs, last.Sub(until).Seconds()),
			Target: fmt.Sprintf("≤ 2 × the outage = %.0f s", 2*fc.seconds.Seconds()),
			Pass:   failed == 0 && res.Completed == res.Runs && last.Sub(until) <= 2*fc.seconds})
	_, inv, err := f.checkFlow(ctx, invariant.FlowOptions{})
	if err != nil {
		return res, err
	}
	res.Checks = append(res.Checks, inv[1]) // no concurrency or rate to be over
	return res, nil
}

// probes reads the breaker's history from audit_log (breaker_history) and
// counts, in each open interval (from its move to open to its next move to
// open or closed), the attempts admitted: the probes. Both are ordered by
// the times sqlFlowOrder's triggers took, in the order of the lock.
// It returns the intervals and the most attempts one held.
func (f *flowRun) probes(ctx context.Context) (intervals, most int, err error) {
	rows, err := f.pool.Query(ctx, f.sql(`SELECT o.at, h.to_state FROM {s}.breaker_history h JOIN {s}.flow_order o ON o.audit_id = h.id
		WHERE h.downstream = $1 ORDER BY o.at`), flowDownstream)
	if err != nil {
		return 0, 0, err
	}
	type move struct {
		At time.Time
		To string
	}
	moves, err := pgx.CollectRows(rows, pgx.RowToStructByPos[move])
	if err != nil {
		return 0, 0, err
	}
	rows, err = f.pool.Query(ctx, f.sql(`SELECT at FROM {s}.flow_order WHERE attempt_run IS NOT NULL ORDER BY at`))
	if err != nil {
		return 0, 0, err
	}
	starts, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return 0, 0, err
	}
	for i, mv := range moves {
		if mv.To != "open" {
			continue
		}
		end := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
		for _, next := range moves[i+1:] {
			if next.To == "open" || next.To == "closed" {
				end = next.At
				break
			}
		}
		lo := sort.Search(len(starts), func(j int) bool { return !starts[j].Before(mv.At) })
		hi := sort.Search(len(starts), func(j int) bool { return !starts[j].Before(end) })
		intervals++
		most = max(most, hi-lo)
	}
	return intervals, most, nil
}
