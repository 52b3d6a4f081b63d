-- Tenure schema, version 21: a schedule's trigger in SQL. trigger_schedule
-- starts a schedule's run now, the one implementation (store.TriggerSchedule
-- calls it), with the caller's rights (SECURITY INVOKER), as every function
-- a person calls.

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
