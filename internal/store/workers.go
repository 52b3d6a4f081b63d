package store

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/record"
)

// WorkerBeat is a worker's row in the registry, as its heartbeat keeps it.
type WorkerBeat struct {
	ID          uuid.UUID // the worker process's, new at each start
	Label       string
	Host        string
	PID         int
	Version     string
	Workflows   []string
	Queues      []string
	Concurrency int
	Held        int // runs it holds now
	Interval    time.Duration
	TTL         time.Duration
	Stopped     bool   // a clean Shutdown's last beat
	Build       string // the build it runs (runtime.Config.BuildID)
}

func (b *WorkerBeat) args() []any {
	return []any{uuidArg(b.ID), b.Label, b.Host, b.PID, b.Version, b.Workflows, b.Queues, b.Concurrency, b.Held,
		b.Interval.Milliseconds(), b.TTL.Milliseconds(), b.Stopped, b.Build}
}

// The registry's upsert; its parameters start at $1 (the statement alone) or
// after Renew's three.
const upsertWorker = `
	INSERT INTO {schema}.workers AS w (id, label, host, pid, version, workflows, queues, concurrency, runs_held,
	                                   heartbeat_ms, lease_ttl_ms, stopped_at, build_id)
	VALUES ($%d::uuid, $%d, $%d, $%d, $%d, $%d::text[], $%d::text[], $%d, $%d, $%d, $%d, CASE WHEN $%d::bool THEN now() END,
	        nullif($%d::text, ''))
	ON CONFLICT (id) DO UPDATE
	SET label = EXCLUDED.label, host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version, workflows = EXCLUDED.workflows,
	    queues = EXCLUDED.queues, concurrency = EXCLUDED.concurrency, runs_held = EXCLUDED.runs_held,
	    heartbeat_ms = EXCLUDED.heartbeat_ms, lease_ttl_ms = EXCLUDED.lease_ttl_ms,
	    last_heartbeat_at = now(), stopped_at = EXCLUDED.stopped_at, build_id = EXCLUDED.build_id`

// Beat writes the worker's registry row alone: the heartbeat of a worker
// that holds no run (with runs, Renew carries it).
func (s *Store) Beat(ctx context.Context, db DB, b WorkerBeat) error {
	err := s.exec(ctx, db, planHot, s.sql(upsertSQL(1)), b.args()...)
	return s.wrap("worker heartbeat", err)
}

func upsertSQL(first int) string {
	parts := strings.Split(upsertWorker, "$%d")
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString("$" + strconv.Itoa(first+i-1))
		}
		b.WriteString(p)
	}
	return b.String()
}

// PruneWorkers deletes the registry rows of workers stopped or silent for a
// week: a starting worker calls it.
func (s *Store) PruneWorkers(ctx context.Context, db DB) error {
	err := s.exec(ctx, db, planHot, s.sql(`
		DELETE FROM {schema}.workers WHERE last_heartbeat_at < now() - interval '7 days'`))
	return s.wrap("prune the worker registry", err)
}

// Worker is record.Worker, defined there for applications and operators to read.
type Worker = record.Worker

// Workers lists the registry, live workers first, then by last heartbeat.
// With all false, only live workers.
func (s *Store) Workers(ctx context.Context, all bool) ([]Worker, error) {
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT w.id, w.label, w.host, w.pid, w.version, w.workflows, w.queues, w.concurrency, w.runs_held,
		       w.started_at, w.last_heartbeat_at, w.stopped_at, l.id IS NOT NULL, coalesce(w.build_id, '')
		FROM {schema}.workers w LEFT JOIN {schema}.live_workers l USING (id)
		WHERE $1 OR l.id IS NOT NULL
		ORDER BY l.id IS NULL, w.last_heartbeat_at DESC, w.label`), all)
	if err != nil {
		return nil, s.wrap("list workers", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Worker])
	return out, s.wrap("list workers", err)
}

// Orphans is record.Orphans, defined there for applications and operators to read.
type Orphans = record.Orphans

// OrphanedRuns lists, per workflow, queue and build, the queued runs (and
// the running ones whose lease expired) no live worker serves (the
// orphaned_runs view): for a run pinned to a build, none of that build.
func (s *Store) OrphanedRuns(ctx context.Context) ([]Orphans, error) {
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT workflow, queue, runs, oldest_created_at, build FROM {schema}.orphaned_runs ORDER BY runs DESC, workflow, queue, build`))
	if err != nil {
		return nil, s.wrap("list orphaned runs", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Orphans])
	return out, s.wrap("list orphaned runs", err)
}

// Served reports whether a live worker serves workflow on queue.
func (s *Store) Served(ctx context.Context, workflow, queue string) (bool, error) {
	var ok bool
	err := s.query(ctx, s.pool, planHot, scanOne(&ok), s.sql(`
		SELECT EXISTS (SELECT FROM {schema}.live_workers w WHERE $1 = ANY (w.workflows) AND $2 = ANY (w.queues))`),
		workflow, queue)
	return ok, s.wrap("find live workers", err)
}
