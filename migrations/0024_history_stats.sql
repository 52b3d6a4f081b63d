-- Tenure schema, version 24: the planner's estimate of a run's steps and
-- attempts stops growing with the history (issue 25).
--
-- ANALYZE estimates the distinct run IDs of a partition from a sample of
-- 30,000 rows. On a partition of 10^7 attempts it found 358,876 of about
-- 6.7 million: 28 attempts and 55 steps a run, where the history had 1.5.
-- Every plan that reads one run's rows grew with the estimate, and the
-- statements of a run's page (a prepared statement, read by run ID) were
-- planned again at every call instead of once, since their generic plan,
-- which costs every partition, then looked dearer than a custom one: the
-- page and `runs show` were 1.3 to 1.5 times slower at 10^7 attempts than
-- at 10^5 (docs/benchmarks.md, "History at 10^5, 10^6 and 10^7 attempts").
--
-- So run_id's distinct count is fixed, as a fraction of the rows: -0.5, two
-- rows a run, on every partition of steps and attempts (n_distinct) and on
-- the two tables (n_distinct_inherited). A workflow of many steps is then
-- underestimated, which costs nothing: a run's rows are read by its primary
-- key's prefix whatever the estimate. A distinct count set by hand on a
-- partition is left as it is.
--
-- _history_stats sets it on the partitions that lack it;
-- ensure_history_partitions, which every worker calls at its start and
-- hourly, now calls it after making its partitions, so that it is set
-- before a new partition is first analysed (the kept histories' partitions
-- that retention makes get it at the next call).
--
-- Locks: SHARE UPDATE EXCLUSIVE on steps, attempts and each partition (the
-- hot path's reads and writes go on; autovacuum waits), and the ANALYZE of
-- each partition of more than 100,000 rows, for the setting to take effect:
-- a sample of 30,000 rows each (docs/operations.md gives its time).

-- _history_stats sets run_id's distinct count on each partition of steps
-- and attempts that has none: their owner's right.
CREATE FUNCTION {schema}._history_stats() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c record;
BEGIN
    FOR c IN
        SELECT i.inhrelid::regclass AS rel
        FROM pg_inherits i JOIN pg_attribute a ON a.attrelid = i.inhrelid AND a.attname = 'run_id'
        WHERE i.inhparent IN ('{schema}.steps'::regclass, '{schema}.attempts'::regclass)
          AND NOT EXISTS (SELECT FROM unnest(a.attoptions) AS o WHERE o LIKE 'n_distinct=%')
        ORDER BY 1
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN run_id SET (n_distinct = -0.5)', c.rel);
    END LOOP;
END
$$;
REVOKE EXECUTE ON FUNCTION {schema}._history_stats() FROM PUBLIC;

ALTER TABLE {schema}.steps ALTER COLUMN run_id SET (n_distinct_inherited = -0.5);
ALTER TABLE {schema}.attempts ALTER COLUMN run_id SET (n_distinct_inherited = -0.5);
SELECT {schema}._history_stats();

DO $$
DECLARE
    c record;
BEGIN
    FOR c IN
        SELECT i.inhrelid::regclass AS rel
        FROM pg_inherits i JOIN pg_class k ON k.oid = i.inhrelid
        WHERE i.inhparent IN ('{schema}.steps'::regclass, '{schema}.attempts'::regclass) AND k.reltuples > 100000
        ORDER BY 1
    LOOP
        EXECUTE format('ANALYZE %s', c.rel);
    END LOOP;
END
$$;

-- ensure_history_partitions, as migration 23 made it, then the setting.
ALTER FUNCTION {schema}.ensure_history_partitions(integer) RENAME TO _ensure_history_partitions_23;
CREATE FUNCTION {schema}.ensure_history_partitions(ahead integer DEFAULT 2) RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '100ms' AS $$
BEGIN
    RETURN QUERY SELECT * FROM {schema}._ensure_history_partitions_23(ahead);
    PERFORM {schema}._history_stats();
END
$$;
COMMENT ON FUNCTION {schema}.ensure_history_partitions(integer) IS
    'Makes the partitions of steps and attempts for today and the next ahead days, and sets run_id''s distinct count on those that lack it.';
REVOKE EXECUTE ON FUNCTION {schema}.ensure_history_partitions(integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}._ensure_history_partitions_23(integer) FROM PUBLIC;

-- Who could make partitions still can.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT r.rolname FROM pg_catalog.pg_roles r
        WHERE NOT r.rolsuper AND r.rolname !~ '^pg_'
          AND pg_catalog.has_function_privilege(r.oid, '{schema}._ensure_history_partitions_23(integer)', 'EXECUTE')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {schema}.ensure_history_partitions(integer) TO %I', g.rolname);
    END LOOP;
END
$$;
