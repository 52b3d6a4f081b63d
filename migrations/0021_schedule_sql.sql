-- Tenure schema, version 21: a schedule's trigger and backfill in SQL.
-- trigger_schedule starts a schedule's run now, the one implementation
-- (store.TriggerSchedule calls it). A backfill needs the schedule's ticks,
-- which only Go computes (package schedule): backfill_schedule checks what
-- SQL can and records a request in schedule_backfills, which a worker's
-- schedule ticker carries out, exactly once, through store.BackfillSchedule's
-- code, and on which it writes the outcome. Both run with the caller's
-- rights (SECURITY INVOKER), as every function a person calls.

-- _uuid_v7 is a UUID of version 7 (RFC 9562), as Go's uuid.NewV7 makes the
-- runs' IDs: the Unix time in milliseconds (48 bits, by the clock, not the
-- transaction's start), the version and variant bits, random bits.
-- PostgreSQL has uuidv7() from version 18 only.
CREATE FUNCTION {schema}._uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE AS $$
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                                          PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                                          FROM 1 FOR 6),
                                  52, 1), 53, 1), -- version 4 (0100) becomes 7 (0111); the variant stays 10
                  'hex')::uuid
$$;

-- _schedule_tick_key is a tick's run key, byte for byte store.ScheduleTickRun's:
-- 'schedule:<name>@<nominal time, RFC 3339 in UTC>', its fraction of a
-- second without trailing zeros (Go's time.RFC3339Nano). The key is what
-- makes a tick's run unique, whichever side made it.
CREATE FUNCTION {schema}._schedule_tick_key(name text, nominal timestamptz) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT 'schedule:' || name || '@' || to_char(nominal AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || regexp_replace(to_char(nominal AT TIME ZONE 'UTC', '.US'), '\.?0+$', '') || 'Z'
$$;

-- trigger_schedule starts a run of schedule name now, outside its spec,
-- its overlap policy and a pause (the run neither waits for the
-- schedule's last run nor becomes it): a run of the schedule's workflow,
-- queue, priority and input, of the tick key of the transaction's time,
-- due now, announced to idle workers on the runs channel; a
-- schedule_ticks row decided 'triggered' by the role; an audit_log row
-- (action schedule, change triggered, the run, note). The schedule's row
-- is locked for it, as a worker's pass locks it. It returns the run's ID;
-- a schedule that does not exist raises no_data_found (P0002).
CREATE FUNCTION {schema}.trigger_schedule(name text, note text DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    s {schema}.schedules;
    key text;
    run uuid;
BEGIN
    SELECT * INTO s FROM {schema}.schedules x WHERE x.name = trigger_schedule.name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'trigger_schedule: no schedule %', name USING ERRCODE = 'no_data_found';
    END IF;
    key := {schema}._schedule_tick_key(s.name, now());
    -- As store.InsertRuns records a run: a run that holds the key already
    -- (a trigger earlier in this transaction) is the one returned.
    INSERT INTO {schema}.runs (id, workflow, queue, priority, run_key, input, run_after)
    VALUES ({schema}._uuid_v7(), s.workflow, s.queue, s.priority, key, s.input, now())
    ON CONFLICT DO NOTHING
    RETURNING id INTO run;
    IF run IS NULL THEN
        SELECT r.id INTO run FROM {schema}.runs r WHERE r.run_key = key;
    ELSE
        PERFORM pg_catalog.pg_notify({schema}.runs_channel(), s.queue);
    END IF;
    INSERT INTO {schema}.schedule_ticks (schedule, nominal_at, decision, run_id, started_at, decided_by)
    VALUES (s.name, now(), 'triggered', run, now(), current_user);
    INSERT INTO {schema}.audit_log (action, runs, filter, run_ids, note)
    VALUES ('schedule', 1, jsonb_build_object('schedule', s.name, 'change', 'triggered', 'by', 'person'), ARRAY[run],
            nullif(trigger_schedule.note, ''));
    RETURN run;
END
$$;

-- schedule_backfills: the backfills asked for in SQL (backfill_schedule),
-- each carried out by one worker (the row locked FOR UPDATE SKIP LOCKED, in
-- the transaction that starts the ticks' runs), which writes its outcome.
-- Kept as history, as the audit log is; no foreign key, so that a request
-- outlives its schedule (its outcome then says there is none).
CREATE TABLE {schema}.schedule_backfills (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule     text        NOT NULL,
    -- The range of nominal times, both included.
    from_at      timestamptz NOT NULL CHECK (isfinite(from_at)),
    to_at        timestamptz NOT NULL CHECK (isfinite(to_at) AND to_at >= from_at),
    note         text,
    -- The database role that asked: the person of its audit row and the
    -- decided_by of its ticks.
    requested_by text        NOT NULL DEFAULT current_user,
    requested_at timestamptz NOT NULL DEFAULT now(),
    -- Carried out (done_at set): the worker (its label), and the nominal
    -- times of the ticks it started, in order (empty: every tick of the
    -- range had a run), or, with ticks NULL, why it started none (no such
    -- schedule, more ticks than a backfill starts). Not yet (done_at NULL)
    -- with error set: why the last worker that tried (done_by) could not
    -- (a spec its build cannot read, a next tick not computed yet); the
    -- workers try again about once a minute, as they retry a schedule whose
    -- ticks they could not compute.
    done_at      timestamptz,
    done_by      text,
    ticks        timestamptz[],
    error        text
);

-- The requests not carried out yet: each worker's ticker looks for one at
-- every check, through this index, whatever the table's history.
CREATE INDEX schedule_backfills_pending_idx ON {schema}.schedule_backfills (id) WHERE done_at IS NULL;

-- backfill_schedule asks the workers to start a run for each tick of
-- schedule name in [from_at, to_at] without one, as store.BackfillSchedule
-- does (see it for which ticks), and returns the request's ID: a row of
-- schedule_backfills, announced on the runs channel ('backfill'), which the
-- first worker's ticker carries out and writes the outcome of. It checks
-- what SQL can: the schedule exists (else no_data_found, P0002), the range
-- is finite, ends no later than now and not before it starts (else
-- invalid_parameter_value, 22023, with the message of Go's
-- ErrBackfillRange); the rest (at most 10,000 ticks, a spec the worker can
-- read) is the worker's to find, and its outcome says so.
CREATE FUNCTION {schema}.backfill_schedule(name text, from_at timestamptz, to_at timestamptz, note text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    request bigint;
BEGIN
    IF from_at IS NULL OR to_at IS NULL OR NOT isfinite(from_at) OR NOT isfinite(to_at) THEN
        RAISE EXCEPTION 'backfill_schedule: from_at and to_at must be finite times' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT FROM {schema}.schedules x WHERE x.name = backfill_schedule.name) THEN
        RAISE EXCEPTION 'backfill_schedule: no schedule %', name USING ERRCODE = 'no_data_found';
    END IF;
    IF to_at > now() THEN
        RAISE EXCEPTION 'invalid backfill range: it ends in the future (%): its ticks are the workers'' to decide',
            to_char(to_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF to_at < from_at THEN
        RAISE EXCEPTION 'invalid backfill range: it ends (%) before it starts (%)',
            to_char(to_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
            to_char(from_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO {schema}.schedule_backfills (schedule, from_at, to_at, note)
    VALUES (backfill_schedule.name, from_at, to_at, nullif(backfill_schedule.note, ''))
    RETURNING schedule_backfills.id INTO request;
    PERFORM pg_catalog.pg_notify({schema}.runs_channel(), 'backfill');
    RETURN request;
END
$$;

-- A schema upgraded from version 20 keeps its roles working: each gets on
-- schedule_backfills what it had on schedule_ticks, so that a role that
-- could backfill from Go (INSERT) can ask in SQL, and a worker's role
-- (UPDATE: it decides ticks) can read the requests at each check and write
-- their outcomes. docs/operations.md lists the grants of a new schema.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT r.rolname,
               pg_catalog.has_table_privilege(r.oid, '{schema}.schedule_ticks', 'SELECT') AS sel,
               pg_catalog.has_table_privilege(r.oid, '{schema}.schedule_ticks', 'INSERT') AS ins,
               pg_catalog.has_table_privilege(r.oid, '{schema}.schedule_ticks', 'UPDATE') AS upd
        FROM pg_catalog.pg_roles r
        WHERE r.oid <> (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = '{schema}.schedule_ticks'::regclass)
          AND NOT r.rolsuper AND r.rolname !~ '^pg_'
          AND pg_catalog.has_table_privilege(r.oid, '{schema}.schedule_ticks', 'SELECT, INSERT, UPDATE')
    LOOP
        IF g.sel THEN
            EXECUTE format('GRANT SELECT ON {schema}.schedule_backfills TO %I', g.rolname);
        END IF;
        IF g.ins THEN
            EXECUTE format('GRANT SELECT, INSERT ON {schema}.schedule_backfills TO %I', g.rolname);
        END IF;
        IF g.upd THEN
            EXECUTE format('GRANT SELECT, UPDATE ON {schema}.schedule_backfills TO %I', g.rolname);
        END IF;
    END LOOP;
END
$$;
