package store

import (
	"cmp"
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
	// Workflow, Queue and Build say which runs: those of Workflow on
	// Queue pinned to Build.
	Workflow string
	Queue    string
	Build    string
	// Runs counts them, up to strandedCount (a lower bound beyond it).
	Runs int
}

// strandedCount bounds the runs Stranded counts per workflow, queue and build.
const strandedCount = 10000

// Stranded lists, for the workflows and queues given, the runs waiting to
// be claimed or running (not the failed ones) pinned to a build of which no
// live worker serves their workflow and queue, per workflow, queue and
// build. It finds the builds by a skip scan of runs_pinned_idx (one descent
// per build with a pinned run that can still run), drops the pairs a live
// worker of the build serves, and counts each remaining build, workflow and
// queue's runs through its ranges of runs_pinned_idx, up to strandedCount:
// its cost grows with the builds and the runs nobody serves, not with the
// runs that are served or the history. Sent with the commit's planner
// settings (generic plans, no sequential scan), so that a plan made once
// stays one of lookups, whatever the statistics.
func (s *Store) Stranded(ctx context.Context, db DB, workflows, queues []string) ([]Stranded, error) {
	var out []Stranded
	err := s.query(ctx, db, planWrite, func(rows pgx.Rows) error {
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
	pairs AS (
		SELECT DISTINCT w.name AS workflow, q.name AS queue
		FROM unnest($1::text[]) AS w(name), unnest($2::text[]) AS q(name)),
	-- The builds and pairs no live worker of the build serves, before any
	-- of their runs is read.
	unserved AS MATERIALIZED (
		SELECT b.build, p.workflow, p.queue
		FROM builds b, pairs p
		WHERE b.build IS NOT NULL
		  AND NOT EXISTS (SELECT FROM {schema}.live_workers w
		                  WHERE w.build_id = b.build AND p.workflow = ANY (w.workflows) AND p.queue = ANY (w.queues)))
	SELECT u.workflow, u.queue, u.build, c.n
	FROM unserved u
	CROSS JOIN LATERAL (
		SELECT count(*)::int AS n FROM (
			-- A range of runs_pinned_idx's key, as a row comparison that
			-- no other index can serve: runs_workflow_status_idx looked
			-- cheaper to a generic plan, and read every run of the
			-- workflow that can still run, served or not.
			SELECT 1 FROM {schema}.runs r
			WHERE (r.pinned_to, r.workflow, r.queue, r.status) >= (u.build, u.workflow, u.queue, 'queued')
			  AND (r.pinned_to, r.workflow, r.queue, r.status) <= (u.build, u.workflow, u.queue, 'running')
			  AND r.pinned_to <> '' AND r.status IN ('queued', 'running') -- runs_pinned_idx's predicate
			LIMIT $3) AS x) AS c
	WHERE c.n > 0
	ORDER BY u.workflow, u.queue, u.build`

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

// MoveOptions says how MoveRuns runs.
type MoveOptions struct {
	// DryRun changes nothing and reports what would move.
	DryRun bool
	// Note is recorded in the audit_log row(s); "" for none.
	Note string
	// BatchSize, when positive, moves at most this many runs per statement
	// (and audit row), so that a large move holds its runs' locks briefly;
	// 0 moves all in one.
	BatchSize int
}

// MoveRuns moves the runs pinned to f.From that can still run to f.To (the
// SQL function move_runs), in batches of o.BatchSize, one audit_log row per
// batch with o.Note, until a batch moves nothing; or, with o.DryRun,
// changes nothing and reports what would move. It returns the runs moved
// per workflow, queue and status.
func (s *Store) MoveRuns(ctx context.Context, f MoveFilter, o MoveOptions) ([]Moved, error) {
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
	if o.BatchSize < 0 {
		return nil, fmt.Errorf("move runs: batch size %d: want 0 (all at once) or more", o.BatchSize)
	}
	if err := s.Check(ctx); err != nil {
		return nil, err
	}
	var max *int
	if o.BatchSize > 0 && !o.DryRun {
		max = &o.BatchSize
	}
	total := map[[3]string]int64{}
	for {
		rows, err := s.pool.Query(ctx, s.sql(`
			SELECT workflow, queue, status, runs
			FROM {schema}.move_runs(from_build => $1, to_build => $2, of_workflow => nullif($3, ''), dry_run => $4,
			                        note => nullif($5, ''), max_runs => $6::integer)`),
			f.From, f.To, f.Workflow, o.DryRun, o.Note, max)
		if err != nil {
			return nil, s.wrap("move runs", err)
		}
		batch, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Moved])
		if err != nil {
			return nil, s.wrap("move runs", err)
		}
		for _, m := range batch {
			total[[3]string{m.Workflow, m.Queue, string(m.Status)}] += m.Runs
		}
		if max == nil || len(batch) == 0 {
			break
		}
	}
	out := make([]Moved, 0, len(total))
	for k, n := range total {
		out = append(out, Moved{Workflow: k[0], Queue: k[1], Status: record.RunStatus(k[2]), Runs: n})
	}
	slices.SortFunc(out, func(a, b Moved) int {
		return cmp.Or(cmp.Compare(a.Workflow, b.Workflow), cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Status, b.Status))
	})
	return out, nil
}
