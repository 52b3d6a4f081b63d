package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/chaos/fleet"
	"github.com/tenurehq/tenure/internal/chaos/invariant"
)

// What evidence gathers at most: a violation found in CI cannot be looked
// at again (its schema is dropped, its worker processes are gone), so the
// summary carries what a person needs to tell what happened to the run.
const (
	evidenceRuns  = 3  // runs described
	evidenceLines = 80 // worker log lines per run
)

// evidence describes the first runs the violations name: their row, their
// steps and attempts as the database holds them, and every line of every
// worker's log that names them, in each worker's order.
func evidence(ctx context.Context, pool *pgxpool.Pool, schema string, vs []invariant.Violation, workers []*fleet.Worker) string {
	var b strings.Builder
	seen := map[uuid.UUID]bool{}
	for _, run := range named(vs) {
		if seen[run] || len(seen) == evidenceRuns {
			continue
		}
		seen[run] = true
		fmt.Fprintf(&b, "EVIDENCE run %s\n", run)
		if err := describeRun(ctx, pool, schema, run, &b); err != nil {
			fmt.Fprintf(&b, "  (the database could not describe it: %v)\n", err)
		}
		id, n := run.String(), 0
		for _, w := range workers {
			for _, l := range w.Log() {
				if !strings.Contains(l, id) {
					continue
				}
				if n++; n <= evidenceLines {
					fmt.Fprintf(&b, "  log %s: %s\n", w.Label, l)
				}
			}
		}
		if n > evidenceLines {
			fmt.Fprintf(&b, "  (%d more log lines)\n", n-evidenceLines)
		}
	}
	return b.String()
}

// named lists the runs the violations name, in order: each violation's own
// run (none: a violation of no one run, a limit's, say), then the runs its
// detail names (the calls in flight beside an attempt over a limit).
func named(vs []invariant.Violation) []uuid.UUID {
	var runs []uuid.UUID
	for _, v := range vs {
		if v.RunID != uuid.Nil {
			runs = append(runs, v.RunID)
		}
		for _, m := range uuidPattern.FindAllString(v.Detail, -1) {
			if id, err := uuid.Parse(m); err == nil && id != v.RunID {
				runs = append(runs, id)
			}
		}
	}
	return runs
}

var uuidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// describeRun writes run id's row, steps and attempts.
func describeRun(ctx context.Context, pool *pgxpool.Pool, schema string, id uuid.UUID, b *strings.Builder) error {
	s := pgx.Identifier{schema}.Sanitize()
	var status string
	var epoch int64
	if err := pool.QueryRow(ctx, `SELECT status, epoch FROM `+s+`.runs WHERE id = $1`, id).Scan(&status, &epoch); err != nil {
		return err
	}
	fmt.Fprintf(b, "  run: %s, epoch %d\n", status, epoch)
	rows, err := pool.Query(ctx, `
		SELECT step, kind, activity, status, budget_from FROM `+s+`.steps WHERE run_id = $1 ORDER BY step`, id)
	if err != nil {
		return err
	}
	var step, budgetFrom int
	var kind, activity string
	if _, err := pgx.ForEachRow(rows, []any{&step, &kind, &activity, &status, &budgetFrom}, func() error {
		fmt.Fprintf(b, "  step %d: %s %s, %s, budget from %d\n", step, kind, activity, status, budgetFrom)
		return nil
	}); err != nil {
		return err
	}
	rows, err = pool.Query(ctx, `
		SELECT step, attempt, status, is_rescue, epoch, coalesce(worker, ''), started_at,
		       coalesce(to_char(ended_at AT TIME ZONE 'UTC', 'HH24:MI:SS.US'), 'still running'), coalesce(error_message, '')
		FROM `+s+`.attempts WHERE run_id = $1 ORDER BY step, attempt`, id)
	if err != nil {
		return err
	}
	var attempt int
	var rescue bool
	var worker, ended, msg string
	var started time.Time
	_, err = pgx.ForEachRow(rows, []any{&step, &attempt, &status, &rescue, &epoch, &worker, &started, &ended, &msg}, func() error {
		fmt.Fprintf(b, "  attempt %d.%d: %s, rescue %v, epoch %d, worker %s, %s to %s %s\n", step, attempt, status, rescue, epoch, worker,
			started.UTC().Format("15:04:05.000000"), ended, msg)
		return nil
	})
	return err
}
