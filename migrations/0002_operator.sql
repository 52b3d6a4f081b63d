-- Tenure schema, version 2: the operator surface.
--
-- Views that answer the questions of an on-call engineer (what failed, why,
-- since when, what is in flight and on which worker), functions that put
-- failed runs back (one, or by filter with a dry run) and apply retention,
-- and the audit log in which every requeue and every deletion is counted.
--
-- The functions are SECURITY INVOKER (the default): they can do no more than
-- the role that calls them. docs/sql.md is their reference.

-- The audit log: one row per requeue and per retention run. Never written by
-- workers; never deleted by Tenure.
CREATE TABLE {schema}.audit_log (
    id       bigserial   PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now(),
    -- The database role that acted.
    actor    text        NOT NULL DEFAULT current_user,
    action   text        NOT NULL CHECK (action IN ('requeue', 'purge_completed', 'purge_failures')),
    -- Runs requeued or deleted.
    runs     bigint      NOT NULL,
    -- Failure rows deleted with their runs (purges); 0 for requeues.
    failures bigint      NOT NULL DEFAULT 0,
    -- The filter used, as given (absent keys: not filtered on).
    filter   jsonb       NOT NULL DEFAULT '{}',
    -- The runs a requeue put back, so that it can be traced run by run.
    run_ids  uuid[],
    note     text
);

CREATE INDEX audit_log_at_idx ON {schema}.audit_log (at);

-- runs_channel is the LISTEN/NOTIFY channel on which workers of this schema
-- wait for runs: '<schema>_runs', as store.Store.RunsChannel names it. The
-- schema name is read from the catalog, so the function needs no argument.
CREATE FUNCTION {schema}.runs_channel() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT n.nspname || '_runs' FROM pg_catalog.pg_namespace n WHERE n.oid = '{schema}'::regnamespace
$$;

-- _requeue is the one implementation of requeue, used by requeue_run,
-- requeue_failures and store.RequeueRun. For each run among ids that is
-- failed: the run goes back to queued (due now, requeues + 1, backstop reclaim
-- count reset), its open failure row is marked requeued (time and count, kept
-- as history), the failed step gets a fresh budget (budget_from = its last
-- attempt, so earlier attempts no longer count) and runs again, and idle
-- workers of the run's queue are woken. Runs that are not failed are left
-- alone and not returned. It writes no audit row: its callers do.
CREATE FUNCTION {schema}._requeue(ids uuid[])
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
        RETURNING f.run_id, f.step),
    st AS (
        UPDATE {schema}.steps s
        SET status = 'running', reason = NULL, error_message = NULL, error_type = NULL, finished_at = NULL,
            budget_from = (SELECT coalesce(max(a.attempt), 0) FROM {schema}.attempts a
                           WHERE a.run_id = s.run_id AND a.step = s.step)
        FROM f
        WHERE s.run_id = f.run_id AND s.step = f.step)
    -- Identical notifications in one transaction are delivered once: one per queue.
    SELECT r.id, r.queue, r.requeues
    FROM r, LATERAL pg_catalog.pg_notify({schema}.runs_channel(), r.queue) AS notified
$$;

-- requeue_run puts one failed run back in the queue (see _requeue) and
-- writes an audit row. It returns how many times the run has now been
-- requeued. A run that does not exist raises no_data_found (P0002); a run
-- that is not failed raises object_not_in_prerequisite_state (55000).
CREATE FUNCTION {schema}.requeue_run(run uuid, note text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n  integer;
    st text;
BEGIN
    SELECT q.requeues INTO n FROM {schema}._requeue(ARRAY[run]) q;
    IF NOT FOUND THEN
        SELECT r.status INTO st FROM {schema}.runs r WHERE r.id = run;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'run % not found', run USING ERRCODE = 'no_data_found';
        END IF;
        RAISE EXCEPTION 'run % is %, not failed', run, st
            USING ERRCODE = 'object_not_in_prerequisite_state', HINT = 'Only failed runs can be requeued.';
    END IF;
    INSERT INTO {schema}.audit_log (action, runs, filter, run_ids, note)
    VALUES ('requeue', 1, jsonb_build_object('run_id', run), ARRAY[run], requeue_run.note);
    RETURN n;
END
$$;

-- One open failure chosen by requeue_failures, and whether it was requeued.
CREATE TYPE {schema}.requeue_candidate AS (
    run_id        uuid,
    workflow      text,
    step          integer,
    activity      text,
    reason        text,
    failed_at     timestamptz,
    error_message text,
    requeued      boolean
);

-- requeue_failures requeues the runs whose open failure matches every filter
-- given (workflow, activity, reason, failed at or after since, before until),
-- oldest failure first, at most max_runs of them when max_runs is given. At
-- least one filter is required; since => '-infinity' matches everything.
-- With dry_run it changes nothing and returns what it would requeue
-- (requeued = false). Otherwise it writes one audit row (filter, count, note)
-- and returns the runs it chose, requeued = true for those it put back (a
-- run requeued meanwhile by someone else is returned with false).
CREATE FUNCTION {schema}.requeue_failures(
    workflow text DEFAULT NULL,
    activity text DEFAULT NULL,
    reason   text DEFAULT NULL,
    since    timestamptz DEFAULT NULL,
    until    timestamptz DEFAULT NULL,
    dry_run  boolean DEFAULT false,
    note     text DEFAULT NULL,
    max_runs integer DEFAULT NULL)
RETURNS SETOF {schema}.requeue_candidate
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    chosen {schema}.requeue_candidate[];
    done   uuid[];
BEGIN
    IF requeue_failures.workflow IS NULL AND requeue_failures.activity IS NULL AND requeue_failures.reason IS NULL
       AND requeue_failures.since IS NULL AND requeue_failures.until IS NULL THEN
        RAISE EXCEPTION 'requeue_failures: give at least one filter (workflow, activity, reason, since, until)'
            USING ERRCODE = 'invalid_parameter_value', HINT = 'To requeue every open failure, pass since => ''-infinity''.';
    END IF;
    IF requeue_failures.max_runs IS NOT NULL AND requeue_failures.max_runs < 1 THEN
        RAISE EXCEPTION 'requeue_failures: max_runs must be at least 1, got %', requeue_failures.max_runs
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    SELECT coalesce(array_agg(ROW(c.run_id, c.workflow, c.step, c.activity, c.reason, c.failed_at,
                                  c.error_message, false)::{schema}.requeue_candidate
                              ORDER BY c.failed_at, c.id), '{}')
    INTO chosen
    FROM (
        SELECT f.id, f.run_id, f.workflow, f.step, f.activity, f.reason, f.failed_at, f.error_message
        FROM {schema}.failures f
        WHERE f.requeued_at IS NULL
          AND (requeue_failures.workflow IS NULL OR f.workflow = requeue_failures.workflow)
          AND (requeue_failures.activity IS NULL OR f.activity = requeue_failures.activity)
          AND (requeue_failures.reason IS NULL OR f.reason = requeue_failures.reason)
          AND (requeue_failures.since IS NULL OR f.failed_at >= requeue_failures.since)
          AND (requeue_failures.until IS NULL OR f.failed_at < requeue_failures.until)
        ORDER BY f.failed_at, f.id
        LIMIT requeue_failures.max_runs) c;

    IF dry_run THEN
        RETURN QUERY SELECT * FROM unnest(chosen);
        RETURN;
    END IF;

    SELECT coalesce(array_agg(q.run_id), '{}') INTO done
    FROM {schema}._requeue(ARRAY(SELECT c.run_id FROM unnest(chosen) c)) q;

    INSERT INTO {schema}.audit_log (action, runs, filter, run_ids, note)
    VALUES ('requeue', cardinality(done),
            jsonb_strip_nulls(jsonb_build_object(
                'workflow', requeue_failures.workflow, 'activity', requeue_failures.activity,
                'reason', requeue_failures.reason, 'since', requeue_failures.since,
                'until', requeue_failures.until, 'max_runs', requeue_failures.max_runs)),
            done, requeue_failures.note);

    RETURN QUERY
        SELECT c.run_id, c.workflow, c.step, c.activity, c.reason, c.failed_at, c.error_message,
               c.run_id = ANY (done)
        FROM unnest(chosen) c;
END
$$;

-- purge_completed deletes runs that completed or were cancelled before
-- now() - older_than (optionally of one workflow), with their steps and
-- attempts. Runs with failure history (failed once, then requeued) are kept:
-- only purge_failures deletes failure rows. With dry_run it only counts.
-- Otherwise it writes an audit row with the count, even when it is zero.
CREATE FUNCTION {schema}.purge_completed(
    older_than interval,
    workflow   text DEFAULT NULL,
    dry_run    boolean DEFAULT false,
    note       text DEFAULT NULL)
RETURNS TABLE (runs_deleted bigint, failures_deleted bigint)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    ids uuid[];
    n   bigint;
BEGIN
    IF older_than IS NULL OR older_than < interval '0' THEN
        RAISE EXCEPTION 'purge_completed: older_than must be a non-negative interval, got %', older_than
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One predicate chooses the runs, for the dry run and the deletion alike.
    SELECT coalesce(array_agg(r.id), '{}') INTO ids
    FROM {schema}.runs r
    WHERE r.status IN ('completed', 'cancelled')
      AND r.finished_at < now() - purge_completed.older_than
      AND (purge_completed.workflow IS NULL OR r.workflow = purge_completed.workflow)
      AND NOT EXISTS (SELECT 1 FROM {schema}.failures f WHERE f.run_id = r.id);
    n := cardinality(ids);
    IF NOT dry_run THEN
        DELETE FROM {schema}.runs r WHERE r.id = ANY (ids);
        INSERT INTO {schema}.audit_log (action, runs, failures, filter, note)
        VALUES ('purge_completed', n, 0,
                jsonb_strip_nulls(jsonb_build_object('older_than', purge_completed.older_than::text,
                                                     'workflow', purge_completed.workflow)),
                purge_completed.note);
    END IF;
    RETURN QUERY SELECT n, 0::bigint;
END
$$;

-- purge_failures deletes runs with failure history that finished before
-- now() - older_than (optionally of one workflow): failed runs, and completed
-- or cancelled runs that failed before being requeued. Their failure rows,
-- steps and attempts go with them. Runs still queued or running are kept
-- whatever their history. With dry_run it only counts. Otherwise it writes an
-- audit row with both counts, even when they are zero.
CREATE FUNCTION {schema}.purge_failures(
    older_than interval,
    workflow   text DEFAULT NULL,
    dry_run    boolean DEFAULT false,
    note       text DEFAULT NULL)
RETURNS TABLE (runs_deleted bigint, failures_deleted bigint)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    ids uuid[];
    nf  bigint;
BEGIN
    IF older_than IS NULL OR older_than < interval '0' THEN
        RAISE EXCEPTION 'purge_failures: older_than must be a non-negative interval, got %', older_than
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT coalesce(array_agg(x.id), '{}') INTO ids
    FROM (
        SELECT r.id
        FROM {schema}.runs r
        WHERE r.status IN ('failed', 'completed', 'cancelled')
          AND r.finished_at < now() - purge_failures.older_than
          AND (purge_failures.workflow IS NULL OR r.workflow = purge_failures.workflow)
          AND EXISTS (SELECT 1 FROM {schema}.failures f WHERE f.run_id = r.id)
        FOR UPDATE OF r) x;
    SELECT count(*) INTO nf FROM {schema}.failures f WHERE f.run_id = ANY (ids);
    IF NOT dry_run THEN
        DELETE FROM {schema}.runs r WHERE r.id = ANY (ids);
        INSERT INTO {schema}.audit_log (action, runs, failures, filter, note)
        VALUES ('purge_failures', cardinality(ids), nf,
                jsonb_strip_nulls(jsonb_build_object('older_than', purge_failures.older_than::text,
                                                     'workflow', purge_failures.workflow)),
                purge_failures.note);
    END IF;
    RETURN QUERY SELECT cardinality(ids)::bigint, nf;
END
$$;

-- open_failures: the failed runs waiting for a person, with the last error,
-- the step's attempt counts and since when. One row per failed run.
CREATE VIEW {schema}.open_failures AS
SELECT f.id                  AS failure_id,
       f.run_id,
       f.workflow,
       r.queue,
       f.reason,
       f.step,
       f.activity,
       f.attempts,
       f.errors,
       f.rescues,
       f.error_type,
       f.error_message,
       f.failed_at,
       now() - f.failed_at   AS failed_for,
       (SELECT min(a.started_at) FROM {schema}.attempts a
        WHERE a.run_id = f.run_id AND a.step = f.step) AS step_started_at,
       r.created_at          AS run_created_at,
       r.requeues,
       r.input
FROM {schema}.failures f
JOIN {schema}.runs r ON r.id = f.run_id
WHERE f.requeued_at IS NULL;

-- attempt_timeline: one row per attempt of every run, in the words of the
-- design: status, duration, the delay chosen before the next attempt and its
-- source, the wait that actually followed, the worker and the trace.
-- in_budget is false for attempts made before a requeue (they no longer
-- count against the step's budgets).
CREATE VIEW {schema}.attempt_timeline AS
SELECT a.run_id,
       r.workflow,
       a.step,
       a.attempt,
       a.activity,
       a.status,
       a.is_rescue,
       a.started_at,
       a.ended_at,
       coalesce(a.ended_at, now()) - a.started_at            AS duration,
       a.delay_ms * interval '1 millisecond'                 AS delay_before_next,
       a.delay_source,
       lead(a.started_at) OVER (PARTITION BY a.run_id, a.step ORDER BY a.attempt) - a.ended_at AS waited,
       a.attempt > s.budget_from                             AS in_budget,
       a.worker,
       a.epoch,
       a.trace_id,
       a.span_id,
       a.error_type,
       a.error_message
FROM {schema}.attempts a
JOIN {schema}.runs r ON r.id = a.run_id
JOIN {schema}.steps s ON s.run_id = a.run_id AND s.step = a.step;

-- in_flight: the runs workers hold now, by whom, with the lease time left
-- (negative: expired, the run will be rescued by the next claim) and the
-- attempt in progress, if any.
CREATE VIEW {schema}.in_flight AS
SELECT r.id                           AS run_id,
       r.workflow,
       r.queue,
       r.claimant,
       r.epoch,
       r.lease_expires_at,
       r.lease_expires_at - now()     AS lease_left,
       r.lease_expires_at < now()     AS lease_expired,
       r.started_at,
       now() - r.started_at           AS running_for,
       r.reclaims,
       a.step,
       a.activity,
       a.attempt,
       a.started_at                   AS attempt_started_at,
       a.worker                       AS attempt_worker
FROM {schema}.runs r
LEFT JOIN LATERAL (
    SELECT x.step, x.activity, x.attempt, x.started_at, x.worker
    FROM {schema}.attempts x
    WHERE x.run_id = r.id AND x.status = 'running'
    ORDER BY x.step DESC, x.attempt DESC
    LIMIT 1) a ON true
WHERE r.status = 'running';

-- failure_counts: failures per hour, workflow, activity and reason, requeued
-- ones included (still_open counts those not requeued).
CREATE VIEW {schema}.failure_counts AS
SELECT date_trunc('hour', f.failed_at)           AS bucket,
       f.workflow,
       f.activity,
       f.reason,
       count(*)                                  AS failures,
       count(*) FILTER (WHERE f.requeued_at IS NULL) AS still_open,
       min(f.failed_at)                          AS first_failed_at,
       max(f.failed_at)                          AS last_failed_at
FROM {schema}.failures f
GROUP BY 1, 2, 3, 4;

-- failure_buckets is failure_counts with buckets of any width, from since on.
CREATE FUNCTION {schema}.failure_buckets(
    width interval DEFAULT interval '1 hour',
    since timestamptz DEFAULT now() - interval '1 day')
RETURNS TABLE (bucket timestamptz, workflow text, activity text, reason text, failures bigint, still_open bigint)
LANGUAGE sql STABLE AS $$
    SELECT to_timestamp(floor(extract(epoch FROM f.failed_at) / extract(epoch FROM width)) * extract(epoch FROM width)),
           f.workflow, f.activity, f.reason,
           count(*), count(*) FILTER (WHERE f.requeued_at IS NULL)
    FROM {schema}.failures f
    WHERE f.failed_at >= since
    GROUP BY 1, 2, 3, 4
    ORDER BY 1, 5 DESC
$$;
