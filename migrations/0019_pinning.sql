-- Tenure schema, version 19: pinned workflows (sdk.WithPinning). A run of a
-- pinned workflow is pinned, at its first claim, to the build of the worker
-- that claimed it (runtime.Config.BuildID), and from then on is claimed only
-- by workers of that build: a deploy of another build leaves it to the old
-- workers, and never replays it under code it did not start with. A run
-- nobody can claim is named with its build (orphaned_runs, a worker's
-- warning), and move_runs moves runs to another build on purpose, audited.
--
-- pinned_to is the build a run is pinned to, '' for none (every run of a
-- workflow that is not pinned, and every run before its first claim). It is
-- NOT NULL with a constant default, so adding it rewrites nothing, and ''
-- rather than NULL so that the claim's indexes can hold it in their keys
-- and a claim reads its unpinned runs by equality, in order, as before.
ALTER TABLE {schema}.runs
    ADD COLUMN pinned_to text NOT NULL DEFAULT '',
    ADD CONSTRAINT runs_pinned_to_check
        CHECK (pinned_to = '' OR pinned_to ~ '^[A-Za-z0-9][A-Za-z0-9._+:-]{0,63}$') NOT VALID;

-- The claim reads, per queue and workflow, the unpinned runs and those
-- pinned to its worker's build, each range in its order: pinned_to is a key
-- column after the pair (versions 3 and 17 had the pair, then the order).
-- Adding the column locks the runs table against reads and writes until
-- the migration commits, and rebuilding these indexes reads the whole
-- table meanwhile (docs/operations.md): 0.46 s for the whole migration on a
-- million finished runs in memory.
DROP INDEX {schema}.runs_claim_idx;
CREATE INDEX runs_claim_idx ON {schema}.runs (queue, workflow, pinned_to, priority DESC, run_after)
    WHERE status = 'queued' AND (fair_vt IS NULL OR started_at IS NOT NULL);
DROP INDEX {schema}.runs_lease_idx;
CREATE INDEX runs_lease_idx ON {schema}.runs (queue, workflow, pinned_to, lease_expires_at)
    WHERE status = 'running';

-- The pinned runs that can still run, by build: what move_runs moves and a
-- worker's check for runs pinned to a build nobody runs reads (a range per
-- build, workflow, queue and status). Only pinned runs have an entry (none
-- for a schema without a pinned workflow), and their updates change an
-- indexed column already (status), so no update that was HOT stops being so.
CREATE INDEX runs_pinned_idx ON {schema}.runs (pinned_to, workflow, queue, status)
    WHERE pinned_to <> '' AND status IN ('queued', 'running', 'failed');

-- live_workers (version 6) gains the workers' build (version 18), at the
-- end: the view's columns were fixed when it was made.
CREATE OR REPLACE VIEW {schema}.live_workers AS
SELECT w.id, w.label, w.host, w.pid, w.version, w.workflows, w.queues, w.concurrency, w.runs_held,
       w.heartbeat_ms, w.lease_ttl_ms, w.started_at, w.last_heartbeat_at, w.stopped_at,
       now() - w.last_heartbeat_at AS since_heartbeat, w.build_id
FROM {schema}.workers w
WHERE w.stopped_at IS NULL
  AND w.last_heartbeat_at > now() - greatest(3 * w.heartbeat_ms, w.lease_ttl_ms) * interval '1 millisecond';

-- orphaned_runs (versions 6 and 17): the queued runs no live worker serves,
-- and now also the running ones whose lease expired with none to reclaim
-- them (their worker died), per workflow, queue and build: a run pinned to
-- a build is served only by a live worker of that build (build, '' for
-- unpinned runs: a column added at the end, as a view can be replaced).
CREATE OR REPLACE VIEW {schema}.orphaned_runs AS
SELECT r.workflow, r.queue, count(*) AS runs, min(r.created_at) AS oldest_created_at, min(r.run_after) AS first_due_at,
       r.pinned_to AS build
FROM (SELECT workflow, queue, pinned_to, created_at, run_after FROM {schema}.runs
      WHERE status = 'queued' AND (fair_vt IS NULL OR started_at IS NOT NULL)
      UNION ALL
      SELECT workflow, queue, pinned_to, created_at, run_after FROM {schema}.runs
      WHERE status = 'queued' AND fair_vt IS NOT NULL AND started_at IS NULL
      UNION ALL
      SELECT workflow, queue, pinned_to, created_at, lease_expires_at FROM {schema}.runs
      WHERE status = 'running' AND lease_expires_at < now()) AS r
WHERE NOT EXISTS (SELECT FROM {schema}.live_workers w
                  WHERE r.workflow = ANY (w.workflows) AND r.queue = ANY (w.queues)
                    AND (r.pinned_to = '' OR w.build_id = r.pinned_to))
GROUP BY r.workflow, r.queue, r.pinned_to;

-- _allow_audit_action adds action to those the audit log's constraint
-- allows, read back from the constraint (as migrations 14 and 16 did
-- inline): the one way later migrations add theirs.
CREATE FUNCTION {schema}._allow_audit_action(action text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    actions text[];
BEGIN
    SELECT array_agg(m.v[1] ORDER BY m.n) INTO actions
    FROM pg_catalog.pg_constraint c,
         regexp_matches(pg_catalog.pg_get_constraintdef(c.oid), '''([^'']*)''::text', 'g') WITH ORDINALITY AS m(v, n)
    WHERE c.conrelid = '{schema}.audit_log'::regclass AND c.conname = 'audit_log_action_check';
    IF actions IS NULL THEN
        RAISE EXCEPTION 'audit_log_action_check lists no action';
    END IF;
    IF action = ANY (actions) THEN
        RETURN;
    END IF;
    EXECUTE format('ALTER TABLE {schema}.audit_log DROP CONSTRAINT audit_log_action_check, '
                   'ADD CONSTRAINT audit_log_action_check CHECK (action IN (%s))',
                   (SELECT string_agg(quote_literal(a), ', ') FROM unnest(actions || ARRAY[action]) AS a));
END
$$;

-- The audit log's actions gain 'move' (move_runs).
SELECT {schema}._allow_audit_action('move');

-- move_runs moves the runs pinned to build from_build that can still run
-- (queued, running or failed: a failed one requeued later is claimed by its
-- new build) to build to_build, or unpins them when to_build is '' (any
-- worker of the workflow claims them), optionally only those of one
-- workflow, and at most max_runs of them when it is given (in the order of
-- their IDs; call again until it moves nothing). It returns, per workflow,
-- queue and status, how many it moved. With dry_run it changes nothing and
-- returns what it would move (all of them); otherwise it writes one
-- audit_log row (action 'move', the builds and the workflow in filter, the
-- runs in run_ids, note) and wakes the idle workers of the queues of the
-- queued runs it moved. A running run keeps its lease: its worker goes on,
-- and the run is claimed by the new build from its next claim on. The runs
-- moved are locked until the transaction ends; those locked by a claim or
-- a commit in flight are passed over (SKIP LOCKED): moved by the next call.
CREATE FUNCTION {schema}.move_runs(
    from_build  text,
    to_build    text,
    of_workflow text DEFAULT NULL,
    dry_run     boolean DEFAULT false,
    note        text DEFAULT NULL,
    max_runs    integer DEFAULT NULL)
RETURNS TABLE (workflow text, queue text, status text, runs bigint)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    ids uuid[];
    wfs text[];
    qs  text[];
    sts text[];
BEGIN
    IF from_build IS NULL OR from_build = '' THEN
        RAISE EXCEPTION 'move_runs: from_build must name a build' USING ERRCODE = '22023';
    END IF;
    IF to_build IS NULL THEN
        RAISE EXCEPTION 'move_runs: to_build must name a build, or be empty to unpin' USING ERRCODE = '22023';
    END IF;
    IF to_build = from_build THEN
        RAISE EXCEPTION 'move_runs: the runs are pinned to % already', from_build USING ERRCODE = '22023';
    END IF;
    IF to_build <> '' AND to_build !~ '^[A-Za-z0-9][A-Za-z0-9._+:-]{0,63}$' THEN
        RAISE EXCEPTION 'move_runs: invalid build ID %', to_build USING ERRCODE = '22023';
    END IF;
    IF dry_run IS NULL THEN
        RAISE EXCEPTION 'move_runs: dry_run must be true or false' USING ERRCODE = '22023';
    END IF;
    IF max_runs IS NOT NULL AND max_runs < 1 THEN
        RAISE EXCEPTION 'move_runs: max_runs must be at least 1' USING ERRCODE = '22023';
    END IF;
    IF dry_run THEN
        RETURN QUERY
        SELECT r.workflow, r.queue, r.status, count(*)
        FROM {schema}.runs r
        WHERE r.pinned_to <> '' AND r.pinned_to = from_build AND r.status IN ('queued', 'running', 'failed') -- runs_pinned_idx
          AND (of_workflow IS NULL OR r.workflow = of_workflow)
        GROUP BY r.workflow, r.queue, r.status
        ORDER BY r.workflow, r.queue, r.status;
        RETURN;
    END IF;
    WITH c AS (
        SELECT r.id FROM {schema}.runs r
        WHERE r.pinned_to <> '' AND r.pinned_to = from_build AND r.status IN ('queued', 'running', 'failed') -- runs_pinned_idx
          AND (of_workflow IS NULL OR r.workflow = of_workflow)
        ORDER BY r.id
        LIMIT max_runs
        FOR UPDATE SKIP LOCKED),
    m AS (
        UPDATE {schema}.runs r
        SET pinned_to = to_build, updated_at = now()
        FROM c
        WHERE r.id = c.id
        RETURNING r.id, r.workflow, r.queue, r.status)
    SELECT array_agg(m.id), array_agg(m.workflow), array_agg(m.queue), array_agg(m.status)
    INTO ids, wfs, qs, sts
    FROM m;
    IF ids IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO {schema}.audit_log (action, runs, filter, run_ids, note)
    VALUES ('move', cardinality(ids),
            jsonb_strip_nulls(jsonb_build_object('from_build', from_build, 'to_build', to_build,
                                                 'workflow', of_workflow)),
            ids, move_runs.note);
    -- Identical notifications in one transaction are delivered once: one per queue.
    PERFORM pg_catalog.pg_notify({schema}.runs_channel(), x.q)
    FROM unnest(qs, sts) AS x(q, st) WHERE x.st = 'queued';
    RETURN QUERY
    SELECT x.w, x.q, x.st, count(*)
    FROM unnest(wfs, qs, sts) AS x(w, q, st)
    GROUP BY x.w, x.q, x.st
    ORDER BY x.w, x.q, x.st;
END
$$;
