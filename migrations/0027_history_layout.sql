-- Tenure schema, version 27: a step row keeps its policy at its end, so
-- that the update that ends a step writes a few dozen bytes of WAL, not
-- the whole row (issue 27).
--
-- A step row is about 420 bytes, 270 of them its effective policy (jsonb),
-- written when the step starts and never changed by its end. PostgreSQL
-- logs an update whose new row stays on its page (a HOT update, which the
-- steps' fillfactor of 50 makes the rule) as the bytes between the longest
-- common prefix and the longest common suffix of the old and new rows. The
-- policy sat between the columns a step's end changes (status, output,
-- finished_at), so every end logged it again: 5.4 KB of the 16.3 KB of WAL
-- of a 10-step run (docs/benchmarks.md, "Where a 10-step run's WAL goes").
-- With the policy the row's last column, the end logs the changed middle
-- alone (473 against 120 bytes an update, measured on 20,000 rows).
--
-- Columns cannot be reordered in place, and a partition may order its
-- columns differently from its table (PostgreSQL converts the rows routed
-- to it). So the partitions of steps made from now on (_history_table: the
-- days ensure_history_partitions makes, the tables retention's swaps and
-- merges fill) are made with the columns of steps, the policy dropped and
-- added again last; the partitions that are still empty are made again so
-- (a new schema's steps_0, the days made ahead); a partition holding rows
-- keeps its layout, and no row is rewritten. The swaps and merges copy
-- rows by column name from then on (_history_cols), as partitions of both
-- layouts may meet in one merge.
--
-- Locks: ACCESS EXCLUSIVE on steps for as long as it takes to find which
-- partitions are empty (one row read each) and to make those again (a few
-- milliseconds each): the hot path waits that long.

-- _history_table makes the standalone table name for a partition of t
-- ('steps' or 'attempts'): t's columns, defaults and CHECK constraints,
-- fillfactor 50 (so that an attempt's end and a step's are HOT updates),
-- and, for steps, the policy as the last column.
CREATE FUNCTION {schema}._history_table(t text, name text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('CREATE TABLE {schema}.%I (LIKE {schema}.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH (fillfactor = 50)', name, t);
    IF t = 'steps' THEN
        EXECUTE format('ALTER TABLE {schema}.%I DROP COLUMN policy', name);
        EXECUTE format('ALTER TABLE {schema}.%I ADD COLUMN policy jsonb NOT NULL', name);
    END IF;
END
$$;
REVOKE EXECUTE ON FUNCTION {schema}._history_table(text, text) FROM PUBLIC;

-- _history_cols lists t's columns by name, in t's order, each prefixed
-- with alias when one is given: the column list of a copy between
-- partitions, whose layouts may differ.
CREATE FUNCTION {schema}._history_cols(t text, alias text DEFAULT NULL) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT string_agg(CASE WHEN alias IS NULL THEN '' ELSE quote_ident(alias) || '.' END || quote_ident(a.attname), ', '
                      ORDER BY a.attnum)
    FROM pg_attribute a
    WHERE a.attrelid = ('{schema}.' || quote_ident(t))::regclass AND a.attnum > 0 AND NOT a.attisdropped
$$;
REVOKE EXECUTE ON FUNCTION {schema}._history_cols(text, text) FROM PUBLIC;

-- The partitions of steps still empty, made again with the policy last,
-- with their bounds and storage settings; run_id's distinct count is set
-- again by _history_stats (migration 24).
DO $$
DECLARE
    p record;
    empty boolean;
BEGIN
    LOCK TABLE {schema}.steps IN ACCESS EXCLUSIVE MODE;
    FOR p IN SELECT c.relname::text AS name, pg_get_expr(c.relpartbound, c.oid) AS bound, c.reloptions
             FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = '{schema}.steps'::regclass
               AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'
               AND (SELECT a.attname FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                    ORDER BY a.attnum DESC LIMIT 1) <> 'policy'
             ORDER BY 1
    LOOP
        EXECUTE format('SELECT NOT EXISTS (SELECT FROM {schema}.%I)', p.name) INTO empty;
        CONTINUE WHEN NOT empty;
        EXECUTE format('ALTER TABLE {schema}.steps DETACH PARTITION {schema}.%I', p.name);
        EXECUTE format('DROP TABLE {schema}.%I', p.name);
        PERFORM {schema}._history_table('steps', p.name);
        IF p.reloptions IS NOT NULL THEN
            EXECUTE format('ALTER TABLE {schema}.%I SET (%s)', p.name, array_to_string(p.reloptions, ', '));
        END IF;
        EXECUTE format('ALTER TABLE {schema}.steps ATTACH PARTITION {schema}.%I %s', p.name, p.bound);
    END LOOP;
    PERFORM {schema}._history_stats();
END
$$;

-- ensure_history_partitions's days (as migration 23 made the function that
-- migration 24 renamed), retention's swap and merge (as migration 25 made
-- them): their tables made by _history_table, their copies by column name.
CREATE OR REPLACE FUNCTION {schema}._ensure_history_partitions_23(ahead integer DEFAULT 2) RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '100ms' AS $$
DECLARE
    span integer;
    first date;
    block date;
    lo uuid;
    hi uuid;
    covered uuid;
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
    SELECT greatest(1, coalesce(floor(extract(epoch FROM least(h.completed_after, h.cancelled_after, h.failed_after)) / 86400 / 6), 1))::integer
    INTO span FROM {schema}.history_retention h;
    first := (now() AT TIME ZONE 'UTC')::date;
    block := date '1970-01-01' + ((first - date '1970-01-01') / span) * span;
    WHILE block <= first + ahead LOOP
        lo := {schema}._history_bound(block::timestamp AT TIME ZONE 'UTC');
        hi := {schema}._history_bound((block + span)::timestamp AT TIME ZONE 'UTC');
        block := block + span;
        -- Where the partitions already made end within this block (made
        -- with another span): the new one starts there.
        SELECT (array_agg(r.u ORDER BY r.u DESC))[1] INTO covered FROM (
            SELECT trim(substring(x.b FROM 'TO \(([^)]*)\)'), '''') AS u_text,
                   substring(x.b FROM 'FROM \(([^)]*)\)') AS f
            FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
                 LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS b) AS x
            WHERE i.inhparent = '{schema}.steps'::regclass AND x.b <> 'DEFAULT') AS p,
            LATERAL (SELECT CASE WHEN p.u_text = 'MAXVALUE' THEN 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid ELSE p.u_text::uuid END AS u) AS r
        WHERE r.u > lo AND (p.f = 'MINVALUE' OR trim(p.f, '''')::uuid < hi);
        IF covered IS NOT NULL THEN
            CONTINUE WHEN covered >= hi;
            lo := covered;
        END IF;
        -- A range whose rows are already in a DEFAULT partition (the
        -- partitions were not made ahead in time) would need them moved,
        -- under their runs' locks: not done here; it stays in the DEFAULT
        -- partitions, the two tables alike.
        found := false;
        FOREACH t IN ARRAY ARRAY['steps', 'attempts'] LOOP
            EXECUTE format('SELECT EXISTS (SELECT FROM {schema}.%I WHERE run_id >= %L AND run_id < %L)', t || '_default', lo, hi)
            INTO any_rows;
            found := found OR any_rows;
        END LOOP;
        IF found THEN
            RAISE WARNING 'ensure_history_partitions: steps_default or attempts_default holds rows of the days from %: no partition made for them',
                block - span;
            CONTINUE;
        END IF;
        FOREACH t IN ARRAY ARRAY['steps', 'attempts'] LOOP
            name := t || '_' || to_char({schema}._history_day(lo), 'YYYYMMDD');
            PERFORM {schema}._history_table(t, name);
            EXECUTE format('ALTER TABLE {schema}.%I ATTACH PARTITION {schema}.%I FOR VALUES FROM (%L) TO (%L)', t, name, lo, hi);
            RETURN NEXT name;
        END LOOP;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION {schema}._retention_swap(sfx text, lo uuid, hi uuid, by_whom text, note text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    cols text; -- t's columns, by name (partitions' layouts differ: migration 27)
    pcols text;
    cfg {schema}.history_retention;
    expired bigint;
    n_kept bigint;
    n_gone_failed bigint;
    archived bigint := 0;
    failures_deleted bigint := 0;
    t text;
    bound text;
    drop_id bigint;
    open_ids uuid[];
BEGIN
    SELECT * INTO cfg FROM {schema}.history_retention;
    -- The runs of the range with failure history, locked.
    PERFORM FROM {schema}.runs r
    WHERE (lo IS NULL OR r.id >= lo) AND r.id < hi
      AND (r.status = 'failed' OR EXISTS (SELECT FROM {schema}.failures f WHERE f.run_id = r.id))
    ORDER BY r.id FOR UPDATE;
    DROP TABLE IF EXISTS pg_temp._retention_runs;
    -- Whether retention lets each run go: finished longer ago than its
    -- kind's age (a run with failure history by failed_after alone), and
    -- not a child its parent may still read (_parent_may_read). Written out
    -- here and in _retention_finish: a SQL function called per run made the
    -- swap of a day of 666,667 runs take 65 s.
    CREATE TEMP TABLE _retention_runs ON COMMIT DROP AS
        SELECT r.id, r.status IN ('completed', 'cancelled', 'failed') AS finished, x.fh AS failure_history,
               (r.status IN ('completed', 'cancelled', 'failed') AND r.finished_at IS NOT NULL
                AND (r.parent_run_id IS NULL OR NOT EXISTS (SELECT FROM {schema}.runs p
                                                            WHERE p.id = r.parent_run_id AND p.status IN ('queued', 'running', 'failed')))
                AND CASE WHEN x.fh THEN cfg.failed_after IS NOT NULL AND r.finished_at < now() - cfg.failed_after
                         WHEN r.status = 'completed' THEN cfg.completed_after IS NOT NULL AND r.finished_at < now() - cfg.completed_after
                         ELSE cfg.cancelled_after IS NOT NULL AND r.finished_at < now() - cfg.cancelled_after END) AS expired
        FROM {schema}.runs r,
             LATERAL (SELECT r.status = 'failed' OR EXISTS (SELECT FROM {schema}.failures f WHERE f.run_id = r.id) AS fh) AS x
        WHERE (lo IS NULL OR r.id >= lo) AND r.id < hi;
    SELECT count(*) FILTER (WHERE x.expired), count(*) FILTER (WHERE NOT x.expired),
           count(*) FILTER (WHERE x.expired AND x.failure_history)
    INTO expired, n_kept, n_gone_failed FROM _retention_runs x;
    IF expired = 0 THEN
        RETURN NULL;
    END IF;
    IF expired * 10 < n_kept THEN
        -- Few of the range's runs go (a partition of kept histories, or a
        -- merged one, whose runs' ages pass a few at a time): their rows
        -- are deleted where they are, not the many kept ones copied.
        IF cfg.archive THEN
            INSERT INTO {schema}.history_archive (run_id, workflow, status, finished_at, run, failures, steps, attempts)
            SELECT r.id, r.workflow, r.status, r.finished_at, to_jsonb(r),
                   coalesce((SELECT jsonb_agg(to_jsonb(f) ORDER BY f.id) FROM {schema}.failures f WHERE f.run_id = r.id), '[]'),
                   coalesce((SELECT jsonb_agg(to_jsonb(s) ORDER BY s.step) FROM {schema}.steps s WHERE s.run_id = r.id), '[]'),
                   coalesce((SELECT jsonb_agg(to_jsonb(a) ORDER BY a.step, a.attempt) FROM {schema}.attempts a WHERE a.run_id = r.id), '[]')
            FROM {schema}.runs r JOIN _retention_runs x ON x.id = r.id AND x.expired AND x.failure_history
            ON CONFLICT (run_id) DO NOTHING;
            GET DIAGNOSTICS archived = ROW_COUNT;
        END IF;
        SELECT count(*) INTO failures_deleted FROM {schema}.failures f JOIN _retention_runs x ON x.id = f.run_id AND x.expired AND x.failure_history;
        FOREACH t IN ARRAY ARRAY['steps', 'attempts'] LOOP
            cols := {schema}._history_cols(t); pcols := {schema}._history_cols(t, 'p');
            EXECUTE format('DELETE FROM {schema}.%I p USING _retention_runs x WHERE x.id = p.run_id AND x.expired', t || '_' || sfx);
        END LOOP;
        DELETE FROM {schema}.runs r USING _retention_runs x WHERE x.id = r.id AND x.expired AND x.failure_history;
        INSERT INTO {schema}.history_drops (partition, lo, hi, state, kept, archived, runs_deleted, failures_deleted, done_by, note)
        VALUES (sfx, lo, hi, 'detached', n_kept, archived, n_gone_failed, failures_deleted, by_whom, note)
        RETURNING id INTO drop_id;
        RETURN drop_id;
    END IF;
    DELETE FROM _retention_runs x WHERE x.expired AND NOT x.failure_history; -- they go with the tables
    ALTER TABLE _retention_runs ADD PRIMARY KEY (id);
    ANALYZE _retention_runs;

    bound := CASE WHEN lo IS NULL THEN format('run_id < %L', hi) ELSE format('run_id >= %L AND run_id < %L', lo, hi) END;
    FOREACH t IN ARRAY ARRAY['steps', 'attempts'] LOOP
        cols := {schema}._history_cols(t); pcols := {schema}._history_cols(t, 'p');
        PERFORM {schema}._history_table(t, t || '_' || sfx || '_k');
        EXECUTE format('ALTER TABLE {schema}.%I ADD CONSTRAINT %I CHECK (%s)', t || '_' || sfx || '_k', t || '_' || sfx || '_k_bound', bound);
        -- The histories of the kept runs that nobody writes now: finished
        -- ones (those with failure history are locked; a completed or
        -- cancelled run never changes).
        EXECUTE format('INSERT INTO {schema}.%I (%s) SELECT %s FROM {schema}.%I p JOIN _retention_runs x ON x.id = p.run_id
                        WHERE NOT x.expired AND x.finished', t || '_' || sfx || '_k', cols, pcols, t || '_' || sfx);
    END LOOP;
    IF cfg.archive THEN
        INSERT INTO {schema}.history_archive (run_id, workflow, status, finished_at, run, failures, steps, attempts)
        SELECT r.id, r.workflow, r.status, r.finished_at, to_jsonb(r),
               coalesce((SELECT jsonb_agg(to_jsonb(f) ORDER BY f.id) FROM {schema}.failures f WHERE f.run_id = r.id), '[]'),
               coalesce((SELECT jsonb_agg(to_jsonb(s) ORDER BY s.step) FROM {schema}.steps s WHERE s.run_id = r.id), '[]'),
               coalesce((SELECT jsonb_agg(to_jsonb(a) ORDER BY a.step, a.attempt) FROM {schema}.attempts a WHERE a.run_id = r.id), '[]')
        FROM {schema}.runs r JOIN _retention_runs x ON x.id = r.id AND x.expired
        ON CONFLICT (run_id) DO NOTHING;
        GET DIAGNOSTICS archived = ROW_COUNT;
    END IF;
    -- The runs with failure history that go, now, while they are locked: a
    -- requeue after the drop would replay them without their history.
    SELECT count(*) INTO failures_deleted FROM {schema}.failures f JOIN _retention_runs x ON x.id = f.run_id AND x.expired;
    DELETE FROM {schema}.runs r USING _retention_runs x WHERE x.id = r.id AND x.expired;

    open_ids := ARRAY(SELECT x.id FROM _retention_runs x WHERE NOT x.expired AND NOT x.finished);
    SET LOCAL lock_timeout = '100ms';
    LOCK TABLE {schema}.steps, {schema}.attempts IN ACCESS EXCLUSIVE MODE;
    FOREACH t IN ARRAY ARRAY['steps', 'attempts'] LOOP
        cols := {schema}._history_cols(t); pcols := {schema}._history_cols(t, 'p');
        -- The open runs' histories, which their workers may have written
        -- until the lock, by their IDs: migration 23's join read the whole
        -- partition under the lock (0.5 s for a day of 10^6 attempts).
        EXECUTE format('INSERT INTO {schema}.%I (%s) SELECT %s FROM {schema}.%I p WHERE p.run_id = ANY ($1)',
                       t || '_' || sfx || '_k', cols, pcols, t || '_' || sfx) USING open_ids;
        EXECUTE format('ALTER TABLE {schema}.%I DETACH PARTITION {schema}.%I', t, t || '_' || sfx);
        EXECUTE format('ALTER TABLE {schema}.%I RENAME TO %I', t || '_' || sfx, t || '_' || sfx || '_gone');
        IF n_kept > 0 THEN
            EXECUTE format('ALTER TABLE {schema}.%I ATTACH PARTITION {schema}.%I FOR VALUES FROM (%s) TO (%L)', t,
                           t || '_' || sfx || '_k', CASE WHEN lo IS NULL THEN 'MINVALUE' ELSE quote_literal(lo) END, hi);
            EXECUTE format('ALTER TABLE {schema}.%I DROP CONSTRAINT %I', t || '_' || sfx || '_k', t || '_' || sfx || '_k_bound');
            EXECUTE format('ALTER TABLE {schema}.%I RENAME TO %I', t || '_' || sfx || '_k', t || '_' || sfx);
        ELSE
            EXECUTE format('DROP TABLE {schema}.%I', t || '_' || sfx || '_k');
        END IF;
    END LOOP;
    INSERT INTO {schema}.history_drops (partition, lo, hi, state, kept, archived, runs_deleted, failures_deleted, done_by, note)
    VALUES (sfx, lo, hi, 'detached', n_kept, archived, n_gone_failed, failures_deleted, by_whom, note)
    RETURNING id INTO drop_id;
    RETURN drop_id;
END
$$;

CREATE OR REPLACE FUNCTION {schema}._retention_merge(a_sfx text, b_sfx text, lo uuid, hi uuid, by_whom text, note text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    cols text; -- t's columns, by name (partitions' layouts differ: migration 27)
    pcols text;
    t text;
    s text;
    n bigint;
    moved bigint := 0;
    open_ids uuid[];
BEGIN
    -- The runs a person could reopen (a requeue of a failed one), locked.
    PERFORM FROM {schema}.runs r
    WHERE (lo IS NULL OR r.id >= lo) AND r.id < hi AND r.status = 'failed'
    ORDER BY r.id FOR UPDATE;
    DROP TABLE IF EXISTS pg_temp._merge_open;
    CREATE TEMP TABLE _merge_open ON COMMIT DROP AS
        SELECT r.id FROM {schema}.runs r
        WHERE (lo IS NULL OR r.id >= lo) AND r.id < hi AND r.status NOT IN ('completed', 'cancelled', 'failed');
    ALTER TABLE _merge_open ADD PRIMARY KEY (id);
    ANALYZE _merge_open;
    open_ids := ARRAY(SELECT id FROM _merge_open);
    FOREACH t IN ARRAY ARRAY['steps', 'attempts'] LOOP
        cols := {schema}._history_cols(t); pcols := {schema}._history_cols(t, 'p');
        PERFORM {schema}._history_table(t, t || '_' || a_sfx || '_m');
        EXECUTE format('ALTER TABLE {schema}.%I ADD CONSTRAINT %I CHECK (%s)', t || '_' || a_sfx || '_m', t || '_' || a_sfx || '_m_bound',
                       CASE WHEN lo IS NULL THEN format('run_id < %L', hi) ELSE format('run_id >= %L AND run_id < %L', lo, hi) END);
        -- The histories nobody writes now: every run's but the open ones'.
        FOREACH s IN ARRAY ARRAY[a_sfx, b_sfx] LOOP
            EXECUTE format('INSERT INTO {schema}.%I (%s) SELECT %s FROM {schema}.%I p WHERE NOT EXISTS (SELECT FROM _merge_open o WHERE o.id = p.run_id)',
                           t || '_' || a_sfx || '_m', cols, pcols, t || '_' || s);
            GET DIAGNOSTICS n = ROW_COUNT;
            moved := moved + n;
        END LOOP;
    END LOOP;

    SET LOCAL lock_timeout = '100ms';
    LOCK TABLE {schema}.steps, {schema}.attempts IN ACCESS EXCLUSIVE MODE;
    FOREACH t IN ARRAY ARRAY['steps', 'attempts'] LOOP
        cols := {schema}._history_cols(t); pcols := {schema}._history_cols(t, 'p');
        FOREACH s IN ARRAY ARRAY[a_sfx, b_sfx] LOOP
            -- The open runs' histories, which their workers may have
            -- written until the lock (by their IDs: a join would read the
            -- whole partition, under the lock).
            EXECUTE format('INSERT INTO {schema}.%I (%s) SELECT %s FROM {schema}.%I p WHERE p.run_id = ANY ($1)',
                           t || '_' || a_sfx || '_m', cols, pcols, t || '_' || s) USING open_ids;
            GET DIAGNOSTICS n = ROW_COUNT;
            moved := moved + n;
            EXECUTE format('ALTER TABLE {schema}.%I DETACH PARTITION {schema}.%I', t, t || '_' || s);
            EXECUTE format('DROP TABLE {schema}.%I', t || '_' || s);
        END LOOP;
        EXECUTE format('ALTER TABLE {schema}.%I ATTACH PARTITION {schema}.%I FOR VALUES FROM (%s) TO (%L)', t,
                       t || '_' || a_sfx || '_m', CASE WHEN lo IS NULL THEN 'MINVALUE' ELSE quote_literal(lo) END, hi);
        EXECUTE format('ALTER TABLE {schema}.%I DROP CONSTRAINT %I', t || '_' || a_sfx || '_m', t || '_' || a_sfx || '_m_bound');
        EXECUTE format('ALTER TABLE {schema}.%I RENAME TO %I', t || '_' || a_sfx || '_m', t || '_' || a_sfx);
    END LOOP;
    PERFORM {schema}._history_stats();
    INSERT INTO {schema}.audit_log (action, runs, failures, filter, note)
    VALUES ('retention', 0, 0,
            jsonb_build_object('change', 'merge', 'partitions', jsonb_build_array(a_sfx, b_sfx), 'into', a_sfx,
                               'from', lo, 'to', hi, 'rows', moved, 'by', by_whom), note);
    RETURN moved;
END
$$;
