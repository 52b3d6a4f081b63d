package main

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestMain lets the test binary stand in for the bench binary when a
// workload re-executes itself as a worker process.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(workerMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// TestEveryWorkload runs every workload of every system at a tiny scale and
// checks that each completed all its runs. It says nothing about speed.
func TestEveryWorkload(t *testing.T) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		url = defaultURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dial, stop := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.Connect(dial, url)
	stop()
	if err != nil {
		t.Fatalf("the benchmark needs PostgreSQL at %s (set DATABASE_URL): %v", redact(url), err)
	}
	_ = conn.Close(ctx)

	c := config{
		url: url, systems: allSystems, loads: allLoads, prefix: "benchtest",
		runsA: 20, runsB: 20, runsC: 20, runsD: 20, stepsB: 10,
		callers: 100, poolSize: 20, dWorkers: []int{1, 2, 4},
		tenureConcurrency: 100, tenureDrain: 1000, riverWorkers: 2000,
		riverCooldown: 2 * time.Millisecond, riverPoll: 20 * time.Millisecond,
		log: testLog{t},
	}
	results, err := runAll(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range results {
		got = append(got, r.Workload+" "+r.System)
		if r.Completed != r.Runs || r.Runs != 20 {
			t.Errorf("%s on %s (%d workers): %d of %d runs completed, want 20 of 20", r.Workload, r.System, r.Workers, r.Completed, r.Runs)
		}
		if r.RunsPerSec <= 0 || r.XactsPerRun <= 0 || r.WALBytesPerRun <= 0 {
			t.Errorf("%s on %s: a counter did not move: %+v", r.Workload, r.System, r)
		}
		if r.Workload == "S" && (r.P50Ms == nil || *r.P50Ms <= 0) {
			t.Errorf("S: no signal-to-wake latency: %+v", r)
		}
		if r.Workload == "D" && r.LeasesLost == nil {
			t.Errorf("D with %d workers: no leases-lost count from the worker processes", r.Workers)
		}
	}
	want := []string{"A tenure", "A dbos", "A' tenure", "A' river", "B tenure", "B dbos",
		"C tenure", "C river", "C dbos", "D tenure", "D tenure", "D tenure", "E tenure", "S tenure"}
	if !slices.Equal(got, want) {
		t.Errorf("measured %q, want %q", got, want)
	}
}

// testLog sends progress lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(p))
	return len(p), nil
}
