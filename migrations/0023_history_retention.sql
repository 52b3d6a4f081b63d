-- Tenure schema, version 23: retention by partition (issue 25). A day's
-- partitions of steps and attempts (migration 22) are dropped, not deleted
-- row by row, once the retention configured in history_retention lets its
-- runs go; the histories of the runs it keeps (still open, a failure kept,
-- finished too recently, a child its parent may still read) move first to
-- a partition of the same day that holds only them; the failure histories
-- dropped are copied to history_archive first. retain_history carries it
-- out, one process at a time; every worker calls it every ten minutes
-- while a retention is configured.

SELECT {schema}._allow_audit_action('retention');

-- A run's failure rows, requeued ones included, by an index: retention asks
-- of every run of a day whether it has failure history, and a deleted
-- run's failure rows are found by it (the foreign key's cascade); the
-- index of the open ones alone (failures_open_run_idx) answered neither,
-- and each was a scan of the table.
CREATE INDEX failures_run_idx ON {schema}.failures (run_id);

-- history_retention is the one row of retention's configuration. NULL keeps
-- the runs of that kind for good: nothing is dropped until a person sets an
-- age. A run with failure history (failed, or failed before a requeue) goes
-- only by failed_after.
CREATE TABLE {schema}.history_retention (
    one             boolean     PRIMARY KEY DEFAULT true CHECK (one),
    completed_after interval    CHECK (completed_after >= interval '1 hour'),
    cancelled_after interval    CHECK (cancelled_after >= interval '1 hour'),
    failed_after    interval    CHECK (failed_after >= interval '1 hour'),
    -- Copy the failure histories of a dropped partition to history_archive.
    archive         boolean     NOT NULL DEFAULT true,
    changed_at      timestamptz NOT NULL DEFAULT now(),
    changed_by      text        NOT NULL DEFAULT current_user,
    note            text
);
INSERT INTO {schema}.history_retention DEFAULT VALUES;

-- history_archive holds, per run whose failure history retention dropped,
-- the run's row, its failure rows, steps and attempts as JSON.
CREATE TABLE {schema}.history_archive (
    run_id      uuid        PRIMARY KEY,
    workflow    text        NOT NULL,
    status      text        NOT NULL,
    finished_at timestamptz,
    archived_at timestamptz NOT NULL DEFAULT now(),
    run         jsonb       NOT NULL,
    failures    jsonb       NOT NULL,
    steps       jsonb       NOT NULL,
    attempts    jsonb       NOT NULL
);
CREATE INDEX history_archive_archived_idx ON {schema}.history_archive (archived_at);

-- history_drops is retention's ledger: a row per day's partitions it
-- dropped, written in the transaction that detached them ('detached'), and
-- 'done' once the detached tables are dropped and the runs rows that went
-- with them deleted. A pass killed between the two finishes the job of the
-- one before it.
CREATE TABLE {schema}.history_drops (
    id           bigserial   PRIMARY KEY,
    partition    text        NOT NULL, -- the partitions' suffix: 0, YYYYMMDD
    lo           uuid,                 -- NULL: from the lowest ID
    hi           uuid        NOT NULL,
    state        text        NOT NULL CHECK (state IN ('detached', 'done')),
    kept         bigint      NOT NULL, -- runs whose histories moved to the new partitions
    archived     bigint      NOT NULL, -- runs copied to history_archive
    runs_deleted bigint      NOT NULL DEFAULT 0,
    failures_deleted bigint  NOT NULL DEFAULT 0,
    next_id      uuid,                 -- where the deletion of the runs goes on from
    done_by      text        NOT NULL,
    note         text,
    started_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at  timestamptz
);

-- set_history_retention sets retention's configuration; NULL keeps that
-- kind of run for good. Each age is at least an hour. One audit row
-- (action retention, filter change 'config' and the ages).
CREATE FUNCTION {schema}.set_history_retention(
    completed_after interval,
    cancelled_after interval,
    failed_after    interval DEFAULT NULL,
    archive         boolean DEFAULT true,
    note            text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF least(completed_after, cancelled_after, failed_after) < interval '1 hour' THEN
        RAISE EXCEPTION 'set_history_retention: every age must be at least an hour (NULL keeps that kind of run): % % %',
            completed_after, cancelled_after, failed_after USING ERRCODE = '22023';
    END IF;
    UPDATE {schema}.history_retention h
    SET completed_after = set_history_retention.completed_after,
        cancelled_after = set_history_retention.cancelled_after,
        failed_after = set_history_retention.failed_after,
        archive = coalesce(set_history_retention.archive, true),
        changed_at = now(), changed_by = current_user, note = set_history_retention.note;
    INSERT INTO {schema}.audit_log (action, runs, filter, note)
    VALUES ('retention', 0, jsonb_build_object('change', 'config',
                'completed_after', completed_after::text, 'cancelled_after', cancelled_after::text,
                'failed_after', failed_after::text, 'archive', coalesce(archive, true)), note);
END
$$;

-- _retention_swap does the first transaction of a day's drop: it locks the
-- runs of the range [lo, hi) that a person could change (those with failure
-- history, which a requeue reopens), sorts them, copies the histories of
-- the runs kept to new tables with the range's constraint, archives the
-- failure histories that go, and deletes those runs; then, holding both
-- tables ACCESS EXCLUSIVE (waited for at most 100 ms: a timeout raises
-- 55P03 and undoes all of it), copies the histories of the open runs of the
-- range (their workers wait), detaches the day's partitions and attaches the
-- new ones in their place. It returns the ledger row's ID, or NULL when
-- nothing of the range may go.
CREATE FUNCTION {schema}._retention_swap(sfx text, lo uuid, hi uuid, by_whom text, note text)
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

    SET LOCAL lock_timeout = '100ms';
    LOCK TABLE {schema}.steps, {schema}.attempts IN ACCESS EXCLUSIVE MODE;
    FOREACH t IN ARRAY ARRAY['steps', 'attempts'] LOOP
        -- The open runs' histories, which their workers may have written
        -- until the lock.
        EXECUTE format('INSERT INTO {schema}.%I SELECT p.* FROM {schema}.%I p JOIN _retention_runs x ON x.id = p.run_id
                        WHERE NOT x.expired AND NOT x.finished', t || '_' || sfx || '_k', t || '_' || sfx);
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

-- _retention_finish does the rest of a drop, in transactions of its own:
-- with batch 0 it drops the detached tables; else it deletes up to batch
-- runs of the range that retention lets go (their histories went with the
-- tables) and returns how many, closing the ledger row with its audit row
-- when none is left.
CREATE FUNCTION {schema}._retention_finish(drop_id bigint, batch integer)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    d {schema}.history_drops;
    cfg {schema}.history_retention;
    n bigint;
    f bigint;
    scanned bigint;
    last uuid;
BEGIN
    SELECT * INTO d FROM {schema}.history_drops WHERE id = drop_id FOR UPDATE;
    IF d.state <> 'detached' THEN
        RETURN 0;
    END IF;
    IF batch = 0 THEN
        EXECUTE format('DROP TABLE IF EXISTS {schema}.%I, {schema}.%I', 'steps_' || d.partition || '_gone', 'attempts_' || d.partition || '_gone');
        RETURN 0;
    END IF;
    SELECT * INTO cfg FROM {schema}.history_retention;
    -- The next batch of the range's runs, by ID from where the last one
    -- ended; those retention lets go are deleted.
    WITH batch_runs AS (
        SELECT r.id,
               (r.status IN ('completed', 'cancelled', 'failed') AND r.finished_at IS NOT NULL
                AND (r.parent_run_id IS NULL OR NOT EXISTS (SELECT FROM {schema}.runs p
                                                            WHERE p.id = r.parent_run_id AND p.status IN ('queued', 'running', 'failed')))
                AND CASE WHEN x.fh THEN cfg.failed_after IS NOT NULL AND r.finished_at < now() - cfg.failed_after
                         WHEN r.status = 'completed' THEN cfg.completed_after IS NOT NULL AND r.finished_at < now() - cfg.completed_after
                         ELSE cfg.cancelled_after IS NOT NULL AND r.finished_at < now() - cfg.cancelled_after END) AS expired
        FROM {schema}.runs r,
             LATERAL (SELECT r.status = 'failed' OR EXISTS (SELECT FROM {schema}.failures f WHERE f.run_id = r.id) AS fh) AS x
        WHERE (d.lo IS NULL OR r.id >= d.lo) AND r.id < d.hi AND (d.next_id IS NULL OR r.id > d.next_id)
        ORDER BY r.id LIMIT batch),
    gone AS (SELECT id FROM batch_runs WHERE expired),
    counted AS (SELECT count(*) AS f FROM {schema}.failures x WHERE x.run_id IN (SELECT id FROM gone)),
    del AS (DELETE FROM {schema}.runs r USING gone WHERE r.id = gone.id RETURNING r.id)
    SELECT (SELECT count(*) FROM batch_runs), (SELECT b.id FROM batch_runs b ORDER BY b.id DESC LIMIT 1), (SELECT count(*) FROM del), (SELECT counted.f FROM counted)
    INTO scanned, last, n, f;
    UPDATE {schema}.history_drops SET runs_deleted = runs_deleted + n, failures_deleted = failures_deleted + f, next_id = coalesce(last, next_id)
    WHERE id = drop_id;
    IF scanned < batch THEN
        UPDATE {schema}.history_drops SET state = 'done', finished_at = clock_timestamp() WHERE id = drop_id
        RETURNING * INTO d;
        INSERT INTO {schema}.audit_log (action, runs, failures, filter, note)
        VALUES ('retention', d.runs_deleted, d.failures_deleted,
                jsonb_build_object('change', 'drop', 'partition', d.partition, 'from', d.lo, 'to', d.hi,
                                   'kept', d.kept, 'archived', d.archived, 'by', d.done_by), d.note);
    END IF;
    RETURN scanned;
END
$$;

-- retain_history carries out the retention configured: it first finishes
-- the drops a killed pass left, then, oldest first, each day's partitions
-- (and the first, steps_0 and attempts_0) whose runs were all created
-- longer ago than the shortest age configured and of which some run may go:
-- the swap, the drop of the detached tables, the deletion of the runs rows
-- in batches of 10,000, each a transaction of its own. A partition whose
-- lock it did not get within 100 ms is left to the next pass (a NOTICE
-- says so). One process at a time: a call while another runs returns at
-- once. It is a procedure (CALL, outside a transaction block).
CREATE PROCEDURE {schema}.retain_history(by_whom text DEFAULT current_user, note text DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    cfg {schema}.history_retention;
    w interval;
    d record;
    p record;
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
        FOR p IN
            SELECT substring(c.relname FROM '^steps_(.*)$') AS sfx,
                   nullif(trim(substring(b FROM 'FROM \(([^)]*)\)'), ''''), 'MINVALUE')::uuid AS lo,
                   trim(substring(b FROM 'TO \(([^)]*)\)'), '''')::uuid AS hi
            FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
                 LATERAL pg_get_expr(c.relpartbound, c.oid) AS b
            WHERE i.inhparent = '{schema}.steps'::regclass AND b <> 'DEFAULT'
              AND substring(b FROM 'TO \(([^)]*)\)') <> 'MAXVALUE'
              AND trim(substring(b FROM 'TO \(([^)]*)\)'), '''')::uuid <= {schema}._history_bound(now() - w)
            ORDER BY 3
        LOOP
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
    END IF;
    PERFORM pg_advisory_unlock(hashtext('{schema}.retain_history'));
END
$$;

-- _history_day is the day (UTC) of a UUIDv7's time.
CREATE FUNCTION {schema}._history_day(u uuid) RETURNS date
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (to_timestamp(('x' || replace(substr(u::text, 1, 13), '-', ''))::bit(48)::bigint / 1000.0) AT TIME ZONE 'UTC')::date
$$;

-- ensure_history_partitions now sizes the partitions it makes from the
-- retention: a sixth of the shortest age configured, in whole days (at
-- least one; a day without retention), so that about eight partitions stay
-- attached whatever the window (each one attached costs the hot path:
-- docs/benchmarks.md, "History partitions"). A partition of span days
-- starts on a day that is a multiple of span days from 1970-01-01, or
-- where the partition before it ends; it is named by its first day. A
-- change of the ages applies to the partitions made after it.
CREATE OR REPLACE FUNCTION {schema}.ensure_history_partitions(ahead integer DEFAULT 2) RETURNS SETOF text
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
            EXECUTE format('CREATE TABLE {schema}.%I (LIKE {schema}.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH (fillfactor = 50)', name, t);
            EXECUTE format('ALTER TABLE {schema}.%I ATTACH PARTITION {schema}.%I FOR VALUES FROM (%L) TO (%L)', t, name, lo, hi);
            RETURN NEXT name;
        END LOOP;
    END LOOP;
END
$$;

-- Workers run retention (its DDL through the SECURITY DEFINER functions):
-- the roles that may make partitions may call it; the roles that may purge
-- may set it.
REVOKE EXECUTE ON FUNCTION {schema}._retention_swap(text, uuid, uuid, text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}._retention_finish(bigint, integer) FROM PUBLIC;
REVOKE EXECUTE ON PROCEDURE {schema}.retain_history(text, text) FROM PUBLIC;
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT r.rolname FROM pg_catalog.pg_roles r
        WHERE NOT r.rolsuper AND r.rolname !~ '^pg_'
          AND pg_catalog.has_function_privilege(r.oid, '{schema}.ensure_history_partitions(integer)', 'EXECUTE')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {schema}._retention_swap(text, uuid, uuid, text, text), '
                       '{schema}._retention_finish(bigint, integer) TO %I', g.rolname);
        EXECUTE format('GRANT EXECUTE ON PROCEDURE {schema}.retain_history(text, text) TO %I', g.rolname);
        EXECUTE format('GRANT SELECT ON {schema}.history_retention, {schema}.history_drops TO %I', g.rolname);
    END LOOP;
    -- Who may purge (DELETE on runs) may set the retention.
    FOR g IN
        SELECT r.rolname FROM pg_catalog.pg_roles r
        WHERE NOT r.rolsuper AND r.rolname !~ '^pg_'
          AND pg_catalog.has_table_privilege(r.oid, '{schema}.runs', 'DELETE')
    LOOP
        EXECUTE format('GRANT SELECT, UPDATE ON {schema}.history_retention TO %I', g.rolname);
    END LOOP;
END
$$;
