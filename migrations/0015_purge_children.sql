-- Tenure schema, version 15: a purge never deletes a child run its parent may
-- still read. A parent that waits for its child reads the child's row
-- (status, output, error) when it resumes; a child purged before that left
-- the parent waiting for a run that no longer exists, for ever. A finished
-- child whose parent is queued, running or failed (a requeue replays it) is
-- kept, as delete_run keeps it (TN003), until its parent completes or is
-- cancelled; the purge after that takes it. The two purges of completed
-- runs now share one body (_purge_completed), as those of failures do.

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

-- _purge_completed is purge_completed and purge_completed_before, as
-- _purge_failures is for failures: one predicate chooses the runs that
-- completed or were cancelled before the cutoff, without failure history
-- and without a parent that may read them, for the dry run and the
-- deletion alike; the audit row records filter and the workflow.
CREATE FUNCTION {schema}._purge_completed(before timestamptz, workflow text, dry_run boolean, note text, filter jsonb)
RETURNS TABLE (runs_deleted bigint, failures_deleted bigint)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    ids uuid[];
    n   bigint;
BEGIN
    SELECT coalesce(array_agg(r.id), '{}') INTO ids
    FROM {schema}.runs r
    WHERE r.status IN ('completed', 'cancelled')
      AND r.finished_at < _purge_completed.before
      AND (_purge_completed.workflow IS NULL OR r.workflow = _purge_completed.workflow)
      AND NOT EXISTS (SELECT 1 FROM {schema}.failures f WHERE f.run_id = r.id)
      AND NOT {schema}._parent_may_read(r.parent_run_id);
    n := cardinality(ids);
    IF NOT dry_run THEN
        DELETE FROM {schema}.runs r WHERE r.id = ANY (ids);
        INSERT INTO {schema}.audit_log (action, runs, failures, filter, note)
        VALUES ('purge_completed', n, 0,
                filter || jsonb_strip_nulls(jsonb_build_object('workflow', _purge_completed.workflow)),
                _purge_completed.note);
    END IF;
    RETURN QUERY SELECT n, 0::bigint;
END
$$;

CREATE OR REPLACE FUNCTION {schema}.purge_completed(
    older_than interval,
    workflow   text DEFAULT NULL,
    dry_run    boolean DEFAULT false,
    note       text DEFAULT NULL)
RETURNS TABLE (runs_deleted bigint, failures_deleted bigint)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF older_than IS NULL OR older_than < interval '0' THEN
        RAISE EXCEPTION 'purge_completed: older_than must be a non-negative interval, got %', older_than
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY SELECT * FROM {schema}._purge_completed(now() - older_than, workflow, dry_run, note,
                                                        jsonb_build_object('older_than', older_than::text));
END
$$;

CREATE OR REPLACE FUNCTION {schema}.purge_completed_before(
    before   timestamptz,
    workflow text DEFAULT NULL,
    dry_run  boolean DEFAULT false,
    note     text DEFAULT NULL)
RETURNS TABLE (runs_deleted bigint, failures_deleted bigint)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF before IS NULL THEN
        RAISE EXCEPTION 'purge_completed: the cutoff must not be NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY SELECT * FROM {schema}._purge_completed(before, workflow, dry_run, note,
                                                        jsonb_build_object('before', before));
END
$$;
