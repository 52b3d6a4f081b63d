-- Tenure schema, version 6: the worker registry.
--
-- Each worker keeps its row with its heartbeat, in the heartbeat's own
-- statement (no extra statement per interval): who it is, what it serves,
-- how much it runs. A run queued for a workflow or a queue that no live
-- worker serves waits forever; orphaned_runs names them.

CREATE TABLE {schema}.workers (
    -- One row per worker process (its ID is new at each start); labels,
    -- which people choose, need not be unique.
    id                uuid        PRIMARY KEY,
    label             text        NOT NULL,
    host              text        NOT NULL,
    pid               integer     NOT NULL,
    version           text        NOT NULL,
    workflows         text[]      NOT NULL,
    queues            text[]      NOT NULL,
    concurrency       integer     NOT NULL,
    runs_held         integer     NOT NULL DEFAULT 0,
    -- The worker's heartbeat interval and lease TTL: a worker whose last
    -- heartbeat is older than both, three intervals, is not live.
    heartbeat_ms      bigint      NOT NULL,
    lease_ttl_ms      bigint      NOT NULL,
    started_at        timestamptz NOT NULL DEFAULT now(),
    last_heartbeat_at timestamptz NOT NULL DEFAULT now(),
    -- Set by a clean Shutdown; NULL while it runs (or after it died).
    stopped_at        timestamptz
);

-- Pruning: a starting worker removes the rows of workers stopped or silent
-- for a week.
CREATE INDEX workers_last_heartbeat_idx ON {schema}.workers (last_heartbeat_at);

-- live_workers: the workers that beat recently and did not stop.
CREATE VIEW {schema}.live_workers AS
SELECT w.*, now() - w.last_heartbeat_at AS since_heartbeat
FROM {schema}.workers w
WHERE w.stopped_at IS NULL
  AND w.last_heartbeat_at > now() - greatest(3 * w.heartbeat_ms, w.lease_ttl_ms) * interval '1 millisecond';

-- orphaned_runs: per workflow and queue, the queued runs that no live worker
-- serves (none registered the workflow and serves the queue), how many and
-- since when. It reads every queued run (waiting ones too), through the
-- partial index of queued runs: for dashboards and alerts, not for every
-- request.
CREATE VIEW {schema}.orphaned_runs AS
SELECT r.workflow, r.queue, count(*) AS runs, min(r.created_at) AS oldest_created_at, min(r.run_after) AS first_due_at
FROM {schema}.runs r
WHERE r.status = 'queued'
  AND NOT EXISTS (SELECT FROM {schema}.live_workers w WHERE r.workflow = ANY (w.workflows) AND r.queue = ANY (w.queues))
GROUP BY r.workflow, r.queue;
