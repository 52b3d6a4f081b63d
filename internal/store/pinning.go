package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/record"
)

// Pin names the workflows this store's claims pin (sdk.WithPinning, schema
// version 19): a run of one of them is pinned, at its first claim, to the
// store's build (WithBuild), and from then on only claims of a store of that
// build take it, whether or not they pin the workflow themselves. Without a
// build it pins nothing. Call it before the first claim; later calls replace
// the list for the claims that follow.
func (s *Store) Pin(workflows []string) {
	w := slices.Clone(workflows)
	if w == nil {
		w = []string{}
	}
	s.pinned.Store(&w)
}

// pinnedOf is the workflows the claim pins ($6 of sqlClaim): never nil.
func (s *Store) pinnedOf() []string {
	if p := s.pinned.Load(); p != nil && s.build != "" {
		return *p
	}
	return []string{}
}

// Stranded is the runs of one workflow and queue pinned to a build no live
// worker serving them runs (Store.Stranded).
type Stranded struct {
	Workflow string
	Queue    string
	Build    string
	// Runs counts them, up to strandedCount (a lower bound beyond it).
	Runs int
}

// strandedCount bounds the runs Stranded counts per build.
const strandedCount = 10000

// Stranded lists, for the workflows and queues given, the runs waiting to
// be claimed or running (not the failed ones) pinned to a build that no
// live worker serving their workflow and queue runs, per workflow, queue
// and build. It finds the builds by a skip scan of runs_pinned_idx, one
// descent per build of the open pinned runs, and reads the runs of the
// builds no live worker runs only, up to strandedCount each: its cost does
// not grow with the runs that are served.
func (s *Store) Stranded(ctx context.Context, db DB, workflows, queues []string) ([]Stranded, error) {
	var out []Stranded
	err := s.query(ctx, db, planHot, func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Stranded])
		return err
	}, s.sql(sqlStranded), workflows, queues, strandedCount)
	return out, s.wrap("find runs pinned to builds nobody runs", err)
}

// sqlStranded is Stranded's statement.
const sqlStranded = `
	WITH RECURSIVE builds AS (
		SELECT (SELECT r.pinned_to FROM {schema}.runs r
		        WHERE r.pinned_to <> '' AND r.pinned_to > '' AND r.status IN ('queued', 'running', 'failed')
		        ORDER BY r.pinned_to LIMIT 1) AS build
		UNION ALL
		SELECT (SELECT r.pinned_to FROM {schema}.runs r
		        WHERE r.pinned_to <> '' AND r.pinned_to > b.build AND r.status IN ('queued', 'running', 'failed')
		        ORDER BY r.pinned_to LIMIT 1)
		FROM builds b WHERE b.build IS NOT NULL),
	-- The builds no live worker runs, before any of their runs is read.
	gone AS MATERIALIZED (
		SELECT b.build FROM builds b
		WHERE b.build IS NOT NULL
		  AND NOT EXISTS (SELECT FROM {schema}.live_workers w WHERE w.build_id = b.build)),
	runs AS (
		SELECT b.build, x.workflow, x.queue
		FROM gone b
		CROSS JOIN LATERAL (
			SELECT r.workflow, r.queue FROM {schema}.runs r
			WHERE r.pinned_to <> '' AND r.pinned_to = b.build AND r.status IN ('queued', 'running') -- runs_pinned_idx
			  AND r.workflow = ANY ($1::text[]) AND r.queue = ANY ($2::text[])
			LIMIT $3) AS x)
	SELECT r.workflow, r.queue, r.build, count(*)::int
	FROM runs r
	WHERE NOT EXISTS (SELECT FROM {schema}.live_workers w
	                  WHERE w.build_id = r.build AND r.workflow = ANY (w.workflows) AND r.queue = ANY (w.queues))
	GROUP BY r.workflow, r.queue, r.build
	ORDER BY r.workflow, r.queue, r.build`

// MoveFilter selects the runs MoveRuns moves.
type MoveFilter struct {
	// From is the build the runs are pinned to; required.
	From string
	// To is the build they are pinned to after; "" unpins them.
	To string
	// Workflow, when set, keeps the runs of that workflow.
	Workflow string
}

// Moved is record.MovedRuns, defined there for applications and operators to read.
type Moved = record.MovedRuns

// ErrSameBuild is returned by MoveRuns asked to move runs to the build they
// are pinned to.
var ErrSameBuild = errors.New("tenure: the runs are pinned to that build already")

// MoveRuns moves the runs pinned to f.From that can still run to f.To (the
// SQL function move_runs): one audit_log row with note, unless dryRun, which
// changes nothing and reports what would move.
func (s *Store) MoveRuns(ctx context.Context, f MoveFilter, dryRun bool, note string) ([]Moved, error) {
	if err := ValidateBuildID(f.From); err != nil {
		return nil, fmt.Errorf("move runs: from: %w", err)
	}
	if f.To != "" {
		if err := ValidateBuildID(f.To); err != nil {
			return nil, fmt.Errorf("move runs: to: %w", err)
		}
	}
	if f.To == f.From {
		return nil, fmt.Errorf("move runs from %s: %w", f.From, ErrSameBuild)
	}
	if err := s.Check(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT workflow, queue, status, runs
		FROM {schema}.move_runs(from_build => $1, to_build => $2, of_workflow => nullif($3, ''), dry_run => $4, note => nullif($5, ''))`),
		f.From, f.To, f.Workflow, dryRun, note)
	if err != nil {
		return nil, s.wrap("move runs", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Moved])
	return out, s.wrap("move runs", err)
}
