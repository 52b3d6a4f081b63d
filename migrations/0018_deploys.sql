-- Tenure schema, version 18, for safe deploys. Every activity and child
-- step records a hash of its encoded input, so that a replay that calls the
-- step with another input is told from one that calls it with the recorded
-- one (nondeterminism, named by the step, instead of a silent different
-- path); and patches are steps of a kind of their own.
--
-- input_hash is a 64-bit hash of the input's JSON value (store.InputHash:
-- the same for every encoding of one value, whatever its whitespace, the
-- order of its objects' members, its escapes or its numbers' forms),
-- written with the step (an activity's first attempt, a child's start);
-- NULL for steps of the other kinds and for steps recorded before this
-- version, which a replay does not check. Eight bytes a step, in a column
-- nothing indexes (the steps' updates stay HOT).
ALTER TABLE {schema}.steps ADD COLUMN input_hash bigint;

-- Patches (sdk.Patched): a step of kind patch, named by the patch's ID, is
-- what a run records where it took a patch's new branch. The kinds' check
-- is replaced NOT VALID: every row already holds one of the older kinds,
-- so that no scan of steps holds the table's lock meanwhile (new rows are
-- checked all the same).
ALTER TABLE {schema}.steps DROP CONSTRAINT steps_kind_check;
ALTER TABLE {schema}.steps ADD CONSTRAINT steps_kind_check
    CHECK (kind IN ('activity', 'sleep', 'signal', 'event', 'child', 'now', 'side_effect', 'patch')) NOT VALID;

-- patches: each patch of each workflow, from the first commit that recorded
-- it (written by that commit, with its step).
CREATE TABLE {schema}.patches (
    workflow          text        NOT NULL,
    patch             text        NOT NULL,
    first_recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow, patch)
);

-- patch_status: per workflow and patch, its open runs (queued or running)
-- that took it (open_with) and those that were created before it was first
-- recorded and have not taken it (open_without, the oldest's creation in
-- oldest_without): they were started by code without the patch and may
-- take its old branch (docs/deploying.md says what it cannot count). It
-- reads the steps of every open run of the workflow: an operator's view.
CREATE VIEW {schema}.patch_status AS
SELECT p.workflow, p.patch, p.first_recorded_at,
       count(*) FILTER (WHERE o.took) AS open_with,
       count(*) FILTER (WHERE NOT o.took AND o.created_at < p.first_recorded_at) AS open_without,
       min(o.created_at) FILTER (WHERE NOT o.took AND o.created_at < p.first_recorded_at) AS oldest_without
FROM {schema}.patches p
LEFT JOIN LATERAL (
    SELECT r.created_at,
           EXISTS (SELECT 1 FROM {schema}.steps s
                   WHERE s.run_id = r.id AND s.kind = 'patch' AND s.activity = p.patch) AS took
    FROM {schema}.runs r
    WHERE r.workflow = p.workflow AND r.status IN ('queued', 'running')) AS o ON true
GROUP BY p.workflow, p.patch, p.first_recorded_at;

-- Build IDs (runtime.Config.BuildID): the build of each worker (workers),
-- of the worker that first claimed each run (runs), and of the worker that
-- wrote each step (steps). A worker's writes and claims name it to the
-- planner, as the second argument, which sets tenure.build for the
-- transaction: the claim sets runs.build_id once, and every step a worker
-- inserts takes it as its default, with no statement of its own. Replaced
-- rather than overloaded, so that CALL planner('write') of a binary from
-- before resolves to it.
DROP PROCEDURE {schema}.planner(text);
CREATE PROCEDURE {schema}.planner(mode text, build text DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    was text;
BEGIN
    IF mode = 'leave' THEN
        PERFORM pg_catalog.set_config('jit', pg_catalog.current_setting('tenure.saved_jit'), true);
        RETURN;
    END IF;
    was := pg_catalog.current_setting('jit'); -- a simple expression: never compiled
    SET LOCAL jit = off;
    IF build IS NOT NULL THEN
        PERFORM pg_catalog.set_config('tenure.build', build, true);
    END IF;
    CASE mode
    WHEN 'hot' THEN
        NULL;
    WHEN 'write' THEN
        SET LOCAL enable_seqscan = off;
        SET LOCAL enable_bitmapscan = off;
        SET LOCAL plan_cache_mode = force_generic_plan;
    WHEN 'renew' THEN
        SET LOCAL plan_cache_mode = force_custom_plan;
    WHEN 'enter' THEN
        PERFORM pg_catalog.set_config('tenure.saved_jit', was, true);
    ELSE
        RAISE EXCEPTION 'planner: unknown mode %', mode USING ERRCODE = '22023';
    END CASE;
END
$$;

ALTER TABLE {schema}.workers ADD COLUMN build_id text;
ALTER TABLE {schema}.runs ADD COLUMN build_id text;
ALTER TABLE {schema}.steps ADD COLUMN build_id text
    DEFAULT nullif(pg_catalog.current_setting('tenure.build', true), '');

-- _requeue (version 5) reset the failure's step whatever its status, to
-- give it a fresh budget. A nondeterminism failure names the step whose
-- replay differed, which had completed, or failed and been handled by the
-- workflow: reset, it ran again after the requeue, its effect twice. Now a
-- nondeterminism failure resets no step (the run replays as it was
-- recorded, under the fixed code), and no completed step is ever reset; a
-- step that gave up is reset as before.
CREATE OR REPLACE FUNCTION {schema}._requeue(ids uuid[])
RETURNS TABLE (run_id uuid, queue text, requeues integer)
LANGUAGE sql VOLATILE AS $$
    WITH r AS (
        UPDATE {schema}.runs
        SET status = 'queued', run_after = now(), requeues = requeues + 1, reclaims = 0,
            error_message = NULL, output = NULL, finished_at = NULL, updated_at = now()
        WHERE id = ANY (ids) AND status = 'failed'
        RETURNING id, queue, requeues),
    f AS (
        UPDATE {schema}.failures f
        SET requeued_at = now(), requeue_count = r.requeues
        FROM r
        WHERE f.run_id = r.id AND f.requeued_at IS NULL
        RETURNING f.run_id, f.step, f.reason),
    st AS (
        UPDATE {schema}.steps s
        SET status = 'running', reason = NULL, error_message = NULL, error_type = NULL, error_value = NULL,
            finished_at = NULL,
            budget_from = (SELECT coalesce(max(a.attempt), 0) FROM {schema}.attempts a
                           WHERE a.run_id = s.run_id AND a.step = s.step)
        FROM f
        WHERE s.run_id = f.run_id AND s.step = f.step AND s.status <> 'completed' AND f.reason <> 'nondeterminism'),
    ch AS (
        UPDATE {schema}.steps s
        SET status = 'waiting', reason = NULL, error_message = NULL, error_type = NULL, finished_at = NULL
        FROM r
        WHERE s.run_id = r.id AND s.kind = 'child' AND s.status = 'failed')
    -- Identical notifications in one transaction are delivered once: one per queue.
    SELECT r.id, r.queue, r.requeues
    FROM r, LATERAL pg_catalog.pg_notify({schema}.runs_channel(), r.queue) AS notified
$$;
