-- Tenure schema, version 14: one finished run deleted by a person, audited
-- as a purge is (operator.Operator.DeleteRun, tenure runs delete, SQL).

-- The audit log's actions gain 'delete'. The list is read back from the
-- constraint and extended, rather than written out again, so that this
-- migration keeps every action the migrations before it allow.
DO $$
DECLARE
    actions text[];
BEGIN
    SELECT array_agg(m.v[1] ORDER BY m.n) INTO actions
    FROM pg_catalog.pg_constraint c,
         regexp_matches(pg_catalog.pg_get_constraintdef(c.oid), '''([^'']*)''::text', 'g') WITH ORDINALITY AS m(v, n)
    WHERE c.conrelid = '{schema}.audit_log'::regclass AND c.conname = 'audit_log_action_check';
    IF actions IS NULL THEN
        RAISE EXCEPTION 'migration 14: audit_log_action_check lists no action';
    END IF;
    EXECUTE format('ALTER TABLE {schema}.audit_log DROP CONSTRAINT audit_log_action_check, '
                   'ADD CONSTRAINT audit_log_action_check CHECK (action IN (%s))',
                   (SELECT string_agg(quote_literal(a), ', ') FROM unnest(actions || ARRAY['delete']) AS a));
END
$$;

-- delete_run deletes one finished run (completed, failed or cancelled) with
-- its steps, attempts, signals, events, wakes and failure rows (the
-- cascades of DELETE FROM runs), and writes an audit row: action 'delete',
-- the run in run_ids, its workflow, status and key in filter, the failure
-- rows deleted and the note. It returns how many failure rows went with it.
-- It deletes nothing, and raises:
--   no_data_found (P0002)                     for a run that does not exist;
--   object_not_in_prerequisite_state (55000)  for a run queued or running:
--                                             cancel it first, or wait;
--   TN003  for a child run whose parent may still replay it (queued,
--          running, or failed and so requeueable: a replay of the parent's
--          child step reads the child's result), and for a run with
--          children still queued or running (their end wakes it).
-- The run's row is locked first, so a requeue of it in flight is either
-- before (the run is queued: refused) or after (it finds no run).
CREATE FUNCTION {schema}.delete_run(run uuid, note text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r      record;
    parent text;
    busy   bigint;
    nf     bigint;
BEGIN
    SELECT x.id, x.workflow, x.status, x.run_key, x.parent_run_id INTO r
    FROM {schema}.runs x WHERE x.id = run
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'delete_run: run % not found', run USING ERRCODE = 'no_data_found';
    END IF;
    IF r.status NOT IN ('completed', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'delete_run: run % is %, not finished', run, r.status
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Only completed, failed and cancelled runs can be deleted: cancel it first, or wait for its end.';
    END IF;
    IF r.parent_run_id IS NOT NULL THEN
        SELECT p.status INTO parent FROM {schema}.runs p WHERE p.id = r.parent_run_id;
        IF parent IN ('queued', 'running', 'failed') THEN
            RAISE EXCEPTION 'delete_run: run % is a child of run %, which is % and may replay it', run, r.parent_run_id, parent
                USING ERRCODE = 'TN003', HINT = 'Delete the parent run first, or wait until it completes.';
        END IF;
    END IF;
    SELECT count(*) INTO busy FROM {schema}.runs c WHERE c.parent_run_id = run AND c.status IN ('queued', 'running');
    IF busy > 0 THEN
        RAISE EXCEPTION 'delete_run: run % has % still queued or running', run,
            CASE WHEN busy = 1 THEN '1 child' ELSE busy || ' children' END
            USING ERRCODE = 'TN003', HINT = 'Wait for its children to end, or cancel them.';
    END IF;
    SELECT count(*) INTO nf FROM {schema}.failures f WHERE f.run_id = run;
    DELETE FROM {schema}.runs x WHERE x.id = run;
    INSERT INTO {schema}.audit_log (action, runs, failures, filter, run_ids, note)
    VALUES ('delete', 1, nf,
            jsonb_strip_nulls(jsonb_build_object('run_id', run, 'workflow', r.workflow, 'status', r.status,
                                                 'key', r.run_key)),
            ARRAY[run], delete_run.note);
    RETURN nf;
END
$$;
