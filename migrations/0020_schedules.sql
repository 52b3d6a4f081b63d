-- Tenure schema, version 20: schedules. A schedule starts a run of its
-- workflow at each of its nominal ticks (a cron spec or @every, in a time
-- zone: package schedule computes them), exactly once per tick, whichever
-- worker decides it: every tick decided is a row of schedule_ticks, whose
-- primary key (schedule, nominal time) is inserted in the transaction that
-- starts the tick's run (its run key 'schedule:<name>@<nominal>' too), and
-- a worker decides a schedule's ticks only while it holds the schedule's row
-- locked (FOR UPDATE SKIP LOCKED): no leader, no tick decided twice, none
-- lost to a crash (an undecided tick stays due). Due-ness is the database's
-- clock's: next_at <= now().

CREATE TABLE {schema}.schedules (
    name              text        PRIMARY KEY CHECK (name <> '' AND octet_length(name) <= 200),
    -- When: a cron spec (5 or 6 fields, or a macro) or '@every <duration>',
    -- its local times in time_zone (an IANA name).
    spec              text        NOT NULL CHECK (spec <> ''),
    time_zone         text        NOT NULL DEFAULT 'UTC',
    -- What each tick starts.
    workflow          text        NOT NULL CHECK (workflow <> ''),
    queue             text        NOT NULL DEFAULT 'default',
    input             jsonb       NOT NULL DEFAULT 'null',
    priority          integer     NOT NULL DEFAULT 0,
    -- Each tick's run is due at its nominal time plus a delay in
    -- [0, jitter_ms), the same for the tick wherever it is decided.
    jitter_ms         bigint      NOT NULL DEFAULT 0 CHECK (jitter_ms >= 0),
    -- No tick before starts_at or after ends_at (NULL: none).
    starts_at         timestamptz,
    ends_at           timestamptz,
    -- A tick due while the schedule's last run is open: skipped, buffered
    -- (at most one, or buffer_max), started beside it, or started after
    -- cancelling it.
    overlap           text        NOT NULL DEFAULT 'skip'
                                  CHECK (overlap IN ('skip', 'buffer_one', 'buffer_all', 'allow', 'cancel_other')),
    buffer_max        integer     NOT NULL DEFAULT 100 CHECK (buffer_max >= 1),
    -- The ticks missed while no worker decided them (downtime, a pause):
    -- none started, the latest started, or all of them within
    -- catchup_window_ms, at most catchup_max.
    catchup           text        NOT NULL DEFAULT 'latest' CHECK (catchup IN ('none', 'latest', 'all')),
    catchup_window_ms bigint      NOT NULL DEFAULT 86400000 CHECK (catchup_window_ms > 0),
    catchup_max       integer     NOT NULL DEFAULT 100 CHECK (catchup_max BETWEEN 1 AND 1000),
    -- The next nominal tick not decided yet: NULL to be computed by the next
    -- worker (a schedule created or changed in SQL), 'infinity' when there
    -- is none (ended, or a spec that never fires).
    next_at           timestamptz CHECK (next_at > '-infinity'),
    -- After a change of its timing: the next tick is computed from here
    -- (the next tick of the old timing not decided yet), so that the ticks
    -- due since are decided, as its catch-up policy says, not lost.
    retimed_from      timestamptz,
    -- The last run a tick started, and the ticks buffered behind it.
    last_run_id       uuid,
    buffered          integer     NOT NULL DEFAULT 0 CHECK (buffered >= 0),
    -- Paused: no tick is decided until it is resumed (the ticks meanwhile
    -- are missed, and caught up as catchup says).
    paused_at         timestamptz,
    pause_note        text,
    -- Why the last worker that tried could not compute the ticks (a spec
    -- or zone written in SQL that does not parse, or one that worker's
    -- build cannot read); NULL once one could. Workers keep trying.
    error             text,
    -- The worker whose code declared it (runtime: Worker.RegisterSchedules),
    -- NULL for one made at run time; overridden_at is when a person last changed
    -- it, after which declarations no longer change it.
    declared_by       text,
    overridden_at     timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- Due schedules, by the database's clock: what a worker's pass reads.
CREATE INDEX schedules_due_idx ON {schema}.schedules (next_at) WHERE paused_at IS NULL;
-- Schedules with buffered ticks: each pass looks whether their last run ended.
CREATE INDEX schedules_buffered_idx ON {schema}.schedules (name) WHERE buffered > 0 AND paused_at IS NULL;

-- schedule_ticks: every tick decided, with what was decided. A buffered
-- tick gets its run (run_id, started_at) when the run before it ends.
CREATE TABLE {schema}.schedule_ticks (
    schedule   text        NOT NULL,
    nominal_at timestamptz NOT NULL,
    decided_at timestamptz NOT NULL DEFAULT now(),
    -- started: its run started; skipped: its schedule's last run was open
    -- (overlap skip, or a full buffer); missed: no worker decided it in
    -- time (catch-up); buffered: to start when the open run ends;
    -- triggered: started by hand, outside the spec; backfilled: started by
    -- a backfill of its range, after it had been missed or skipped (its
    -- decided_at kept) or before any worker decided it.
    decision   text        NOT NULL CHECK (decision IN ('started', 'skipped', 'missed', 'buffered', 'triggered', 'backfilled')),
    run_id     uuid,
    started_at timestamptz,
    -- The run this tick's start cancelled (overlap cancel_other).
    cancelled_run_id uuid,
    -- The worker (its label) or the database role that decided it.
    decided_by text        NOT NULL,
    PRIMARY KEY (schedule, nominal_at)
);

-- A schedule's buffered ticks, oldest first.
CREATE INDEX schedule_ticks_buffered_idx ON {schema}.schedule_ticks (schedule, nominal_at)
    WHERE decision = 'buffered' AND run_id IS NULL;

-- Deleting a schedule deletes its ticks (its runs stay).
ALTER TABLE {schema}.schedule_ticks ADD CONSTRAINT schedule_ticks_schedule_fkey
    FOREIGN KEY (schedule) REFERENCES {schema}.schedules (name) ON DELETE CASCADE;

-- The audit log's actions gain 'schedule': a schedule created, changed,
-- paused, resumed or deleted, by code or by hand (not the bookkeeping of
-- its ticks), by the trigger below; filter holds the schedule and its
-- settings before and after.
SELECT {schema}._allow_audit_action('schedule');

-- _schedule_settings is what a person sets of a schedule, as JSON.
CREATE FUNCTION {schema}._schedule_settings(s {schema}.schedules)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('spec', s.spec, 'time_zone', s.time_zone, 'workflow', s.workflow, 'queue', s.queue,
        'input', s.input, 'priority', s.priority, 'jitter_ms', s.jitter_ms, 'starts_at', s.starts_at, 'ends_at', s.ends_at,
        'overlap', s.overlap, 'buffer_max', s.buffer_max, 'catchup', s.catchup, 'catchup_window_ms', s.catchup_window_ms,
        'catchup_max', s.catchup_max, 'paused', s.paused_at IS NOT NULL)
$$;

-- _schedule_audited is _schedule_settings and what else a person may move
-- by hand: the next tick, the pause's note.
CREATE FUNCTION {schema}._schedule_audited(s {schema}.schedules)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT {schema}._schedule_settings(s) || jsonb_build_object('next_at', s.next_at, 'pause_note', s.pause_note)
$$;

CREATE FUNCTION {schema}._audit_schedule() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    before jsonb;
    after jsonb;
    how text;
BEGIN
    -- A worker's pass (tenure.ticking set for its transaction) writes
    -- bookkeeping alone: the next tick, the last run, the buffer.
    IF pg_catalog.current_setting('tenure.ticking', true) = 'on' THEN
        RETURN NULL;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        before := {schema}._schedule_audited(OLD);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        after := {schema}._schedule_audited(NEW);
    END IF;
    IF before IS NOT DISTINCT FROM after THEN
        RETURN NULL;
    END IF;
    how := CASE WHEN TG_OP = 'INSERT' THEN 'created' WHEN TG_OP = 'DELETE' THEN 'deleted'
                WHEN (before->'paused') <> (after->'paused') AND before - 'paused' - 'pause_note' = after - 'paused' - 'pause_note'
                THEN CASE WHEN (after->>'paused')::boolean THEN 'paused' ELSE 'resumed' END
                ELSE 'changed' END;
    INSERT INTO {schema}.audit_log (action, runs, filter, note)
    VALUES ('schedule', 0,
            jsonb_build_object('schedule', coalesce(NEW.name, OLD.name), 'change', how, 'before', before, 'after', after,
                               'by', coalesce(nullif(pg_catalog.current_setting('tenure.schedule_by', true), ''), 'person')),
            nullif(pg_catalog.current_setting('tenure.note', true), ''));
    RETURN NULL;
END
$$;

CREATE TRIGGER schedules_audit AFTER INSERT OR UPDATE OR DELETE ON {schema}.schedules
    FOR EACH ROW EXECUTE FUNCTION {schema}._audit_schedule();

-- A change of when a schedule ticks (its spec, zone or bounds), by code or
-- by hand, has its next tick computed again by the next worker (NULL),
-- from the old timing's next tick not decided yet when that is past
-- (retimed_from: the ticks due since are decided, not lost), and clears
-- its error.
CREATE FUNCTION {schema}._schedule_retimed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.retimed_from := CASE WHEN OLD.next_at < now() THEN OLD.next_at ELSE OLD.retimed_from END;
    NEW.next_at := NULL;
    NEW.error := NULL;
    RETURN NEW;
END
$$;

CREATE TRIGGER schedules_retimed BEFORE UPDATE ON {schema}.schedules
    FOR EACH ROW
    WHEN ((OLD.spec, OLD.time_zone, OLD.starts_at, OLD.ends_at) IS DISTINCT FROM (NEW.spec, NEW.time_zone, NEW.starts_at, NEW.ends_at))
    EXECUTE FUNCTION {schema}._schedule_retimed();

-- schedule_status: per schedule, where it stands and its last tick: what
-- was decided, when, how late (lag), and its ticks by decision over the
-- last day, with the largest lag of the workers' decisions (not of a
-- trigger's or a backfill's, decided by hand). It reads each schedule's ticks of a day by the ticks' primary
-- key: for dashboards, not for every request.
CREATE VIEW {schema}.schedule_status AS
SELECT s.name, s.spec, s.time_zone, s.workflow, s.queue,
       CASE WHEN s.next_at < 'infinity' THEN s.next_at END AS next_at, s.next_at = 'infinity' AS ended,
       s.paused_at, s.pause_note, s.error, s.buffered, s.last_run_id,
       (SELECT r.status FROM {schema}.runs r WHERE r.id = s.last_run_id) AS last_run_status,
       l.nominal_at AS last_tick_at, l.decision AS last_decision, l.decided_at - l.nominal_at AS last_lag,
       coalesce(d.started, 0) AS started_1d, coalesce(d.skipped, 0) AS skipped_1d, coalesce(d.missed, 0) AS missed_1d,
       d.max_lag AS max_lag_1d
FROM {schema}.schedules s
LEFT JOIN LATERAL (SELECT t.nominal_at, t.decision, t.decided_at FROM {schema}.schedule_ticks t
                   WHERE t.schedule = s.name ORDER BY t.nominal_at DESC LIMIT 1) AS l ON true
LEFT JOIN LATERAL (SELECT count(*) FILTER (WHERE t.decision IN ('started', 'triggered', 'backfilled')) AS started,
                          count(*) FILTER (WHERE t.decision = 'skipped') AS skipped,
                          count(*) FILTER (WHERE t.decision = 'missed') AS missed,
                          max(t.decided_at - t.nominal_at)
                              FILTER (WHERE t.decision IN ('started', 'skipped', 'missed', 'buffered')) AS max_lag
                   FROM {schema}.schedule_ticks t
                   WHERE t.schedule = s.name AND t.nominal_at > now() - interval '1 day') AS d ON true;
