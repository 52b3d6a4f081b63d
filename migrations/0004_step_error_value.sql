-- Tenure schema, version 4: a failed step keeps its error's value.
--
-- A workflow that branches on the type of a step's error (errors.As) must
-- take the same branch when the step is replayed from its record after a
-- crash or a suspension. For the error types a workflow registers
-- (sdk.WithErrorType), the step that gave up stores the error's value as JSON
-- beside its Go type name (error_type), and replay decodes it. NULL for other
-- errors, which replay rebuilds from error_message and error_type as before.
ALTER TABLE {schema}.steps ADD COLUMN error_value jsonb;

-- _requeue (version 2) clears the failed step's error; it now clears the
-- value too. The rest of the function is unchanged.
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
        RETURNING f.run_id, f.step),
    st AS (
        UPDATE {schema}.steps s
        SET status = 'running', reason = NULL, error_message = NULL, error_type = NULL, error_value = NULL,
            finished_at = NULL,
            budget_from = (SELECT coalesce(max(a.attempt), 0) FROM {schema}.attempts a
                           WHERE a.run_id = s.run_id AND a.step = s.step)
        FROM f
        WHERE s.run_id = f.run_id AND s.step = f.step)
    -- Identical notifications in one transaction are delivered once: one per queue.
    SELECT r.id, r.queue, r.requeues
    FROM r, LATERAL pg_catalog.pg_notify({schema}.runs_channel(), r.queue) AS notified
$$;
