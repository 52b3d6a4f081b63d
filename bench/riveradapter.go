package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// R is A' twice over, in one invocation: River draining no-op jobs without
// the River adapter (variant "none") and with it, recording every attempt
// as a Tenure attempt row of the job's shadow run (variant "adapter",
// riveradapter.Record, the kind under Tenure's default policy); and, after
// each drain, C on River with the same variant (R1: one job at a time,
// insert to completion), for the latency a job's record adds. The variants
// alternate (none, adapter, adapter, none, ...) so that a machine that
// drifts weighs on both alike. The target: the adapter's overhead
// per job at most 20 %.

// riverAdapterRounds is R: c.rRounds pairs of the drain and of C, without
// and with the adapter.
func riverAdapterRounds(ctx context.Context, c config, m *meter) ([]result, error) {
	var results []result
	for i := range 2 * c.rRounds {
		variant, adapter := "none", i%4 == 1 || i%4 == 2
		if adapter {
			variant = "adapter"
		}
		for _, load := range []string{"R", "R1"} {
			res := result{Workload: load, Variant: variant, System: "river", Runs: c.runsA, Steps: 1}
			var err error
			if load == "R" {
				res, err = riverDrainOf(ctx, c, m, res, adapter)
			} else {
				res.Runs = c.runsC
				res, err = riverLatencyOf(ctx, c, m, res, adapter)
			}
			if err == nil && adapter {
				err = checkRecorded(ctx, c, m, res)
			}
			results = append(results, res)
			if err != nil {
				return results, err
			}
		}
	}
	last := len(results) - 2 // the last drain's row, which names R
	results[last].Checks = adapterChecks(results)
	return results, nil
}

// checkRecorded fails a variant with the adapter that did not record every
// job's attempt (read before the next workload drops the schema).
func checkRecorded(ctx context.Context, c config, m *meter, res result) error {
	var recorded int
	err := m.conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{c.prefix + "_river", "attempts"}.Sanitize()+
		` WHERE status = 'succeeded'`).Scan(&recorded)
	if err == nil && recorded != res.Runs {
		err = fmt.Errorf("%s: the adapter recorded %d attempts succeeded of %d jobs", res.Workload, recorded, res.Runs)
	}
	return err
}

// adapterChecks compares the variants of R: the drain's time per job (the
// inverse of its jobs per second), with the machine CPU, WAL and write
// transactions per job beside it, and R1's insert→completion p50.
func adapterChecks(results []result) []check {
	mean := func(load, variant string, f func(result) float64) float64 {
		var sum float64
		var n int
		for _, r := range results {
			if r.Workload == load && r.Variant == variant {
				sum += f(r)
				n++
			}
		}
		return sum / float64(max(n, 1))
	}
	perSec := func(r result) float64 { return r.RunsPerSec }
	cpu := func(r result) float64 { return r.CPUMsPerRun }
	wal := func(r result) float64 { return r.WALBytesPerRun }
	p50 := func(r result) float64 {
		if r.P50Ms == nil {
			return 0
		}
		return *r.P50Ms
	}
	over := mean("R", "none", perSec)/mean("R", "adapter", perSec) - 1
	lat := mean("R1", "adapter", p50)/mean("R1", "none", p50) - 1
	checks := []check{
		{Name: "drain: time per job, adapter ÷ none − 1", Figure: fmt.Sprintf("%+.1f %% (%.0f jobs/s against %.0f; machine CPU %.2f ms a job against %.2f; WAL %.0f B against %.0f)",
			100*over, mean("R", "adapter", perSec), mean("R", "none", perSec), mean("R", "adapter", cpu), mean("R", "none", cpu),
			mean("R", "adapter", wal), mean("R", "none", wal)),
			Target: "≤ +20 %", Pass: over <= 0.20},
	}
	if slices.ContainsFunc(results, func(r result) bool { return r.Workload == "R1" }) {
		checks = append(checks, check{Name: "one job at a time: insert→completion p50, adapter ÷ none − 1",
			Figure: fmt.Sprintf("%+.1f %% (%.2f ms against %.2f)", 100*lat, mean("R1", "adapter", p50), mean("R1", "none", p50)),
			Target: "≤ +20 %", Pass: lat <= 0.20})
	}
	return checks
}
