-- Tenure schema, version 15: a purge never deletes a child run its parent may
-- still read. A parent that waits for its child reads the child's row
-- (status, output, error) when it resumes; a child purged before that left
-- the parent waiting for a run that no longer exists, for ever. A finished
-- child whose parent is queued, running or failed (a requeue replays it) is
-- kept, as delete_run keeps it (TN003), until its parent completes or is
-- cancelled; the purge after that takes it.

-- _parent_may_read says whether the run's parent, if any, may still read it:
-- it is queued, running or failed. A parent that no longer exists reads
-- nothing.
CREATE FUNCTION {schema}._parent_may_read(parent uuid)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT parent IS NOT NULL AND EXISTS (
        SELECT 1 FROM {schema}.runs p
        WHERE p.id = parent AND p.status IN ('queued', 'running', 'failed'))
$$;

CREATE OR REPLACE FUNCTION {schema}.purge_failure_candidates(before timestamptz, workflow text DEFAULT NULL)
RETURNS TABLE (run_id uuid, workflow text, status text, finished_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT r.id, r.workflow, r.status, r.finished_at
    FROM {schema}.runs r
    WHERE r.status IN ('failed', 'completed', 'cancelled')
      AND r.finished_at < purge_failure_candidates.before
      AND (purge_failure_candidates.workflow IS NULL OR r.workflow = purge_failure_candidates.workflow)
      AND EXISTS (SELECT 1 FROM {schema}.failures f WHERE f.run_id = r.id)
      AND NOT {schema}._parent_may_read(r.parent_run_id)
$$;

CREATE OR REPLACE FUNCTION {schema}.purge_completed(
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
      AND NOT EXISTS (SELECT 1 FROM {schema}.failures f WHERE f.run_id = r.id)
      AND NOT {schema}._parent_may_read(r.parent_run_id);
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

CREATE OR REPLACE FUNCTION {schema}.purge_completed_before(
    before   timestamptz,
    workflow text DEFAULT NULL,
    dry_run  boolean DEFAULT false,
    note     text DEFAULT NULL)
RETURNS TABLE (runs_deleted bigint, failures_deleted bigint)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    ids uuid[];
    n   bigint;
BEGIN
    IF purge_completed_before.before IS NULL THEN
        RAISE EXCEPTION 'purge_completed: the cutoff must not be NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT coalesce(array_agg(r.id), '{}') INTO ids
    FROM {schema}.runs r
    WHERE r.status IN ('completed', 'cancelled')
      AND r.finished_at < purge_completed_before.before
      AND (purge_completed_before.workflow IS NULL OR r.workflow = purge_completed_before.workflow)
      AND NOT EXISTS (SELECT 1 FROM {schema}.failures f WHERE f.run_id = r.id)
      AND NOT {schema}._parent_may_read(r.parent_run_id);
    n := cardinality(ids);
    IF NOT dry_run THEN
        DELETE FROM {schema}.runs r WHERE r.id = ANY (ids);
        INSERT INTO {schema}.audit_log (action, runs, failures, filter, note)
        VALUES ('purge_completed', n, 0,
                jsonb_strip_nulls(jsonb_build_object('before', purge_completed_before.before,
                                                     'workflow', purge_completed_before.workflow)),
                purge_completed_before.note);
    END IF;
    RETURN QUERY SELECT n, 0::bigint;
END
$$;
