-- Tenure schema, version 25: retention merges the partitions it kept
-- (issue 25).
--
-- A retention pass replaces each old day's partitions by partitions that
-- hold only the kept runs' histories: open runs, failed ones (kept for good
-- unless failed_after is set), and those whose kind's age is longer than
-- the shortest. Those partitions stay attached, one more every span, and
-- every partition attached costs the hot path (docs/benchmarks.md,
-- "History partitions"): with failures kept, a year of daily spans would
-- attach 365.
--
-- So a pass now merges two adjacent old partitions (older than the
-- shortest age) into one, at most one pair a pass: the first pair, oldest
-- first, whose newer one is at least half the size of the older one, as a
-- binary counter carries. The old partitions then number about the
-- logarithm of the kept history's size in spans (7 for a year of daily
-- spans of the same size), and each kept row is copied about as many
-- times over its life.
--
-- A merge is one transaction (_retention_merge): the histories of the
-- finished runs are copied first, the failed ones locked against a requeue;
-- then, holding steps and attempts ACCESS EXCLUSIVE (waited for at most
-- 100 ms, as the swap), the open runs' histories are copied, the two
-- partitions of each table detached and dropped, and the merged one
-- attached in their place. One audit row (action retention, change merge).
--
-- A merged partition holds runs whose ages pass a few at a time (a run
-- open for months that ends, failures once failed_after is set): a swap
-- would copy all its kept histories at each. So when under a tenth of a
-- range's kept runs go, _retention_swap now deletes their rows in place.

-- _retention_merge merges the adjacent partitions a_sfx [lo, mid) and
-- b_sfx [mid, hi) of steps and attempts into one partition of [lo, hi),
-- named as a_sfx's, and returns the rows it moved.
CREATE FUNCTION {schema}._retention_merge(a_sfx text, b_sfx text, lo uuid, hi uuid, by_whom text, note text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
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
        EXECUTE format('CREATE TABLE {schema}.%I (LIKE {schema}.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH (fillfactor = 50)',
                       t || '_' || a_sfx || '_m', t);
        EXECUTE format('ALTER TABLE {schema}.%I ADD CONSTRAINT %I CHECK (%s)', t || '_' || a_sfx || '_m', t || '_' || a_sfx || '_m_bound',
                       CASE WHEN lo IS NULL THEN format('run_id < %L', hi) ELSE format('run_id >= %L AND run_id < %L', lo, hi) END);
        -- The histories nobody writes now: every run's but the open ones'.
        FOREACH s IN ARRAY ARRAY[a_sfx, b_sfx] LOOP
            EXECUTE format('INSERT INTO {schema}.%I SELECT p.* FROM {schema}.%I p WHERE NOT EXISTS (SELECT FROM _merge_open o WHERE o.id = p.run_id)',
                           t || '_' || a_sfx || '_m', t || '_' || s);
            GET DIAGNOSTICS n = ROW_COUNT;
            moved := moved + n;
        END LOOP;
    END LOOP;

    SET LOCAL lock_timeout = '100ms';
    LOCK TABLE {schema}.steps, {schema}.attempts IN ACCESS EXCLUSIVE MODE;
    FOREACH t IN ARRAY ARRAY['steps', 'attempts'] LOOP
        FOREACH s IN ARRAY ARRAY[a_sfx, b_sfx] LOOP
            -- The open runs' histories, which their workers may have
            -- written until the lock (by their IDs: a join would read the
            -- whole partition, under the lock).
            EXECUTE format('INSERT INTO {schema}.%I SELECT p.* FROM {schema}.%I p WHERE p.run_id = ANY ($1)',
                           t || '_' || a_sfx || '_m', t || '_' || s) USING open_ids;
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
REVOKE EXECUTE ON FUNCTION {schema}._retention_merge(text, text, uuid, uuid, text, text) FROM PUBLIC;

-- retain_history, as migration 23 made it, then a merge: the first pair of
-- adjacent old partitions, oldest first, whose newer one is at least half
-- the size of the older one (steps' and attempts' partitions together). A
-- merge whose lock was not free within 100 ms is left to the next pass.
CREATE OR REPLACE PROCEDURE {schema}.retain_history(by_whom text DEFAULT current_user, note text DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    cfg {schema}.history_retention;
    w interval;
    d record;
    p record;
    m record;
    drop_id bigint;
BEGIN
    IF NOT pg_try_advisory_lock(hashtext('{schema}.retain_history')) THEN
        RAISE NOTICE 'retain_history: another pass is running';
        RETURN;
    END IF;
    COMMIT;
    FOR d IN SELECT id FROM {schema}.history_drops WHERE state = 'detached' ORDER BY id LOOP
        PERFORM {schema}._retention_finish(d.id, 0);
        COMMIT;
        WHILE {schema}._retention_finish(d.id, 10000) = 10000 LOOP
            COMMIT;
        END LOOP;
        COMMIT;
    END LOOP;
    SELECT * INTO cfg FROM {schema}.history_retention;
    w := least(cfg.completed_after, cfg.cancelled_after, cfg.failed_after);
    IF w IS NOT NULL THEN
        FOR p IN SELECT * FROM {schema}._history_old_partitions(w) LOOP
            BEGIN
                drop_id := {schema}._retention_swap(p.sfx, p.lo, p.hi, by_whom, note);
            EXCEPTION WHEN lock_not_available THEN
                RAISE NOTICE 'retain_history: the lock on steps and attempts was not free within 100 ms; partition % is left to the next pass', p.sfx;
                drop_id := NULL;
            END;
            COMMIT;
            CONTINUE WHEN drop_id IS NULL;
            PERFORM {schema}._retention_finish(drop_id, 0);
            COMMIT;
            WHILE {schema}._retention_finish(drop_id, 10000) = 10000 LOOP
                COMMIT;
            END LOOP;
            COMMIT;
        END LOOP;
        SELECT a.sfx AS a_sfx, a.lo, b.sfx AS b_sfx, b.hi INTO m
        FROM (SELECT o.*, lead(o.sfx) OVER (ORDER BY o.hi) AS next FROM {schema}._history_old_partitions(w) AS o) AS a
        JOIN {schema}._history_old_partitions(w) AS b ON b.sfx = a.next
        WHERE 2 * b.bytes >= a.bytes
        ORDER BY a.hi LIMIT 1;
        IF FOUND THEN
            BEGIN
                PERFORM {schema}._retention_merge(m.a_sfx, m.b_sfx, m.lo, m.hi, by_whom, note);
            EXCEPTION WHEN lock_not_available THEN
                RAISE NOTICE 'retain_history: the lock on steps and attempts was not free within 100 ms; the merge of partitions % and % is left to the next pass',
                    m.a_sfx, m.b_sfx;
            END;
            COMMIT;
        END IF;
    END IF;
    PERFORM pg_advisory_unlock(hashtext('{schema}.retain_history'));
END
$$;

-- _history_old_partitions lists the partitions of steps (and so of
-- attempts) whose runs were all created more than w ago, oldest first:
-- their suffix, range and size (the two tables' partitions, in bytes).
CREATE FUNCTION {schema}._history_old_partitions(w interval)
RETURNS TABLE (sfx text, lo uuid, hi uuid, bytes bigint)
LANGUAGE sql STABLE AS $$
    SELECT x.sfx, x.lo, x.hi,
           pg_total_relation_size(c.oid) + coalesce(pg_total_relation_size(to_regclass('{schema}.attempts_' || x.sfx)), 0)
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
         LATERAL pg_get_expr(c.relpartbound, c.oid) AS b,
         LATERAL (SELECT substring(c.relname FROM '^steps_(.*)$') AS sfx,
                         nullif(trim(substring(b FROM 'FROM \(([^)]*)\)'), ''''), 'MINVALUE')::uuid AS lo,
                         trim(substring(b FROM 'TO \(([^)]*)\)'), '''')::uuid AS hi) AS x
    WHERE i.inhparent = '{schema}.steps'::regclass AND b <> 'DEFAULT'
      AND substring(b FROM 'TO \(([^)]*)\)') <> 'MAXVALUE'
      AND trim(substring(b FROM 'TO \(([^)]*)\)'), '''')::uuid <= {schema}._history_bound(now() - w)
    ORDER BY x.hi
$$;

-- _retention_swap, as migration 23 made it, but for a range of which few
-- runs go (under a tenth of those it keeps): their steps and attempts are
-- deleted in place and the partitions stay, where a swap would copy every
-- kept history (a merged partition's, at each run whose age passes). The
-- ledger row and the rest of the drop (_retention_finish: the runs rows in
-- batches, the audit row) are the same. Under the lock, the open runs'
-- rows are read by their IDs: migration 23's join read the whole partition
-- there, which held commits up for half a second on a day of 10^6
-- attempts.
CREATE OR REPLACE FUNCTION {schema}._retention_swap(sfx text, lo uuid, hi uuid, by_whom text, note text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
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
        EXECUTE format('CREATE TABLE {schema}.%I (LIKE {schema}.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH (fillfactor = 50)',
                       t || '_' || sfx || '_k', t);
        EXECUTE format('ALTER TABLE {schema}.%I ADD CONSTRAINT %I CHECK (%s)', t || '_' || sfx || '_k', t || '_' || sfx || '_k_bound', bound);
        -- The histories of the kept runs that nobody writes now: finished
        -- ones (those with failure history are locked; a completed or
        -- cancelled run never changes).
        EXECUTE format('INSERT INTO {schema}.%I SELECT p.* FROM {schema}.%I p JOIN _retention_runs x ON x.id = p.run_id
                        WHERE NOT x.expired AND x.finished', t || '_' || sfx || '_k', t || '_' || sfx);
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
        -- The open runs' histories, which their workers may have written
        -- until the lock, by their IDs: migration 23's join read the whole
        -- partition under the lock (0.5 s for a day of 10^6 attempts).
        EXECUTE format('INSERT INTO {schema}.%I SELECT p.* FROM {schema}.%I p WHERE p.run_id = ANY ($1)',
                       t || '_' || sfx || '_k', t || '_' || sfx) USING open_ids;
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

-- Who may carry out retention may merge.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT r.rolname FROM pg_catalog.pg_roles r
        WHERE NOT r.rolsuper AND r.rolname !~ '^pg_'
          AND pg_catalog.has_function_privilege(r.oid, '{schema}._retention_swap(text, uuid, uuid, text, text)', 'EXECUTE')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {schema}._retention_merge(text, text, uuid, uuid, text, text) TO %I', g.rolname);
    END LOOP;
END
$$;
