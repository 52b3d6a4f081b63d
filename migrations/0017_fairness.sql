-- Tenure schema, version 17: fair queues. A run started with a fairness key
-- (sdk.WithFairness) is claimed in the order of a virtual time, so that
-- keys sharing a queue share its throughput by their weights: a tenant that
-- enqueued 20,000 runs does not make one that enqueues 200 after it wait
-- for all of them. This is start-time fair queueing:
--
--   * each queue has a virtual clock (fair_queues.vt): the greatest virtual
--     time of the fair runs claimed on it (a worker's claim batch advances
--     it to what its previous claim took, so that the claim statement
--     writes nothing but the runs it takes);
--   * each key of a queue has the virtual time of its last run started
--     (fair_keys.last_vt);
--   * a run started with key k and weight w gets
--     fair_vt = greatest(last_vt of k, the queue's clock) + 1,000,000 / w,
--     and becomes k's last_vt. A key with no backlog starts at the queue's
--     clock; a key with 20,000 runs queued is 20,000 strides ahead, and
--     each newcomer's runs come first until it catches up.
--
-- Fairness orders the start of new work only: a run that ran before (a
-- retry released with a delay, a sleep or a signal wait that ended, a
-- requeue, a hand-off at shutdown) keeps its fair_vt and is claimed as any
-- run is, by priority and due time, since it was admitted in its turn
-- already. So the fresh fair runs are the only rows that move from the
-- claim's index to one of their own, ordered by virtual time; the claim
-- reads both, and a worker whose queues hold no fair run reads one empty
-- index range more than before.
--
-- Building the indexes reads the runs table, and adding the columns locks
-- it (reads and writes wait) until the migration commits: seconds per
-- million runs. The new columns have no default (nothing is rewritten) and
-- their check is NOT VALID: existing runs, keyless, satisfy it unread.

ALTER TABLE {schema}.runs
    ADD COLUMN fair_key text,
    ADD COLUMN fair_vt bigint,
    ADD CONSTRAINT runs_fair_check CHECK ((fair_key IS NULL) = (fair_vt IS NULL)) NOT VALID;

-- The virtual time of each key's last run started, per queue. Inserts of
-- one key lock its row for the rest of their transaction: a StartTx of a
-- key holds up other Starts of that key (not of other keys) until it ends.
CREATE TABLE {schema}.fair_keys (
    queue   text   NOT NULL,
    key     text   NOT NULL CHECK (key <> '' AND octet_length(key) <= 200),
    last_vt bigint NOT NULL,
    PRIMARY KEY (queue, key)
);

-- Each queue's virtual clock: the greatest fair_vt claimed on it, behind by
-- at most the last claim of each worker (the next one's batch advances it);
-- a Start reads it.
CREATE TABLE {schema}.fair_queues (
    queue text   PRIMARY KEY,
    vt    bigint NOT NULL DEFAULT 0
);

-- Queued runs the claim takes by priority and due time: every queued run
-- but the fresh fair ones (version 3's index, less those).
DROP INDEX {schema}.runs_claim_idx;
CREATE INDEX runs_claim_idx ON {schema}.runs (queue, workflow, priority DESC, run_after)
    WHERE status = 'queued' AND (fair_vt IS NULL OR started_at IS NOT NULL);

-- Fresh fair runs, taken by priority and virtual time.
CREATE INDEX runs_fair_idx ON {schema}.runs (queue, workflow, priority DESC, fair_vt)
    WHERE status = 'queued' AND fair_vt IS NOT NULL AND started_at IS NULL;

-- orphaned_runs (version 6) reads the queued runs through both indexes.
CREATE OR REPLACE VIEW {schema}.orphaned_runs AS
SELECT r.workflow, r.queue, count(*) AS runs, min(r.created_at) AS oldest_created_at, min(r.run_after) AS first_due_at
FROM (SELECT workflow, queue, created_at, run_after FROM {schema}.runs
      WHERE status = 'queued' AND (fair_vt IS NULL OR started_at IS NOT NULL)
      UNION ALL
      SELECT workflow, queue, created_at, run_after FROM {schema}.runs
      WHERE status = 'queued' AND fair_vt IS NOT NULL AND started_at IS NULL) AS r
WHERE NOT EXISTS (SELECT FROM {schema}.live_workers w WHERE r.workflow = ANY (w.workflows) AND r.queue = ANY (w.queues))
GROUP BY r.workflow, r.queue;

-- fair_share: per queue and key, the fair runs queued and not yet started,
-- and how far the key is ahead of its queue's clock, in strides of weight 1
-- (1,000,000 each): about how many runs of weight 1 a newcomer may start
-- before this key's next one is claimed. It reads every fresh fair run: for
-- dashboards, not for every request.
CREATE VIEW {schema}.fair_share AS
SELECT k.queue, k.key, coalesce(c.queued, 0) AS queued,
       greatest(k.last_vt - coalesce(q.vt, 0), 0) / 1000000.0 AS ahead
FROM {schema}.fair_keys k
LEFT JOIN {schema}.fair_queues q ON q.queue = k.queue
LEFT JOIN (SELECT r.queue, r.fair_key, count(*) AS queued FROM {schema}.runs r
           WHERE r.status = 'queued' AND r.fair_vt IS NOT NULL AND r.started_at IS NULL
           GROUP BY r.queue, r.fair_key) AS c ON c.queue = k.queue AND c.fair_key = k.key;
