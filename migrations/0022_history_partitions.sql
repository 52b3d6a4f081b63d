-- Tenure schema, version 22: steps and attempts become range partitions of
-- the run ID (issue 25, docs/design/history.md). Run IDs are UUIDv7, so a
-- range of IDs is a range of the runs' creation times and a run's steps and
-- attempts live in one partition for the whole of its life: no row moves on
-- the hot path, and the primary keys (run_id, step) and (run_id, step,
-- attempt) hold the partition key, as PostgreSQL requires.
--
-- The tables as they were become the first partition of each, from the
-- lowest ID to the start of tomorrow (UTC): steps_0 and attempts_0. Rows of
-- IDs beyond it (an ID that is not a UUIDv7) go to the DEFAULT partition
-- first, so that the bound is checked by an index range and a scan that
-- finds nothing; then a partition a day is made for tomorrow and the day
-- after (ensure_history_partitions), and an ID beyond every range lands in
-- the DEFAULT partition (steps_default, attempts_default).
--
-- Locks: ACCESS EXCLUSIVE on steps and attempts for the whole migration
-- (reads wait too); its time is one scan of each table to check the bound
-- (docs/operations.md gives it per 10^6 rows). The views that read the two
-- tables are made again over the partitioned ones (a view binds to its
-- tables, not their names) with their owners, privileges and comments; the
-- privileges on the tables go to the partitioned ones.

-- _history_bound is the lowest UUIDv7 of instant t: its first 48 bits t in
-- Unix milliseconds, every other bit zero.
CREATE FUNCTION {schema}._history_bound(t timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-0000-0000-000000000000')::uuid
    FROM (SELECT lpad(to_hex(floor(extract(epoch FROM t) * 1000)::bigint), 12, '0') AS h) AS x
$$;

DO $$
DECLARE
    bound uuid := {schema}._history_bound(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '1 day');
    views text[];
    defs text[];
    opts text[];
    owners text[];
    acls aclitem[][];
    notes text[];
    t text;
    a record;
BEGIN
    -- The views over the two tables, and over those views, deepest last.
    WITH RECURSIVE v(oid, depth) AS (
        SELECT DISTINCT r.ev_class, 1 FROM pg_depend x JOIN pg_rewrite r ON r.oid = x.objid
        WHERE x.refobjid IN ('{schema}.steps'::regclass, '{schema}.attempts'::regclass)
          AND r.ev_class NOT IN ('{schema}.steps'::regclass, '{schema}.attempts'::regclass)
        UNION
        SELECT r.ev_class, v.depth + 1 FROM v JOIN pg_depend x ON x.refobjid = v.oid JOIN pg_rewrite r ON r.oid = x.objid
        WHERE r.ev_class <> v.oid)
    SELECT array_agg(c.relname ORDER BY m.depth, c.oid), array_agg(pg_get_viewdef(c.oid) ORDER BY m.depth, c.oid),
           array_agg(coalesce(' WITH (' || array_to_string(c.reloptions, ', ') || ')', '') ORDER BY m.depth, c.oid),
           array_agg(pg_get_userbyid(c.relowner)::text ORDER BY m.depth, c.oid),
           array_agg(obj_description(c.oid, 'pg_class') ORDER BY m.depth, c.oid)
    INTO views, defs, opts, owners, notes
    FROM (SELECT v.oid, max(v.depth) AS depth FROM v GROUP BY 1) AS m JOIN pg_class c ON c.oid = m.oid;
    -- Their privileges, kept by name until they are made again.
    CREATE TEMP TABLE _history_acl ON COMMIT DROP AS
        SELECT c.relname, x.grantee, x.privilege_type
        FROM pg_class c, aclexplode(c.relacl) AS x
        WHERE c.relnamespace = '{schema}'::regnamespace AND c.relname = ANY (views || ARRAY['steps', 'attempts'])
          AND x.grantee <> c.relowner;
    FOR i IN REVERSE coalesce(cardinality(views), 0)..1 LOOP
        EXECUTE format('DROP VIEW {schema}.%I', views[i]);
    END LOOP;
    DROP TRIGGER steps_delete_attempts ON {schema}.steps;
    -- A partitioned table's CHECK constraints hold on every partition: those
    -- added NOT VALID (steps_kind_check, migration 5) are checked now.
    FOR a IN SELECT c.conrelid::regclass AS rel, c.conname FROM pg_constraint c
             WHERE c.conrelid IN ('{schema}.steps'::regclass, '{schema}.attempts'::regclass) AND NOT c.convalidated LOOP
        EXECUTE format('ALTER TABLE %s VALIDATE CONSTRAINT %I', a.rel, a.conname);
    END LOOP;

    FOREACH t IN ARRAY ARRAY['steps', 'attempts'] LOOP
        EXECUTE format('ALTER TABLE {schema}.%I RENAME TO %I', t, t || '_0');
        EXECUTE format('ALTER TABLE {schema}.%I RENAME CONSTRAINT %I TO %I', t || '_0', t || '_pkey', t || '_0_pkey');
        EXECUTE format('CREATE TABLE {schema}.%I (LIKE {schema}.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES INCLUDING COMMENTS)
                        PARTITION BY RANGE (run_id)', t, t || '_0');
        EXECUTE format('CREATE TABLE {schema}.%I PARTITION OF {schema}.%I DEFAULT WITH (fillfactor = 50)', t || '_default', t);
        -- Rows of IDs past the bound (not UUIDv7s) to the DEFAULT partition.
        EXECUTE format('WITH gone AS (DELETE FROM {schema}.%I WHERE run_id >= %L RETURNING *) INSERT INTO {schema}.%I SELECT * FROM gone',
                       t || '_0', bound, t || '_default');
        EXECUTE format('ALTER TABLE {schema}.%I ADD CONSTRAINT %I CHECK (run_id < %L)', t || '_0', t || '_0_bound', bound);
        EXECUTE format('ALTER TABLE {schema}.%I ATTACH PARTITION {schema}.%I FOR VALUES FROM (MINVALUE) TO (%L)', t, t || '_0', bound);
        EXECUTE format('ALTER TABLE {schema}.%I DROP CONSTRAINT %I', t || '_0', t || '_0_bound');
    END LOOP;

    CREATE TRIGGER steps_delete_attempts AFTER DELETE ON {schema}.steps
        REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION {schema}._delete_attempts_of_steps();

    FOR i IN 1..coalesce(cardinality(views), 0) LOOP
        EXECUTE format('CREATE VIEW {schema}.%I%s AS %s', views[i], opts[i], defs[i]);
        EXECUTE format('ALTER VIEW {schema}.%I OWNER TO %I', views[i], owners[i]);
        IF notes[i] IS NOT NULL THEN
            EXECUTE format('COMMENT ON VIEW {schema}.%I IS %L', views[i], notes[i]);
        END IF;
    END LOOP;
    FOR a IN SELECT * FROM _history_acl LOOP
        EXECUTE format('GRANT %s ON {schema}.%I TO %s', a.privilege_type, a.relname,
                       CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END);
    END LOOP;
END
$$;

-- ensure_history_partitions makes the partitions of steps and attempts for
-- the days from today (UTC) to ahead days later that do not exist yet, a
-- day each (steps_YYYYMMDD, attempts_YYYYMMDD, fillfactor 50 as the tables
-- had), each from the lowest UUIDv7 of its day to that of the next; a day
-- that an existing partition's range already overlaps is left as it is. It
-- returns the partitions it made. A partition is made standalone and then
-- attached, which locks the partitioned table SHARE UPDATE EXCLUSIVE (the
-- hot path's reads and writes go on) and the DEFAULT partition, which it
-- scans for rows of the new range: the DEFAULT partition is kept small.
-- It waits at most 100 ms for a lock (lock_timeout): the hot path's
-- statements queue behind a waiting ATTACH, so it gives up instead and is
-- called again. Concurrent callers take turns on a transaction's advisory
-- lock. It runs with its owner's rights (SECURITY DEFINER), so that a
-- worker's role, which may not make tables, can call it.
CREATE FUNCTION {schema}.ensure_history_partitions(ahead integer DEFAULT 2) RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '100ms' AS $$
DECLARE
    day date;
    lo uuid;
    hi uuid;
    t text;
    name text;
    found boolean;
    any_rows boolean;
BEGIN
    IF ahead IS NULL OR ahead < 0 OR ahead > 366 THEN
        RAISE EXCEPTION 'ensure_history_partitions: ahead %: want 0 to 366 days', ahead
            USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('{schema}.ensure_history_partitions'));
    FOR i IN 0..ahead LOOP
        day := (now() AT TIME ZONE 'UTC')::date + i;
        lo := {schema}._history_bound(day::timestamp AT TIME ZONE 'UTC');
        hi := {schema}._history_bound((day + 1)::timestamp AT TIME ZONE 'UTC');
        -- A day whose rows are already in a DEFAULT partition (the
        -- partitions were not made ahead in time) would need them moved,
        -- under their runs' locks: not done here; the day stays in the
        -- DEFAULT partitions, the two tables alike.
        found := false;
        FOREACH t IN ARRAY ARRAY['steps', 'attempts'] LOOP
            EXECUTE format('SELECT EXISTS (SELECT FROM {schema}.%I WHERE run_id >= %L AND run_id < %L)', t || '_default', lo, hi)
            INTO any_rows;
            found := found OR any_rows;
        END LOOP;
        IF found THEN
            RAISE WARNING 'ensure_history_partitions: steps_default or attempts_default holds rows of %: no partition made for that day', day;
            CONTINUE;
        END IF;
        FOREACH t IN ARRAY ARRAY['steps', 'attempts'] LOOP
            CONTINUE WHEN EXISTS (
                SELECT FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS b) AS x
                CROSS JOIN LATERAL (SELECT substring(x.b FROM 'FROM \(([^)]*)\)') AS f,
                                           substring(x.b FROM 'TO \(([^)]*)\)') AS u) AS r
                WHERE i.inhparent = format('{schema}.%I', t)::regclass AND x.b <> 'DEFAULT'
                  AND (r.f = 'MINVALUE' OR trim(r.f, '''')::uuid < hi)
                  AND (r.u = 'MAXVALUE' OR trim(r.u, '''')::uuid > lo));
            name := t || '_' || to_char(day, 'YYYYMMDD');
            EXECUTE format('CREATE TABLE {schema}.%I (LIKE {schema}.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH (fillfactor = 50)', name, t);
            EXECUTE format('ALTER TABLE {schema}.%I ATTACH PARTITION {schema}.%I FOR VALUES FROM (%L) TO (%L)', t, name, lo, hi);
            RETURN NEXT name;
        END LOOP;
    END LOOP;
END
$$;

SELECT {schema}.ensure_history_partitions(2);

-- Only the roles that run workers call it, as for the flow's functions:
-- each role that may call flow_sweep and update runs (a worker's, by
-- docs/operations.md's grants) may call it too.
REVOKE EXECUTE ON FUNCTION {schema}.ensure_history_partitions(integer) FROM PUBLIC;
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT r.rolname FROM pg_catalog.pg_roles r
        WHERE NOT r.rolsuper AND r.rolname !~ '^pg_'
          AND pg_catalog.has_function_privilege(r.oid, '{schema}.flow_sweep(text[])', 'EXECUTE')
          AND pg_catalog.has_table_privilege(r.oid, '{schema}.runs', 'UPDATE')
          AND pg_catalog.has_table_privilege(r.oid, '{schema}.attempts', 'INSERT')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {schema}.ensure_history_partitions(integer) TO %I', g.rolname);
    END LOOP;
END
$$;
