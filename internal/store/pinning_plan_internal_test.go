package store

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/pgtest"
)

// TestStranded_ReadsOnlyTheRunsNobodyServes: a worker's minute check for
// runs pinned to builds nobody runs, on a table of 100,000 finished runs,
// 200,000 runs pinned to a live build and 50,000 failed ones of a gone
// build, analyzed: its generic plan (as the worker sends it, planWrite)
// reads runs_pinned_idx by its ranges and no other index of runs, and it
// finds the five runs of the gone build that can still run.
func TestStranded_ReadsOnlyTheRunsNobodyServes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	ctx := t.Context()
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO {schema}.runs (id, workflow, input, status, output, started_at, finished_at)
		 SELECT gen_random_uuid(), 'wf', '{}', 'completed', '1', now(), now() FROM generate_series(1, 100000)`,
		`INSERT INTO {schema}.runs (id, workflow, input, started_at, pinned_to)
		 SELECT gen_random_uuid(), 'wf', '{}', now(), 'live' FROM generate_series(1, 200000)`,
		`INSERT INTO {schema}.runs (id, workflow, input, status, started_at, finished_at, pinned_to)
		 SELECT gen_random_uuid(), 'wf', '{}', 'failed', now(), now(), 'gone' FROM generate_series(1, 50000)`,
		`INSERT INTO {schema}.runs (id, workflow, input, started_at, pinned_to)
		 SELECT gen_random_uuid(), 'wf', '{}', now(), 'gone' FROM generate_series(1, 5)`,
		`ANALYZE {schema}.runs`,
	} {
		if _, err := pool.Exec(ctx, s.sql(q)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Beat(ctx, pool, WorkerBeat{ID: uuid.New(), Label: "w", Host: "h", PID: 1, Version: "test", Workflows: []string{"wf"},
		Queues: []string{"default"}, Concurrency: 10, Interval: time.Second, TTL: time.Minute, Build: "live"}); err != nil {
		t.Fatal(err)
	}
	args := []any{[]string{"wf", "other"}, []string{"default"}, strandedCount}
	plan := explain(t, s, planWrite, s.sql(sqlStranded), args)
	for _, bad := range badAccess(plan, wideIndex) {
		t.Errorf("%s in the plan of the stranded runs' check\n%s", bad, plan)
	}
	if strings.Contains(plan, "runs_workflow_status_idx") || !strings.Contains(plan, "runs_pinned_idx") {
		t.Errorf("the stranded runs' check reads other than runs_pinned_idx:\n%s", plan)
	}
	for range 7 { // past the prepared statement's custom plans
		got, err := s.Stranded(ctx, pool, []string{"wf", "other"}, []string{"default"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != (Stranded{Workflow: "wf", Queue: "default", Build: "gone", Runs: 5}) {
			t.Fatalf("stranded: %+v, want the 5 runs of wf pinned to gone", got)
		}
	}
}
