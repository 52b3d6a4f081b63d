package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/store"
)

// tenure workers names the build that runs pinned to one wait for, and
// tenure runs move moves them, dry run first, audited; mistakes are usage
// errors.
func TestCLI_RunsMoveMovesPinnedRunsAndWorkersNamesTheirBuild(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(s)); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), replaceSchemaName(sql, s), args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var ids []uuid.UUID
	for range 3 {
		id := uuid.New()
		ids = append(ids, id)
		exec(`INSERT INTO {schema}.runs (id, workflow, input, started_at, pinned_to) VALUES ($1, 'checkout', '{}', now(), 'old-build')`, id)
	}
	exec(`INSERT INTO {schema}.workers (id, label, host, pid, version, workflows, queues, concurrency, heartbeat_ms, lease_ttl_ms, build_id)
		VALUES ($1, 'w', 'h', 1, 'test', '{checkout}', '{default}', 10, 1000, 30000, 'new-build')`, uuid.New())

	expect(t, tenure(t, s, "workers"), 0, `3 runs of workflow "checkout" on queue "default" waiting`, "pinned to build old-build",
		"tenure runs move --build old-build --to BUILD --dry-run")
	expect(t, tenure(t, s, "runs", "show", ids[0].String()), 0, "pinned", "to build old-build")

	expect(t, tenure(t, s, "runs", "move", "--to", "new-build"), 2, "--build")
	expect(t, tenure(t, s, "runs", "move", "--build", "old-build"), 2, "--to BUILD, or --unpin")
	expect(t, tenure(t, s, "runs", "move", "--build", "old-build", "--to", "new-build", "--unpin"), 2, "not both")
	expect(t, tenure(t, s, "runs", "move", "--build", "old-build", "--to", "old-build"), 1, "pinned to that build already")
	expect(t, tenure(t, s, "runs", "move", "--build", "old-build", "--to", "bad build"), 1, "invalid build ID")

	expect(t, tenure(t, s, "runs", "move", "--build", "old-build", "--to", "new-build", "--dry-run"), 0,
		"checkout", "queued", "would move 3 runs pinned to build old-build to build new-build")
	if n := count(t, pool, s, `SELECT count(*) FROM {schema}.runs WHERE pinned_to = 'old-build'`); n != 3 {
		t.Fatalf("the dry run moved %d runs", 3-n)
	}
	r := tenure(t, s, "--json", "runs", "move", "--build", "old-build", "--to", "new-build", "--note", "INC-1")
	var out struct {
		From   string `json:"from_build"`
		To     string `json:"to_build"`
		DryRun bool   `json:"dry_run"`
		Runs   []struct {
			Workflow, Queue, Status string
			Runs                    int
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 || out.From != "old-build" || out.To != "new-build" ||
		out.DryRun || len(out.Runs) != 1 || out.Runs[0].Runs != 3 || out.Runs[0].Status != "queued" {
		t.Fatalf("runs move --json: %+v, %v\n%s", out, err, r)
	}
	if n := count(t, pool, s, `SELECT count(*) FROM {schema}.audit_log WHERE action = 'move' AND runs = 3 AND note = 'INC-1'`); n != 1 {
		t.Fatalf("%d audit rows for the move", n)
	}
	expect(t, tenure(t, s, "audit"), 0, "move")
	if r := tenure(t, s, "workers"); r.code != 0 || strings.Contains(r.stdout, "pinned to build") {
		t.Fatalf("tenure workers after the move:\n%s", r)
	}
	expect(t, tenure(t, s, "runs", "move", "--build", "old-build", "--to", "new-build", "--batch-size", "0"), 2, "--batch-size must be at least 1")
	expect(t, tenure(t, s, "runs", "move", "--build", "new-build", "--unpin", "--batch-size", "2"), 0,
		"moved 3 runs pinned to build new-build to no build (unpinned)")
	if n := count(t, pool, s, `SELECT count(*) FROM {schema}.audit_log WHERE action = 'move' AND filter->>'from_build' = 'new-build'`); n != 2 {
		t.Fatalf("%d audit rows for a move of 3 runs in batches of 2, want 2", n)
	}
	expect(t, tenure(t, s, "runs", "move", "--build", "new-build", "--to", "old-build"), 0, "no run pinned to build new-build can still run")
}

func replaceSchemaName(sql, schema string) string {
	return strings.ReplaceAll(sql, "{schema}", pgx.Identifier{schema}.Sanitize())
}

func count(t *testing.T, pool *pgxpool.Pool, schema, sql string) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(t.Context(), replaceSchemaName(sql, schema)).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
