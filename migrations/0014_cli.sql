-- Tenure schema, version 14: one finished run (and its child runs) deleted
-- by a person, audited as a purge is (operator.Operator.DeleteRun, tenure
-- runs delete, SQL).

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
-- everything recorded for it: its steps, attempts, signals, events, wakes and
-- failure rows (the cascades of DELETE FROM runs). Its child runs go with it,
-- and theirs, and so on: a child holds what its parent gave it (its input
-- came from the parent's code, often the same personal data), it cannot be
-- requeued usefully once the parent is gone, and a child kept would name in
-- parent_run_id a run that no longer exists. Every one of them must have
-- finished too.
--
-- It writes one audit row: action 'delete', runs and failures deleted, every
-- run deleted in run_ids (the run first), the run's ID, workflow and status
-- in filter, and the note. The audit log is never deleted, so it keeps no
-- run key, not even a hash of it: keys are often business identifiers (an
-- e-mail address, an order number), and a hash of one is found again by
-- hashing the candidates, so it would keep what an erasure request asks to
-- remove. The run ID is what links the audit row to the application's own
-- records. The note is kept as given: it should say why (a ticket), not
-- whose.
--
-- It returns the runs and failure rows deleted. It deletes nothing, and
-- raises:
--   no_data_found (P0002)                     for a run that does not exist;
--   object_not_in_prerequisite_state (55000)  for a run queued or running:
--                                             cancel it first, or wait;
--   TN003  for a child run whose parent may still replay it (queued,
--          running, or failed and so requeueable: a replay of the parent's
--          child step reads the child's result), and for a run with child
--          runs (or theirs) still queued or running (their end wakes their
--          parent).
-- The run's row is locked first, then its child runs' level by level, so a
-- requeue of one of them in flight is either before (it is queued: refused)
-- or after (it finds no run).
CREATE FUNCTION {schema}.delete_run(run uuid, note text DEFAULT NULL)
RETURNS TABLE (runs_deleted bigint, failures_deleted bigint)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    r      record;
    parent text;
    ids    uuid[];
    kids   uuid[];
    busy   bigint;
    nf     bigint;
BEGIN
    SELECT x.id, x.workflow, x.status, x.parent_run_id INTO r
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
                USING ERRCODE = 'TN003', HINT = 'Delete the parent run first (its child runs go with it), or wait until it completes.';
        END IF;
    END IF;
    ids := ARRAY[run];
    kids := ids;
    LOOP
        SELECT array_agg(c.id ORDER BY c.id) INTO kids
        FROM (SELECT x.id FROM {schema}.runs x
              WHERE x.parent_run_id = ANY (kids) AND x.id <> ALL (ids)
              ORDER BY x.id
              FOR UPDATE) c;
        EXIT WHEN kids IS NULL;
        ids := ids || kids;
    END LOOP;
    SELECT count(*) INTO busy FROM {schema}.runs c
    WHERE c.id = ANY (ids[2:]) AND c.status IN ('queued', 'running');
    IF busy > 0 THEN
        RAISE EXCEPTION 'delete_run: run % has % still queued or running', run,
            CASE WHEN busy = 1 THEN '1 child run' ELSE busy || ' child runs' END
            USING ERRCODE = 'TN003', HINT = 'Wait for its child runs to end, or cancel them.';
    END IF;
    SELECT count(*) INTO nf FROM {schema}.failures f WHERE f.run_id = ANY (ids);
    DELETE FROM {schema}.runs x WHERE x.id = ANY (ids);
    INSERT INTO {schema}.audit_log (action, runs, failures, filter, run_ids, note)
    VALUES ('delete', cardinality(ids), nf,
            jsonb_build_object('run_id', run, 'workflow', r.workflow, 'status', r.status),
            ids, delete_run.note);
    RETURN QUERY SELECT cardinality(ids)::bigint, nf;
END
$$;
