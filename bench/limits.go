package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/sdk"
)

// L is A twice over, in one invocation: one-step runs whose activity calls
// no downstream (variant "none"), and the same runs whose activity calls a
// downstream with a concurrency limit that never binds (variant "limit"):
// every attempt is then admitted in the group commit that records its start
// and gives its slot back in the one that records its end, in _flow. The
// difference is the cost of declaring a limit. The variants alternate
// (none, limit, limit, none, ...) so that a machine that drifts weighs on
// both alike.

// limitedDownstream is L's downstream.
const limitedDownstream = "bench-unbound"

// limitedWorkflow is benchWF whose steps call a downstream limited to
// limit calls at once, which the 100 callers of A never reach.
func limitedWorkflow(limit int) *sdk.Workflow[benchIn, int] {
	d := flow.New(limitedDownstream, flow.Concurrency(limit))
	act := activities.New("noop-limited", func(_ context.Context, n int) (int, error) { return n, nil }).Calls(d, nil)
	return sdk.NewWorkflow("bench-limited", func(ctx context.Context, in benchIn) (int, error) {
		for i := range in.Steps {
			if _, err := sdk.Execute(ctx, act, i); err != nil {
				return 0, err
			}
		}
		return in.Steps, nil
	})
}

// check is one figure of a workload against its target.
type check struct {
	Name   string `json:"name"`
	Figure string `json:"figure"`
	Target string `json:"target"`
	Pass   bool   `json:"pass"`
	// Invariant marks a check that holds whatever the machine's speed (a
	// limit never exceeded, nothing leaked or charged): the tests assert
	// these at any scale, and none of the others.
	Invariant bool `json:"invariant,omitempty"`
}

// tenureLimits is L: c.lRounds pairs of A without and with the limit.
func tenureLimits(ctx context.Context, c config, m *meter) ([]result, error) {
	limited := limitedWorkflow(c.lLimit)
	var results []result
	for i := range 2 * c.lRounds {
		limit := i%4 == 1 || i%4 == 2
		res := result{Workload: "L", Variant: "none", System: "tenure", Runs: c.runsA, Steps: 1}
		wf := benchWF
		if limit {
			res.Variant, wf = "limit", limited
		}
		res, err := tenureCallersOf(ctx, c, m, wf, res, 0)
		if err == nil && limit {
			// The runs' attempts went through the limit: the downstream
			// admitted each (read before the next workload drops the schema).
			var admitted int
			err = m.conn.QueryRow(ctx, `SELECT admitted FROM `+pgx.Identifier{c.prefix + "_tenure", "downstream_status"}.Sanitize()+
				` WHERE name = $1`, limitedDownstream).Scan(&admitted)
			if err == nil && admitted != res.Runs {
				err = fmt.Errorf("the downstream admitted %d attempts of %d runs", admitted, res.Runs)
			}
		}
		results = append(results, res)
		if err != nil {
			return results, err
		}
	}
	results[len(results)-1].Checks = limitChecks(results)
	return results, nil
}

// limitChecks compares the variants of L: the targets are at most
// 0.05 more write transactions per run and a p50 at most 10 % higher.
func limitChecks(results []result) []check {
	var xacts, p50 [2]float64
	var n [2]int
	for _, r := range results {
		v := 0
		if r.Variant != "none" {
			v = 1
		}
		n[v]++
		xacts[v] += r.XactsPerRun
		if r.P50Ms != nil {
			p50[v] += *r.P50Ms
		}
	}
	for v := range 2 {
		xacts[v] /= float64(n[v])
		p50[v] /= float64(n[v])
	}
	dx, ratio := xacts[1]-xacts[0], p50[1]/p50[0]
	return []check{
		{Name: "write transactions per run, limit − none", Figure: fmt.Sprintf("%+.3f (%.3f against %.3f)", dx, xacts[1], xacts[0]),
			Target: "≤ +0.05", Pass: dx <= 0.05},
		{Name: "start→result p50, limit ÷ none", Figure: fmt.Sprintf("%.3f (%.1f against %.1f ms)", ratio, p50[1], p50[0]),
			Target: "≤ 1.10", Pass: ratio <= 1.10},
	}
}
