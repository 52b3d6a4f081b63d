-- Tenure schema, version 7: the web UI's failure groups and run search.
--
-- The UI (package ui) groups open failures by fingerprint: workflow,
-- activity, reason, error type and the error message with its numbers,
-- UUIDs and hex IDs replaced by placeholders, so that "charge 4242 declined
-- for card 7d3f…" and "charge 17 declined for card 9e21…" are one group.
-- Computing the normalised message for 100,000 open failures on every page
-- took 750 ms (three regular expressions per row); kept in an index of the
-- open failures, the grouping is an index-only scan: 25 ms.
--
-- The fingerprint is computed once per failure row when it is written (a
-- worker's failure path pays three regular expressions on one short
-- message) and the index holds open failures only (requeued ones leave it).
-- Building it reads the failure table and blocks writes to it (not reads)
-- until the migration commits: about a second per 100,000 open failures.

-- failure_fingerprint is the error message as the UI groups it: UUIDs become
-- <uuid>, hex IDs (0x…, or words of 8 or more hex digits mixing letters and
-- digits) <hex>, other runs of digits <n>; only the first 300 characters of
-- the message count (so that an index entry stays far below B-tree's limit
-- of about 2,700 bytes, whatever an activity returned). SQL users group by
-- it too:
--   SELECT fingerprint, count(*) FROM tenure.failures WHERE requeued_at IS NULL GROUP BY 1;
CREATE FUNCTION {schema}.failure_fingerprint(message text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT AS $$
    SELECT pg_catalog.left(pg_catalog.regexp_replace(pg_catalog.regexp_replace(pg_catalog.regexp_replace(
        pg_catalog.left(message, 300),
        '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<uuid>', 'gi'),
        '\m(0x[0-9a-f]+|(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{8,})\M', '<hex>', 'gi'),
        '[0-9]+', '<n>', 'g'), 300)
$$;

-- The fingerprint is stored with each failure row, computed once when the
-- row is written, so that the groups are read from an index alone.
ALTER TABLE {schema}.failures
    ADD COLUMN fingerprint text GENERATED ALWAYS AS ({schema}.failure_fingerprint(error_message)) STORED;

-- Open failures by fingerprint, then time: the failure groups, their counts,
-- first and last seen and their buckets over time are read from this index
-- alone (run_id is included for a group's sample; its raw message is read
-- by that one row), and a group's members are one range of it.
CREATE INDEX failures_open_fingerprint_idx ON {schema}.failures
    (workflow, activity, reason, error_type, fingerprint, failed_at)
    INCLUDE (run_id)
    WHERE requeued_at IS NULL;

-- Runs newest first: the UI's run search (by workflow, status, key or
-- creation time, newest first) reads this index backwards and stops at its
-- page instead of sorting the whole runs table.
CREATE INDEX runs_created_idx ON {schema}.runs (created_at);

-- Cancels by people (operator.Operator.Cancel, tenure runs cancel, the UI)
-- are audited like requeues: who, when, which run, why.
ALTER TABLE {schema}.audit_log DROP CONSTRAINT audit_log_action_check;
ALTER TABLE {schema}.audit_log ADD CONSTRAINT audit_log_action_check
    CHECK (action IN ('requeue', 'purge_completed', 'purge_failures', 'cancel'));

-- cancel_run_noted is cancel_run with an audit_log row (action 'cancel') when
-- it did something; applications' own cancels (sdk.Client.Cancel) and the
-- cascade to children call cancel_run, unaudited.
CREATE FUNCTION {schema}.cancel_run_noted(run uuid, note text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    did text;
BEGIN
    did := {schema}.cancel_run(run);
    IF did IS NOT NULL THEN
        INSERT INTO {schema}.audit_log (action, runs, filter, run_ids, note)
        VALUES ('cancel', 1, jsonb_build_object('outcome', did), ARRAY[run], note);
    END IF;
    RETURN did;
END
$$;

-- A run's audit rows (its page's requeue and cancel history), without a scan
-- of the whole log.
CREATE INDEX audit_log_run_ids_idx ON {schema}.audit_log USING gin (run_ids);

-- requeue_failure_ids requeues the runs whose open failure rows are exactly
-- those named (a preview's rows), with one audit_log row: a run that was
-- requeued meanwhile, and may have failed again with another failure row,
-- is left alone. The failure rows and their runs are locked first, so a
-- concurrent requeue is either before (its row is no longer open) or after.
-- The audit row's filter is the one given (what the person selected), with
-- the failure IDs. Returns the runs it put back.
CREATE FUNCTION {schema}.requeue_failure_ids(failure_ids bigint[], note text DEFAULT NULL, filter jsonb DEFAULT '{}')
RETURNS SETOF uuid
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    ids uuid[];
BEGIN
    SELECT coalesce(array_agg(f.run_id), '{}') INTO ids
    FROM (SELECT f.run_id FROM {schema}.failures f JOIN {schema}.runs r ON r.id = f.run_id
          WHERE f.id = ANY (failure_ids) AND f.requeued_at IS NULL AND r.status = 'failed'
          FOR UPDATE OF f, r) AS f;
    ids := ARRAY(SELECT q.run_id FROM {schema}._requeue(ids) AS q);
    IF cardinality(ids) > 0 THEN
        INSERT INTO {schema}.audit_log (action, runs, filter, run_ids, note)
        VALUES ('requeue', cardinality(ids),
                coalesce(filter, '{}') || jsonb_build_object('failure_ids', to_jsonb(failure_ids)), ids, note);
    END IF;
    RETURN QUERY SELECT unnest(ids);
END
$$;
