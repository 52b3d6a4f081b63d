package main

import (
	"testing"
	"time"
)

// TestChaos_Short is the CI-sized chaos run: the chaos command's driver and
// invariant checker on 200 runs, 3 workers, 20 s of kills and freezes, the
// flow-control rules included (the workload's Limited steps share a
// downstream's concurrency limit and rate).
func TestChaos_Short(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := config{
		URL: e.fleet.DatabaseURL, Schema: e.schema, Binary: workerBinary,
		Runs: 200, Workers: 3, Concurrency: 8,
		Duration: 20 * time.Second, Settle: 40 * time.Second, Interval: time.Second,
		LeaseTTL: time.Second, Heartbeat: 250 * time.Millisecond, Poll: 50 * time.Millisecond,
		PoisonEvery: 50, Seed: uint64(time.Now().UnixNano()),
	}
	sum, err := runChaos(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", sum)
	if !sum.ok() {
		t.Fatalf("%d invariant violations, %d worker crashes (seed %d)", len(sum.report.Violations), len(sum.crashes), cfg.Seed)
	}
	if sum.kills+sum.freezes == 0 || sum.report.Attempts["lost"] == 0 {
		t.Fatalf("the run disrupted nothing: %d kills, %d freezes, %d lost attempts", sum.kills, sum.freezes, sum.report.Attempts["lost"])
	}
	// The downstream's limits were exercised: its steps were held back by
	// them, and the flow rules checked its attempts.
	if f := sum.report.Flow; f == nil || len(f.Downstreams) != 1 || f.Downstreams[0].Attempts == 0 || len(f.Downstreams[0].Throttles) == 0 {
		t.Fatalf("the downstream's limits held nothing back: %+v", f)
	}
}
