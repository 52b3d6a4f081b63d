-- Tenure schema, version 8: fewer index entries and row checks per step.
--
-- Every step writes a step row and an attempt row when its attempt starts
-- and updates both when it ends. Measured in bench/ (A', 20,000 one-step
-- runs; PostgreSQL 15, pg_stat_statements), the attempt-start statement
-- cost 21.6 µs and 10 WAL records per run and the step's end 16.8 µs and 8
-- records, most of it index entries and foreign-key checks that no query
-- needs:
--
-- * attempts_activity_time_idx (activity, started_at) served no query of
--   Tenure's. A site that reads attempts by activity and time can create it
--   again (docs/sql.md).
-- * attempts_running_idx (run_id) WHERE status = 'running' made every end of
--   an attempt write index entries (its status is the index's predicate), so
--   that update could never be a HOT one. A run's running attempt is its
--   last one, found through the primary key (in_flight, below); a reclaim
--   reads the run's attempts through the primary key too.
-- * The foreign keys steps → runs and attempts → steps ran a lookup of the
--   referenced row, as a query of its own, for every inserted row. Every
--   step and attempt is inserted by a statement that has just found and
--   locked its run's row (the fence of every worker write, FOR KEY SHARE,
--   which the foreign key's check took too), so the check found what the
--   statement had found. Their one other effect, ON DELETE CASCADE, is kept
--   by the statement-level triggers below: a DELETE of runs, whoever runs
--   it, still deletes their steps and attempts, in one statement per table
--   (at READ COMMITTED, the default: a DELETE at REPEATABLE READ of a run a
--   worker is writing can miss the rows the worker commits meanwhile, where
--   the foreign key raised a serialization error), and a TRUNCATE of runs
--   empties them.
-- * The attempts and steps tables leave half of each page free (fillfactor
--   50), so that the update that ends an attempt, or completes a step, finds
--   room on its row's page: a HOT update, with no new index entry. At the
--   default of 100, 2% of these updates were HOT; at 50, 95%. The price is
--   about twice the pages for these two tables (docs/operations.md).
--
-- Together: about 15% less machine CPU per one-step run (0.11 -> 0.095 ms)
-- and 700 fewer WAL bytes (docs/benchmarks.md).

DROP INDEX {schema}.attempts_activity_time_idx;
DROP INDEX {schema}.attempts_running_idx;

-- in_flight's attempt in progress: the run's last attempt, read backwards
-- through the primary key, when it is running.
CREATE OR REPLACE VIEW {schema}.in_flight AS
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
    SELECT x.step, x.activity, x.attempt, x.started_at, x.worker, x.status
    FROM {schema}.attempts x
    WHERE x.run_id = r.id
    ORDER BY x.step DESC, x.attempt DESC
    LIMIT 1) a ON a.status = 'running'
WHERE r.status = 'running';

ALTER TABLE {schema}.attempts DROP CONSTRAINT attempts_run_id_step_fkey;
ALTER TABLE {schema}.steps DROP CONSTRAINT steps_run_id_fkey;

-- The cascades, as the foreign keys did them: with the rights of the
-- schema's owner, so that a role allowed to delete runs (an operator's
-- purge) needs no grant on steps or attempts.
CREATE FUNCTION {schema}._delete_steps_of_runs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM {schema}.steps s USING gone g WHERE s.run_id = g.id;
    RETURN NULL;
END
$$;

CREATE FUNCTION {schema}._delete_attempts_of_steps() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM {schema}.attempts a USING gone g WHERE a.run_id = g.run_id AND a.step = g.step;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_delete_steps AFTER DELETE ON {schema}.runs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}._delete_steps_of_runs();

CREATE TRIGGER steps_delete_attempts AFTER DELETE ON {schema}.steps
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}._delete_attempts_of_steps();

-- TRUNCATE fires no DELETE trigger: a TRUNCATE of runs (CASCADE, for the
-- tables that still reference it) empties steps and attempts too.
CREATE FUNCTION {schema}._truncate_steps_of_runs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    TRUNCATE {schema}.steps, {schema}.attempts;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_truncate_steps AFTER TRUNCATE ON {schema}.runs
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}._truncate_steps_of_runs();

ALTER TABLE {schema}.attempts SET (fillfactor = 50);
ALTER TABLE {schema}.steps SET (fillfactor = 50);
