-- Tenure schema, version 16: flow control. A named downstream (a payment
-- API, a mail relay) has limits that activities calling it share: a
-- concurrency limit, a rate limit, a retry budget and a circuit breaker.
-- Capacity is something the database locks, never a counter read outside
-- the lock that admits: a slot row per unit of a concurrency limit, one
-- theoretical arrival time per key for a rate limit (GCRA, by the database
-- clock), one state row per downstream for its breaker and retry budget.
--
-- Workers take and give back capacity in their group commit, through one
-- call of _flow per batch that carries any: an attempt's start is admitted
-- or denied in the transaction that records it. A denied step parks its run
-- as a signal wait does (no lease, no attempt, nothing charged): until a
-- release wakes it (concurrency, breaker), or until the time the limit
-- gives it (rate, retry budget). docs/flow-control.md is the reference.

-- downstreams: the limits, one row per named downstream. Workers insert the
-- row of a downstream their code declares (declare_downstream) and keep its
-- limits as declared, until a person changes them (set_downstream, or an
-- UPDATE): from then on overridden_at is set and the declaration is only
-- recorded (declared), never applied, until reset_downstream. Every change
-- of a limit is an audit_log row (action 'limits'), by the trigger below.
CREATE TABLE {schema}.downstreams (
    name                text        PRIMARY KEY CHECK (name <> ''),
    -- Runs holding capacity at once, per key; NULL: no limit.
    concurrency         integer     CHECK (concurrency > 0),
    -- At most rate starts per rate_interval_ms, per key, with bursts of up
    -- to burst at once; NULL: no limit.
    rate                integer     CHECK (rate > 0),
    rate_interval_ms    bigint      CHECK (rate_interval_ms > 0),
    burst               integer     CHECK (burst > 0),
    -- Retries (an attempt after an error) at most retry_ratio of first
    -- attempts plus retry_per_s; NULL: no retry budget.
    retry_ratio         float8      CHECK (retry_ratio >= 0),
    retry_per_s         float8      CHECK (retry_per_s >= 0),
    -- The breaker opens when, within breaker_window_ms, at least
    -- breaker_min_calls calls ended and breaker_error_ratio of them in an
    -- error; it stays open breaker_open_ms, then lets one probe through.
    -- NULL breaker_error_ratio: no breaker (it can still be opened by hand).
    breaker_error_ratio float8      CHECK (breaker_error_ratio > 0 AND breaker_error_ratio <= 1),
    breaker_min_calls   integer     NOT NULL DEFAULT 10 CHECK (breaker_min_calls > 0),
    breaker_window_ms   bigint      NOT NULL DEFAULT 10000 CHECK (breaker_window_ms > 0),
    breaker_open_ms     bigint      NOT NULL DEFAULT 5000 CHECK (breaker_open_ms > 0),
    -- What holds a slot: an activity's attempt ('attempt', from its start
    -- to its end, fenced by the lease's epoch), or a whole run ('run', the
    -- downstream 'workflow:<name>' of a workflow's concurrency key, from its
    -- first execution to its end, through suspensions and rescues).
    holds               text        NOT NULL DEFAULT 'attempt' CHECK (holds IN ('attempt', 'run')),
    -- What code declared last, by which worker, when.
    declared            jsonb,
    declared_by         text,
    declared_at         timestamptz,
    -- Set when a person changed the limits: declarations no longer apply.
    overridden_at       timestamptz,
    overridden_by       text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    CHECK ((rate IS NULL) = (rate_interval_ms IS NULL) AND (rate IS NULL) = (burst IS NULL)),
    CHECK ((retry_ratio IS NULL) = (retry_per_s IS NULL))
);

-- downstream_state: the breaker and the retry budget of a downstream, and
-- its counters. Locked (FOR UPDATE, in name order) by every call of _flow
-- that admits to the downstream or gives back to it.
CREATE TABLE {schema}.downstream_state (
    name            text        PRIMARY KEY,
    breaker         text        NOT NULL DEFAULT 'closed' CHECK (breaker IN ('closed', 'open', 'half_open')),
    breaker_since   timestamptz NOT NULL DEFAULT now(),
    -- Opened by hand: stays open until closed by hand.
    breaker_manual  boolean     NOT NULL DEFAULT false,
    open_until      timestamptz,
    -- The probe of a half-open breaker, fenced by its run's epoch.
    probe_run       uuid,
    probe_epoch     bigint,
    -- A waiter was given open_until as its due time: it will be the probe.
    probe_due       boolean     NOT NULL DEFAULT false,
    window_start    timestamptz NOT NULL DEFAULT now(),
    window_calls    integer     NOT NULL DEFAULT 0,
    window_errors   integer     NOT NULL DEFAULT 0,
    -- Calls that failed since the last that succeeded.
    error_streak    integer     NOT NULL DEFAULT 0,
    -- The retry budget's balance (retries it allows now) and its time.
    tokens          float8,
    tokens_at       timestamptz,
    -- When the next run denied by the rate of retries is due: denied runs
    -- are spread out, not all woken at once.
    retry_wake      timestamptz,
    admitted        bigint      NOT NULL DEFAULT 0,
    retries         bigint      NOT NULL DEFAULT 0,
    denied_concurrency bigint   NOT NULL DEFAULT 0,
    denied_rate     bigint      NOT NULL DEFAULT 0,
    denied_breaker  bigint      NOT NULL DEFAULT 0,
    denied_budget   bigint      NOT NULL DEFAULT 0,
    errors          bigint      NOT NULL DEFAULT 0,
    calls           bigint      NOT NULL DEFAULT 0
);

-- flow_keys: one row per key of a downstream (the key an activity takes from
-- its input; '' without one): its rate limit's theoretical arrival time, and
-- the lock that concurrency admissions and releases of the key take.
CREATE TABLE {schema}.flow_keys (
    downstream text        NOT NULL,
    key        text        NOT NULL,
    tat        timestamptz,
    -- When the next run denied by the rate is due (see retry_wake).
    rate_wake  timestamptz,
    PRIMARY KEY (downstream, key)
);

-- flow_slots: the units of a concurrency limit, slot 1..concurrency of each
-- key. A slot is held by (run_id, epoch) from its attempt's start to its
-- end; a holder whose lease moved on (another epoch, not running, expired)
-- holds nothing: a dead worker's capacity returns when its lease expires.
CREATE TABLE {schema}.flow_slots (
    downstream text        NOT NULL,
    key        text        NOT NULL,
    slot       integer     NOT NULL CHECK (slot > 0),
    run_id     uuid,
    epoch      bigint,
    step       integer,
    taken_at   timestamptz,
    PRIMARY KEY (downstream, key, slot)
);

-- The slots of a key that name a holder: what a give frees (by the key and
-- the run, whatever the statistics say: with an index of the key alone, a
-- plan cached on young tables read every slot held of the key at each
-- give), and what _live_holders, flow_sweep and downstream_status count,
-- without reading the key's free slots (a limit of 100,000 has 100,000
-- rows; reading them took 30 to 130 ms a take).
CREATE INDEX flow_slots_holder_idx ON {schema}.flow_slots (downstream, key, run_id) WHERE run_id IS NOT NULL;
-- The free slots of a key, lowest first: an admission takes one without
-- reading the slots held (counting them and looking up each holder's run
-- cost 0.3 ms a take with 100 held).
CREATE INDEX flow_slots_free_idx ON {schema}.flow_slots (downstream, key, slot) WHERE run_id IS NULL;

-- flow_waiters: runs parked until capacity returns, oldest first (a
-- concurrency slot given back, a breaker closed).
CREATE TABLE {schema}.flow_waiters (
    id         bigserial   PRIMARY KEY,
    downstream text        NOT NULL,
    key        text        NOT NULL,
    cause      text        NOT NULL CHECK (cause IN ('concurrency', 'breaker')),
    run_id     uuid        NOT NULL,
    since      timestamptz NOT NULL
);

CREATE INDEX flow_waiters_queue_idx ON {schema}.flow_waiters (downstream, cause, key, since, id);
CREATE INDEX flow_waiters_run_idx ON {schema}.flow_waiters (run_id);

-- throttles: every wait of a step on a limit, as history: from its first
-- denial (began_at) to its admission (ended_at, the start of the attempt it
-- waited for), with the cause of its last denial and how many there were.
CREATE TABLE {schema}.throttles (
    id         bigserial   PRIMARY KEY,
    run_id     uuid        NOT NULL,
    step       integer     NOT NULL,
    downstream text        NOT NULL,
    key        text        NOT NULL,
    cause      text        NOT NULL CHECK (cause IN ('concurrency', 'rate', 'breaker', 'retry-budget')),
    denials    integer     NOT NULL DEFAULT 1,
    -- The attempt admitted when the wait ended.
    attempt    integer,
    began_at   timestamptz NOT NULL DEFAULT now(),
    ended_at   timestamptz
);

CREATE INDEX throttles_run_idx ON {schema}.throttles (run_id, step);
-- A downstream's open waits (ended_at NULL sorts last among its waits). Not
-- a partial index: one whose predicate (ended_at IS NULL) a query implies
-- is a candidate for it even without a condition on its columns, and plans
-- cached on young tables chose such an index to walk every open wait (of
-- every downstream, of every run) for a lookup of one.
CREATE INDEX throttles_downstream_idx ON {schema}.throttles (downstream, ended_at);

-- _waiting counts the steps waiting on a downstream's limits now: open
-- throttles of runs not yet ended (a run cancelled while it waited leaves
-- its throttle open, and is not counted).
CREATE FUNCTION {schema}._waiting(ds text) RETURNS bigint
LANGUAGE sql STABLE AS $$
    -- (The open waits by the downstream's index alone, OFFSET 0: joined to
    -- runs, a plan of young tables walked another index of every wait.)
    SELECT count(*) FROM (SELECT t.run_id FROM {schema}.throttles t WHERE t.downstream = ds AND t.ended_at IS NULL OFFSET 0) AS t
    WHERE EXISTS (SELECT 1 FROM {schema}.runs r WHERE r.id = t.run_id AND r.status IN ('queued', 'running'))
$$;

-- A deleted run takes its throttles and waits with it.
CREATE FUNCTION {schema}._delete_flow_of_runs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM {schema}.throttles t USING gone g WHERE t.run_id = g.id;
    DELETE FROM {schema}.flow_waiters w USING gone g WHERE w.run_id = g.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_delete_flow AFTER DELETE ON {schema}.runs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}._delete_flow_of_runs();

CREATE FUNCTION {schema}._truncate_flow_of_runs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    TRUNCATE {schema}.throttles, {schema}.flow_waiters;
    UPDATE {schema}.flow_slots SET run_id = NULL, epoch = NULL, step = NULL, taken_at = NULL WHERE run_id IS NOT NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_truncate_flow AFTER TRUNCATE ON {schema}.runs
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}._truncate_flow_of_runs();

-- The audit log's actions gain 'limits' (a downstream's limits changed) and
-- 'breaker' (a breaker changed state), read back from the constraint as in
-- migration 14. Their details are in filter: the downstream, and the limits
-- before and after, or the breaker's states and why.
DO $$
DECLARE
    actions text[];
BEGIN
    SELECT array_agg(m.v[1] ORDER BY m.n) INTO actions
    FROM pg_catalog.pg_constraint c,
         regexp_matches(pg_catalog.pg_get_constraintdef(c.oid), '''([^'']*)''::text', 'g') WITH ORDINALITY AS m(v, n)
    WHERE c.conrelid = '{schema}.audit_log'::regclass AND c.conname = 'audit_log_action_check';
    IF actions IS NULL THEN
        RAISE EXCEPTION 'migration 16: audit_log_action_check lists no action';
    END IF;
    EXECUTE format('ALTER TABLE {schema}.audit_log DROP CONSTRAINT audit_log_action_check, '
                   'ADD CONSTRAINT audit_log_action_check CHECK (action IN (%s))',
                   (SELECT string_agg(quote_literal(a), ', ') FROM unnest(actions || ARRAY['limits', 'breaker']) AS a));
END
$$;

-- _limits is a downstream's limits as JSON, as audit rows and the CLI show
-- them (absent keys: no such limit).
CREATE FUNCTION {schema}._limits(d {schema}.downstreams) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'concurrency', d.concurrency, 'rate', d.rate, 'rate_interval_ms', d.rate_interval_ms, 'burst', d.burst,
        'retry_ratio', d.retry_ratio, 'retry_per_s', d.retry_per_s,
        'breaker_error_ratio', d.breaker_error_ratio, 'breaker_min_calls', d.breaker_min_calls,
        'breaker_window_ms', d.breaker_window_ms, 'breaker_open_ms', d.breaker_open_ms))
$$;

-- Every change of a downstream's limits, by whatever means, is audited: the
-- actor is the session's role, the note tenure.note when the session set it
-- (set_downstream does). A declaration applied by a worker is audited too.
CREATE FUNCTION {schema}._audit_limits() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    was jsonb := CASE WHEN TG_OP = 'INSERT' THEN NULL ELSE {schema}._limits(OLD) END;
    now_ jsonb := CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE {schema}._limits(NEW) END;
BEGIN
    IF was IS DISTINCT FROM now_ THEN
        INSERT INTO {schema}.audit_log (actor, action, runs, filter, note)
        VALUES (session_user, 'limits', 0,
                jsonb_build_object('downstream', coalesce(NEW.name, OLD.name), 'before', was, 'after', now_,
                                   'by', coalesce(nullif(pg_catalog.current_setting('tenure.by', true), ''), 'person')),
                nullif(pg_catalog.current_setting('tenure.note', true), ''));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER downstreams_audit AFTER INSERT OR UPDATE OR DELETE ON {schema}.downstreams
    FOR EACH ROW EXECUTE FUNCTION {schema}._audit_limits();

-- A person's UPDATE of the limits marks the row overridden, so that the
-- next worker's declaration does not undo it. declare_downstream and
-- reset_downstream say who they are through tenure.declaring.
CREATE FUNCTION {schema}._override_limits() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(pg_catalog.current_setting('tenure.declaring', true), '') = ''
       AND {schema}._limits(OLD) IS DISTINCT FROM {schema}._limits(NEW) THEN
        NEW.overridden_at := now();
        NEW.overridden_by := session_user;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER downstreams_override BEFORE UPDATE ON {schema}.downstreams
    FOR EACH ROW EXECUTE FUNCTION {schema}._override_limits();

-- declare_downstream records a downstream as code declares it (limits is
-- _limits' JSON) and applies it unless a person overrode the limits. by is
-- the worker's label. Called by each worker once per downstream it uses.
CREATE FUNCTION {schema}.declare_downstream(name text, limits jsonb, by text, holds text DEFAULT 'attempt')
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_catalog.set_config('tenure.declaring', 'on', true);
    PERFORM pg_catalog.set_config('tenure.by', 'declaration by ' || by, true);
    INSERT INTO {schema}.downstreams AS d (name, concurrency, rate, rate_interval_ms, burst, retry_ratio, retry_per_s,
        breaker_error_ratio, breaker_min_calls, breaker_window_ms, breaker_open_ms, declared, declared_by, declared_at, holds)
    VALUES (declare_downstream.name, (limits->>'concurrency')::int, (limits->>'rate')::int,
        (limits->>'rate_interval_ms')::bigint, (limits->>'burst')::int,
        (limits->>'retry_ratio')::float8, (limits->>'retry_per_s')::float8,
        (limits->>'breaker_error_ratio')::float8, coalesce((limits->>'breaker_min_calls')::int, 10),
        coalesce((limits->>'breaker_window_ms')::bigint, 10000), coalesce((limits->>'breaker_open_ms')::bigint, 5000),
        limits, by, now(), declare_downstream.holds)
    ON CONFLICT ON CONSTRAINT downstreams_pkey DO UPDATE SET
        declared = EXCLUDED.declared, declared_by = EXCLUDED.declared_by, declared_at = EXCLUDED.declared_at,
        holds = EXCLUDED.holds,
        concurrency = CASE WHEN d.overridden_at IS NULL THEN EXCLUDED.concurrency ELSE d.concurrency END,
        rate = CASE WHEN d.overridden_at IS NULL THEN EXCLUDED.rate ELSE d.rate END,
        rate_interval_ms = CASE WHEN d.overridden_at IS NULL THEN EXCLUDED.rate_interval_ms ELSE d.rate_interval_ms END,
        burst = CASE WHEN d.overridden_at IS NULL THEN EXCLUDED.burst ELSE d.burst END,
        retry_ratio = CASE WHEN d.overridden_at IS NULL THEN EXCLUDED.retry_ratio ELSE d.retry_ratio END,
        retry_per_s = CASE WHEN d.overridden_at IS NULL THEN EXCLUDED.retry_per_s ELSE d.retry_per_s END,
        breaker_error_ratio = CASE WHEN d.overridden_at IS NULL THEN EXCLUDED.breaker_error_ratio ELSE d.breaker_error_ratio END,
        breaker_min_calls = CASE WHEN d.overridden_at IS NULL THEN EXCLUDED.breaker_min_calls ELSE d.breaker_min_calls END,
        breaker_window_ms = CASE WHEN d.overridden_at IS NULL THEN EXCLUDED.breaker_window_ms ELSE d.breaker_window_ms END,
        breaker_open_ms = CASE WHEN d.overridden_at IS NULL THEN EXCLUDED.breaker_open_ms ELSE d.breaker_open_ms END
    WHERE d.declared IS DISTINCT FROM EXCLUDED.declared OR d.declared_by IS DISTINCT FROM EXCLUDED.declared_by;
    INSERT INTO {schema}.downstream_state (name) VALUES (declare_downstream.name) ON CONFLICT DO NOTHING;
    PERFORM pg_catalog.set_config('tenure.declaring', '', true);
    PERFORM pg_catalog.set_config('tenure.by', '', true);
END
$$;

-- set_downstream changes a downstream's limits by hand, audited with note:
-- limits holds the keys to change (those of _limits; a JSON null removes a
-- limit). From then on, declarations no longer apply (reset_downstream).
-- Runs waiting on a concurrency limit that the change raises or removes are
-- woken at once (flow_sweep, in this transaction), as many as it gives room
-- to; runs waiting on a rate or a retry budget keep the due time they were
-- given.
CREATE FUNCTION {schema}.set_downstream(name text, limits jsonb, note text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    d {schema}.downstreams;
    k text;
BEGIN
    FOR k IN SELECT jsonb_object_keys(limits) LOOP
        IF k NOT IN ('concurrency', 'rate', 'rate_interval_ms', 'burst', 'retry_ratio', 'retry_per_s',
                     'breaker_error_ratio', 'breaker_min_calls', 'breaker_window_ms', 'breaker_open_ms') THEN
            RAISE EXCEPTION 'set_downstream: unknown limit %', k USING ERRCODE = '22023',
                HINT = 'limits are concurrency, rate, rate_interval_ms, burst, retry_ratio, retry_per_s, breaker_error_ratio, breaker_min_calls, breaker_window_ms, breaker_open_ms';
        END IF;
    END LOOP;
    PERFORM pg_catalog.set_config('tenure.note', coalesce(note, ''), true);
    UPDATE {schema}.downstreams x SET
        concurrency = CASE WHEN limits ? 'concurrency' THEN (limits->>'concurrency')::int ELSE x.concurrency END,
        rate = CASE WHEN limits ? 'rate' THEN (limits->>'rate')::int ELSE x.rate END,
        rate_interval_ms = CASE WHEN limits ? 'rate_interval_ms' THEN (limits->>'rate_interval_ms')::bigint
                                WHEN limits ? 'rate' AND limits->'rate' = 'null' THEN NULL
                                WHEN limits ? 'rate' AND x.rate_interval_ms IS NULL THEN 1000
                                ELSE x.rate_interval_ms END,
        burst = CASE WHEN limits ? 'burst' THEN (limits->>'burst')::int
                     WHEN limits ? 'rate' AND limits->'rate' = 'null' THEN NULL
                     WHEN limits ? 'rate' AND x.burst IS NULL THEN 1
                     ELSE x.burst END,
        retry_ratio = CASE WHEN limits ? 'retry_ratio' THEN (limits->>'retry_ratio')::float8
                           WHEN limits ? 'retry_per_s' AND limits->'retry_per_s' = 'null' THEN NULL
                           WHEN limits ? 'retry_per_s' AND x.retry_ratio IS NULL THEN 0
                           ELSE x.retry_ratio END,
        retry_per_s = CASE WHEN limits ? 'retry_per_s' THEN (limits->>'retry_per_s')::float8
                           WHEN limits ? 'retry_ratio' AND limits->'retry_ratio' = 'null' THEN NULL
                           WHEN limits ? 'retry_ratio' AND x.retry_per_s IS NULL THEN 0
                           ELSE x.retry_per_s END,
        breaker_error_ratio = CASE WHEN limits ? 'breaker_error_ratio' THEN (limits->>'breaker_error_ratio')::float8 ELSE x.breaker_error_ratio END,
        breaker_min_calls = coalesce(CASE WHEN limits ? 'breaker_min_calls' THEN (limits->>'breaker_min_calls')::int END, x.breaker_min_calls),
        breaker_window_ms = coalesce(CASE WHEN limits ? 'breaker_window_ms' THEN (limits->>'breaker_window_ms')::bigint END, x.breaker_window_ms),
        breaker_open_ms = coalesce(CASE WHEN limits ? 'breaker_open_ms' THEN (limits->>'breaker_open_ms')::bigint END, x.breaker_open_ms)
    WHERE x.name = set_downstream.name
    RETURNING * INTO d;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'set_downstream: no downstream %', name USING ERRCODE = 'P0002',
            HINT = 'a downstream exists once a worker whose code declares it has started';
    END IF;
    PERFORM pg_catalog.set_config('tenure.note', '', true);
    PERFORM {schema}.flow_sweep(ARRAY[set_downstream.name]);
    PERFORM pg_catalog.pg_notify({schema}.runs_channel(), '');
    RETURN {schema}._limits(d);
END
$$;

-- reset_downstream gives a downstream back to its declaration: the limits
-- code declared last apply again (audited), and declarations apply from
-- then on. Runs waiting on a concurrency limit it raises are woken, as
-- set_downstream wakes them.
CREATE FUNCTION {schema}.reset_downstream(name text, note text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    d {schema}.downstreams;
BEGIN
    SELECT * INTO d FROM {schema}.downstreams x WHERE x.name = reset_downstream.name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'reset_downstream: no downstream %', name USING ERRCODE = 'P0002';
    END IF;
    PERFORM pg_catalog.set_config('tenure.note', coalesce(note, ''), true);
    PERFORM pg_catalog.set_config('tenure.declaring', 'on', true);
    PERFORM pg_catalog.set_config('tenure.by', 'reset to the declaration', true);
    UPDATE {schema}.downstreams x SET overridden_at = NULL, overridden_by = NULL,
        concurrency = (d.declared->>'concurrency')::int, rate = (d.declared->>'rate')::int,
        rate_interval_ms = (d.declared->>'rate_interval_ms')::bigint, burst = (d.declared->>'burst')::int,
        retry_ratio = (d.declared->>'retry_ratio')::float8, retry_per_s = (d.declared->>'retry_per_s')::float8,
        breaker_error_ratio = (d.declared->>'breaker_error_ratio')::float8,
        breaker_min_calls = coalesce((d.declared->>'breaker_min_calls')::int, 10),
        breaker_window_ms = coalesce((d.declared->>'breaker_window_ms')::bigint, 10000),
        breaker_open_ms = coalesce((d.declared->>'breaker_open_ms')::bigint, 5000)
    WHERE x.name = reset_downstream.name
    RETURNING * INTO d;
    PERFORM pg_catalog.set_config('tenure.declaring', '', true);
    PERFORM pg_catalog.set_config('tenure.by', '', true);
    PERFORM pg_catalog.set_config('tenure.note', '', true);
    PERFORM {schema}.flow_sweep(ARRAY[reset_downstream.name]);
    PERFORM pg_catalog.pg_notify({schema}.runs_channel(), '');
    RETURN {schema}._limits(d);
END
$$;

-- _breaker_to moves a (locked) downstream's breaker to state, with one
-- audit row saying why.
CREATE FUNCTION {schema}._breaker_to(ds text, state text, why text, by text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    was text;
BEGIN
    SELECT s.breaker INTO was FROM {schema}.downstream_state s WHERE s.name = ds;
    UPDATE {schema}.downstream_state s SET breaker = state, breaker_since = now(),
        probe_run = NULL, probe_epoch = NULL, probe_due = false,
        window_start = CASE WHEN state = 'closed' THEN now() ELSE s.window_start END,
        window_calls = CASE WHEN state = 'closed' THEN 0 ELSE s.window_calls END,
        window_errors = CASE WHEN state = 'closed' THEN 0 ELSE s.window_errors END,
        error_streak = CASE WHEN state = 'closed' THEN 0 ELSE s.error_streak END
    WHERE s.name = ds;
    INSERT INTO {schema}.audit_log (actor, action, runs, filter, note)
    VALUES (session_user, 'breaker', 0,
            jsonb_strip_nulls(jsonb_build_object('downstream', ds, 'from', was, 'to', state, 'by', by)), why);
END
$$;

-- _wake wakes up to n runs waiting on a downstream's key for cause, oldest
-- first, and returns how many it woke. A waiter whose run no longer waits
-- (cancelled, deleted, requeued) is dropped and the next one is woken
-- instead.
CREATE FUNCTION {schema}._wake(ds text, k text, why text, n integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    woken integer := 0;
    r uuid;
BEGIN
    IF n = 2147483647 THEN
        -- Every waiter (a breaker closed): one statement, not a loop. The
        -- loop below, each DELETE passing the index entries of the
        -- waiters it deleted before in this transaction, took 4.5 s for
        -- 6,482 waiters: the commit that closed the breaker outlasted the
        -- worker's statement timeout at every retry, the breaker stayed
        -- half open and every waiter parked. Each run is found by its
        -- primary key (= ANY of an array), whatever the statistics say.
        WITH gone AS (
            DELETE FROM {schema}.flow_waiters w
            WHERE w.downstream = ds AND w.cause = why AND w.key = k
            RETURNING w.run_id)
        UPDATE {schema}.runs r SET run_after = now(), updated_at = now()
        WHERE r.id = ANY (ARRAY(SELECT gone.run_id FROM gone))
          AND r.status = 'queued' AND r.waiting_for = 'limit:' || ds;
        GET DIAGNOSTICS woken = ROW_COUNT;
    ELSE
        WHILE woken < n LOOP
            DELETE FROM {schema}.flow_waiters w
            WHERE w.id = (SELECT x.id FROM {schema}.flow_waiters x
                          WHERE x.downstream = ds AND x.cause = why AND x.key = k
                          ORDER BY x.since, x.id LIMIT 1)
            RETURNING w.run_id INTO r;
            EXIT WHEN r IS NULL;
            -- Only a run still waiting on this downstream: a stale row (the
            -- run went on to wait on another) must not use up this wake.
            UPDATE {schema}.runs SET run_after = now(), updated_at = now()
            WHERE id = r AND status = 'queued' AND waiting_for = 'limit:' || ds;
            IF FOUND THEN
                woken := woken + 1;
            END IF;
            r := NULL;
        END LOOP;
    END IF;
    IF woken > 0 THEN
        PERFORM pg_catalog.pg_notify({schema}.runs_channel(), '');
    END IF;
    RETURN woken;
END
$$;

-- _holds says whether a slot's holder still holds it: for an attempt, its
-- lease (the same epoch, running, not expired); for a run (a workflow's
-- concurrency key), the run has not ended.
CREATE FUNCTION {schema}._holds(run uuid, ep bigint, by_run boolean)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT run IS NOT NULL AND EXISTS (
        SELECT 1 FROM {schema}.runs r
        WHERE r.id = run AND CASE WHEN by_run THEN r.status IN ('queued', 'running')
                                  ELSE r.epoch = ep AND r.status = 'running' AND r.lease_expires_at > now() END)
$$;

-- _live_holders counts the slots of a key whose holder still holds it: the
-- capacity in use.
CREATE FUNCTION {schema}._live_holders(ds text, k text)
RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT count(*)::int FROM {schema}.flow_slots s
    WHERE s.downstream = ds AND s.key = k AND s.run_id IS NOT NULL
      AND {schema}._holds(s.run_id, s.epoch,
                          coalesce((SELECT d.holds = 'run' FROM {schema}.downstreams d WHERE d.name = ds), false))
$$;

-- _flow is what a worker's group commit takes and gives back, in one call
-- per batch: gives are attempts that ended, each with its outcome ('ok',
-- 'error', or 'none': neither counts for the breaker); takes are attempts
-- about to start. Every downstream state row and key row involved is locked
-- first, in order, so that no admission reads capacity outside the lock and
-- no two batches deadlock. Returns one row per take: cause NULL when
-- admitted; else the cause of its denial and wait_ms, how long until it is
-- due again (NULL: until a release wakes it). A denied take's run is parked
-- here, in the same transaction: queued, its lease given up, waiting_for
-- 'limit:<downstream>'; the batch's start of its attempt then finds the
-- run no longer running and writes nothing.
--
-- A take of a downstream that runs hold (a workflow's concurrency key,
-- step 0) has a policy: 'queue' waits as above; 'cancel-newest' is denied
-- with cause 'cancel-newest' and not parked (its worker ends the run
-- cancelled); 'cancel-in-progress' asks the oldest holders to cancel, as
-- many as make room, and waits for their ends. A run that holds a slot
-- already is admitted again at once. again says that a write of the batch
-- may have committed before (store.Write.Again): only then is a take's
-- attempt looked for, to answer a repeat as its first try was.
--
-- An admitted take's row carries the slot it took (NULL: none, or a
-- repeat's), and a give may carry it back (give_slots, NULL where not
-- known): its slot is then found by its primary key, not among the key's
-- held slots.
CREATE FUNCTION {schema}._flow(
    give_runs uuid[], give_epochs bigint[], give_downstreams text[], give_keys text[], give_outcomes text[],
    take_runs uuid[], take_epochs bigint[], take_steps integer[], take_attempts integer[], take_downstreams text[],
    take_keys text[], take_retries boolean[], take_policies text[], by text, again boolean DEFAULT true,
    give_slots integer[] DEFAULT NULL)
RETURNS TABLE (run_id uuid, epoch bigint, cause text, wait_ms float8, slot integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    t record;
    d {schema}.downstreams;
    s {schema}.downstream_state; -- the takes' downstream's, changed here and saved once
    fk {schema}.flow_keys;
    why text;
    wait float8;
    probe boolean;
    em float8; -- the rate's emission interval, ms
    slot_no integer;
    held_slot integer; -- the slot a run holds already (a run's take)
    wake timestamptz;
    due timestamptz; -- when a denied take is due again; NULL: when woken
    tnow timestamptz; -- the take's time, once it holds the locks
    live uuid[]; -- the takes' runs running in their epochs
    repeats uuid[]; -- the takes whose attempt is recorded already
    adm_runs uuid[] := '{}'; -- the takes admitted: run, step, attempt, time
    adm_steps integer[] := '{}';
    adm_attempts integer[] := '{}';
    adm_at timestamptz[] := '{}';
    bulk_epochs bigint[];
    bulk_slots integer[];
    top integer; -- a key's highest slot
    th_ids bigint[]; -- the waits admissions end, with their ends
    th_at timestamptz[];
    th_attempts integer[];
BEGIN
    -- Lock: downstream states, then keys, each in order, each by its
    -- primary key (a lookup per row whatever the statistics say: a join
    -- was planned, on young tables, as a walk of every key). The rows
    -- missing (a downstream's or a key's first use), found without a lock,
    -- are inserted first, in order, as every batch does before it locks:
    -- no batch waits for an insert while it holds a lock another needs.
    IF (SELECT count(*) - count(l.one)
        FROM (SELECT DISTINCT y FROM unnest(give_downstreams || take_downstreams) AS y) AS y
        LEFT JOIN LATERAL (SELECT 1 AS one FROM {schema}.downstream_state x WHERE x.name = y.y OFFSET 0) AS l ON true) > 0 THEN
        INSERT INTO {schema}.downstream_state (name)
        SELECT DISTINCT x FROM unnest(give_downstreams || take_downstreams) AS x ORDER BY 1
        ON CONFLICT DO NOTHING;
    END IF;
    IF (SELECT count(*) - count(l.one)
        FROM (SELECT DISTINCT y.d, y.k FROM unnest(give_downstreams || take_downstreams, give_keys || take_keys) AS y(d, k)) AS y
        LEFT JOIN LATERAL (SELECT 1 AS one FROM {schema}.flow_keys x WHERE x.downstream = y.d AND x.key = y.k OFFSET 0) AS l ON true) > 0 THEN
        INSERT INTO {schema}.flow_keys (downstream, key)
        SELECT DISTINCT x.d, x.k FROM unnest(give_downstreams || take_downstreams, give_keys || take_keys) AS x(d, k) ORDER BY 1, 2
        ON CONFLICT DO NOTHING;
    END IF;
    PERFORM 1 FROM (SELECT DISTINCT y FROM unnest(give_downstreams || take_downstreams) AS y ORDER BY 1) AS y,
                   LATERAL (SELECT 1 FROM {schema}.downstream_state x WHERE x.name = y.y OFFSET 0 FOR UPDATE) AS l;
    PERFORM 1 FROM (SELECT DISTINCT y.d, y.k FROM unnest(give_downstreams || take_downstreams, give_keys || take_keys) AS y(d, k)
                    ORDER BY 1, 2) AS y,
                   LATERAL (SELECT 1 FROM {schema}.flow_keys x WHERE x.downstream = y.d AND x.key = y.k OFFSET 0 FOR UPDATE) AS l;

    IF cardinality(give_runs) > 0 THEN
        PERFORM {schema}._flow_gives(give_runs, give_epochs, give_downstreams, give_keys, give_outcomes, by, give_slots);
    END IF;
    IF coalesce(cardinality(take_runs), 0) = 0 THEN
        RETURN;
    END IF;

    -- What each take needs to know first, read for the batch at once: a
    -- repeat of a write whose commit the worker did not learn of (the
    -- connection lost during COMMIT) is answered as the first try was, its
    -- attempt recorded, admitted, charged once; a run no longer running in
    -- its epoch has nothing to admit. And each key taken from gets as many
    -- free slots as it has takes, within its limit.
    repeats := '{}';
    IF again THEN -- (a first try's attempt is never recorded yet)
        repeats := ARRAY(SELECT x.r FROM unnest(take_runs, take_steps, take_attempts) AS x(r, st, a)
                         WHERE x.a > 0 AND EXISTS (SELECT 1 FROM {schema}.attempts a
                                                   WHERE a.run_id = x.r AND a.step = x.st AND a.attempt = x.a));
    END IF;
    live := ARRAY(SELECT x.r FROM unnest(take_runs, take_epochs) AS x(r, e),
                         LATERAL (SELECT r.status FROM {schema}.runs r WHERE r.id = x.r AND r.epoch = x.e OFFSET 0) AS h
                  WHERE h.status = 'running'); -- each run by its primary key, as the commit's fence finds it
    FOR t IN SELECT y.d, y.k, count(*)::int AS c, x.concurrency, x.holds = 'run' AS by_run
             FROM unnest(take_downstreams, take_keys) AS y(d, k)
             JOIN {schema}.downstreams x ON x.name = y.d WHERE x.concurrency IS NOT NULL
             GROUP BY y.d, y.k, x.concurrency, x.holds ORDER BY 1, 2 LOOP
        -- (A statement each, its values parameters of the index's search.)
        -- Above a lowered limit, a slot goes once it is free or its holder
        -- holds it no more: while one is held, each take counts the
        -- holders (_flow_full).
        top := coalesce((SELECT max(z.slot) FROM {schema}.flow_slots z WHERE z.downstream = t.d AND z.key = t.k), 0);
        IF top > t.concurrency THEN
            DELETE FROM {schema}.flow_slots z
            WHERE z.downstream = t.d AND z.key = t.k AND z.slot > t.concurrency
              AND (z.run_id IS NULL OR NOT {schema}._holds(z.run_id, z.epoch, t.by_run));
        ELSIF top < t.concurrency AND (SELECT count(*) FROM (
                SELECT 1 FROM {schema}.flow_slots z WHERE z.downstream = t.d AND z.key = t.k AND z.run_id IS NULL
                LIMIT t.c) AS f) < t.c THEN
            -- Slots are made as they are needed, never above the limit, at
            -- least doubling their number: a limit of 100,000 that 100 runs
            -- use costs 128 rows, not 100,000 (made in 0.4 s).
            INSERT INTO {schema}.flow_slots (downstream, key, slot)
            SELECT t.d, t.k, generate_series(top + 1, least(t.concurrency, top + greatest(t.c, top)))
            ON CONFLICT DO NOTHING;
        END IF;
    END LOOP;

    -- First the takes that only a free slot could deny, a statement per
    -- downstream (_flow_bulk): an attempt under a limit that does not bind
    -- costs about what one under none does.
    SELECT coalesce(array_agg(b.run_id), '{}'), coalesce(array_agg(b.epoch), '{}'),
           coalesce(array_agg(b.step), '{}'), coalesce(array_agg(b.attempt), '{}'), coalesce(array_agg(b.slot), '{}')
    INTO adm_runs, bulk_epochs, adm_steps, adm_attempts, bulk_slots
    FROM (SELECT DISTINCT y AS ds FROM unnest(take_downstreams) AS y ORDER BY 1) AS y,
         LATERAL {schema}._flow_bulk(y.ds, take_runs, take_epochs, take_steps, take_attempts, take_downstreams, take_keys,
                                     take_retries, live, repeats) AS b;
    IF cardinality(adm_runs) > 0 THEN
        adm_at := array_fill(clock_timestamp(), ARRAY[cardinality(adm_runs)]);
        RETURN QUERY SELECT x.r, x.e, NULL::text, NULL::float8, x.sl FROM unnest(adm_runs, bulk_epochs, bulk_slots) AS x(r, e, sl);
    END IF;

    -- Then the others, a downstream at a time, in the batch's order: the
    -- breaker, the retry budget, the concurrency limit, the rate; capacity
    -- is taken only when all admit. The downstream's state row is changed
    -- in s and written once (_flow_save), not once per take.
    FOR t IN SELECT * FROM unnest(take_runs, take_epochs, take_steps, take_attempts, take_downstreams, take_keys, take_retries, take_policies)
                 WITH ORDINALITY AS x(run_id, epoch, step, attempt, downstream, key, retry, policy, n)
             WHERE NOT x.run_id = ANY (adm_runs) ORDER BY x.downstream, n LOOP
        IF t.run_id = ANY (repeats) THEN
            run_id := t.run_id; epoch := t.epoch; cause := NULL; wait_ms := NULL; slot := NULL;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF NOT t.run_id = ANY (live) THEN
            -- Parked by the first try of this write: denied again.
            SELECT th.cause, CASE WHEN r.run_after = 'infinity' THEN NULL
                                  ELSE greatest(extract(epoch FROM r.run_after - clock_timestamp()) * 1000, 0) END
            INTO why, wait
            FROM {schema}.runs r
            JOIN {schema}.throttles th ON th.run_id = r.id AND th.step = t.step AND th.ended_at IS NULL
            WHERE r.id = t.run_id AND r.epoch = t.epoch AND r.status = 'queued' AND r.waiting_for = 'limit:' || t.downstream;
            IF FOUND THEN
                run_id := t.run_id; epoch := t.epoch; cause := why; wait_ms := wait; slot := NULL;
                RETURN NEXT;
            END IF;
            CONTINUE; -- else the lease is lost: nothing to admit; the start's fence refuses it
        END IF;
        IF s.name IS DISTINCT FROM t.downstream THEN
            IF s.name IS NOT NULL THEN
                PERFORM {schema}._flow_save(s);
            END IF;
            SELECT * INTO d FROM {schema}.downstreams x WHERE x.name = t.downstream;
            SELECT * INTO s FROM {schema}.downstream_state x WHERE x.name = t.downstream;
        END IF;
        -- The clock, not the transaction's start: this take holds the locks
        -- now, after every release it waited for committed. It is the
        -- attempt's started_at too (tenure.admitted, read by the batch's
        -- start of attempts), so the ledger shows the very times the limits
        -- were checked at, and never a start before the end that made room.
        tnow := clock_timestamp();
        why := NULL; wait := NULL; due := NULL; probe := false; slot_no := NULL;
        IF s.breaker = 'open' AND (s.breaker_manual OR s.open_until > now()) THEN
            why := 'breaker';
            IF NOT s.breaker_manual AND NOT s.probe_due THEN
                -- This run will be the probe: due when the breaker half-opens.
                due := s.open_until;
                s.probe_due := true;
            END IF;
        ELSIF s.breaker = 'open' OR (s.breaker = 'half_open' AND NOT EXISTS (
                SELECT 1 FROM {schema}.runs r WHERE r.id = s.probe_run AND r.epoch = s.probe_epoch
                  AND r.status = 'running' AND r.lease_expires_at > now())) THEN
            probe := true; -- open past its time, or a probe that died: this one probes
        ELSIF s.breaker = 'half_open' AND NOT (s.probe_run = t.run_id AND s.probe_epoch = t.epoch) THEN
            why := 'breaker';
        END IF;
        IF why IS NULL AND t.retry AND d.retry_ratio IS NOT NULL THEN
            s.tokens := least(greatest(d.retry_per_s, 1),
                              coalesce(s.tokens, greatest(d.retry_per_s, 1))
                              + d.retry_per_s * coalesce(extract(epoch FROM now() - s.tokens_at), 0));
            s.tokens_at := now();
            IF s.tokens < 1 THEN
                why := 'retry-budget';
                wake := greatest(tnow + (1 - s.tokens) / greatest(d.retry_per_s, 0.001) * interval '1 second',
                                 coalesce(s.retry_wake, tnow));
                due := wake;
                s.retry_wake := wake + 1 / greatest(d.retry_per_s, 0.001) * interval '1 second';
            END IF;
        END IF;
        held_slot := NULL;
        IF d.holds = 'run' AND d.concurrency IS NOT NULL THEN
            SELECT x.slot INTO held_slot FROM {schema}.flow_slots x
            WHERE x.run_id = t.run_id AND x.downstream = t.downstream AND x.key = t.key LIMIT 1;
        END IF;
        IF why IS NULL AND d.concurrency IS NOT NULL AND held_slot IS NULL THEN
            -- (A run that holds its slot already, a resumption or a rescue,
            -- takes none, and is told the one it holds.) A free slot, found
            -- by its index whatever the slots held, while there is no slot
            -- above the limit (one held since the limit was lowered, the
            -- free ones gone above): then fewer than the limit are held.
            SELECT x.slot INTO slot_no FROM {schema}.flow_slots x
            WHERE x.downstream = t.downstream AND x.key = t.key AND x.run_id IS NULL AND x.slot <= d.concurrency
              AND NOT EXISTS (SELECT 1 FROM {schema}.flow_slots y WHERE y.downstream = t.downstream AND y.key = t.key
                                AND y.slot > d.concurrency)
            ORDER BY x.slot LIMIT 1;
            IF slot_no IS NULL THEN
                SELECT f.slot, f.cause INTO slot_no, why FROM {schema}._flow_full(t.run_id, t.downstream, t.key, t.policy, d) AS f;
                IF why = 'cancel-newest' THEN
                    run_id := t.run_id; epoch := t.epoch; cause := why; wait_ms := NULL; slot := NULL;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
            END IF;
        END IF;
        IF why IS NULL AND d.rate IS NOT NULL THEN
            SELECT * INTO fk FROM {schema}.flow_keys x WHERE x.downstream = t.downstream AND x.key = t.key;
            em := d.rate_interval_ms::float8 / d.rate;
            -- GCRA: admitted when the arrival time, pushed one interval on,
            -- is no further ahead than the burst allows.
            IF greatest(coalesce(fk.tat, tnow), tnow) - tnow > (d.burst - 1) * em * interval '1 millisecond' THEN
                why := 'rate';
                wake := greatest(greatest(fk.tat, tnow) - (d.burst - 1) * em * interval '1 millisecond',
                                 coalesce(fk.rate_wake, tnow));
                due := wake;
                UPDATE {schema}.flow_keys x SET rate_wake = wake + em * interval '1 millisecond'
                WHERE x.downstream = t.downstream AND x.key = t.key;
            END IF;
        END IF;

        IF why IS NULL THEN
            -- Admitted: take what it needs.
            IF slot_no IS NOT NULL THEN
                UPDATE {schema}.flow_slots x SET run_id = t.run_id, epoch = t.epoch, step = t.step, taken_at = now()
                WHERE x.downstream = t.downstream AND x.key = t.key AND x.slot = slot_no;
            END IF;
            IF d.rate IS NOT NULL THEN
                UPDATE {schema}.flow_keys x
                SET tat = greatest(coalesce(x.tat, tnow), tnow) + em * interval '1 millisecond'
                WHERE x.downstream = t.downstream AND x.key = t.key;
            END IF;
            s.admitted := s.admitted + 1;
            s.retries := s.retries + t.retry::int;
            IF d.retry_ratio IS NOT NULL THEN
                s.tokens := CASE WHEN t.retry THEN s.tokens - 1
                                 ELSE least(greatest(d.retry_per_s, 1),
                                            coalesce(s.tokens, greatest(d.retry_per_s, 1))
                                            + d.retry_per_s * coalesce(extract(epoch FROM now() - s.tokens_at), 0)
                                            + d.retry_ratio) END;
                s.tokens_at := now();
            END IF;
            IF probe THEN
                PERFORM {schema}._flow_save(s);
                PERFORM {schema}._breaker_to(t.downstream, 'half_open', 'a probe let through', by);
                UPDATE {schema}.downstream_state x SET probe_run = t.run_id, probe_epoch = t.epoch
                WHERE x.name = t.downstream;
                SELECT * INTO s FROM {schema}.downstream_state x WHERE x.name = t.downstream;
            END IF;
            adm_runs := adm_runs || t.run_id;
            adm_steps := adm_steps || t.step;
            adm_attempts := adm_attempts || t.attempt;
            adm_at := adm_at || tnow;
            run_id := t.run_id; epoch := t.epoch; cause := NULL; wait_ms := NULL; slot := coalesce(slot_no, held_slot);
            RETURN NEXT;
            CONTINUE;
        END IF;

        -- Denied: park the run, record the throttle, queue it when it waits
        -- for a release.
        IF due IS NOT NULL THEN
            wait := greatest(extract(epoch FROM due - clock_timestamp()) * 1000, 0);
        END IF;
        -- (The run by its primary key, its status tested outside the
        -- lookup: naming status = 'running' in it made runs_lease_idx, whose
        -- predicate that implies, a candidate, planned on young tables as a
        -- walk of every running run.)
        UPDATE {schema}.runs r SET status = 'queued',
            run_after = CASE WHEN r.cancel_requested_at IS NOT NULL THEN now()
                             WHEN due IS NULL THEN 'infinity'
                             ELSE due END,
            waiting_for = 'limit:' || t.downstream,
            claimant = NULL, lease_expires_at = NULL, updated_at = now()
        FROM (SELECT x.id, x.status FROM {schema}.runs x WHERE x.id = t.run_id AND x.epoch = t.epoch
              OFFSET 0 FOR NO KEY UPDATE) AS h
        WHERE r.id >= h.id AND r.id <= h.id AND h.status = 'running';
        IF NOT FOUND THEN
            CONTINUE; -- the lease is lost: the start's fence refuses it
        END IF;
        s.denied_concurrency := s.denied_concurrency + (why = 'concurrency')::int;
        s.denied_rate := s.denied_rate + (why = 'rate')::int;
        s.denied_breaker := s.denied_breaker + (why = 'breaker')::int;
        s.denied_budget := s.denied_budget + (why = 'retry-budget')::int;
        UPDATE {schema}.throttles x SET denials = x.denials + 1, cause = why, downstream = t.downstream, key = t.key
        WHERE x.run_id = t.run_id AND x.step = t.step AND x.ended_at IS NULL;
        IF NOT FOUND THEN
            INSERT INTO {schema}.throttles (run_id, step, downstream, key, cause)
            VALUES (t.run_id, t.step, t.downstream, t.key, why);
        END IF;
        DELETE FROM {schema}.flow_waiters x WHERE x.run_id = t.run_id; -- a run waits in one place
        IF due IS NULL THEN
            INSERT INTO {schema}.flow_waiters (downstream, key, cause, run_id, since)
            SELECT t.downstream, CASE WHEN why = 'breaker' THEN '' ELSE t.key END, why, t.run_id,
                   coalesce((SELECT x.began_at FROM {schema}.throttles x
                             WHERE x.run_id = t.run_id AND x.step = t.step AND x.ended_at IS NULL), now());
        END IF;
        run_id := t.run_id; epoch := t.epoch; cause := why; wait_ms := wait; slot := NULL;
        RETURN NEXT;
    END LOOP;
    IF s.name IS NOT NULL THEN
        PERFORM {schema}._flow_save(s);
    END IF;
    IF cardinality(adm_runs) > 0 THEN
        -- The waits the admissions end, and the attempts' started_at. Each
        -- wait is found by its step's index, then updated by its primary
        -- key: a join was planned, on young tables, as a walk of every open
        -- wait, and so was a lookup naming ended_at IS NULL (a partial
        -- index whose predicate a query implies is a candidate even with no
        -- condition on its columns), hence the test outside the lookup.
        SELECT coalesce(array_agg(th.id), '{}'), coalesce(array_agg(y.at), '{}'), coalesce(array_agg(y.a), '{}')
        INTO th_ids, th_at, th_attempts
        FROM unnest(adm_runs, adm_steps, adm_attempts, adm_at) AS y(r, st, a, at),
             LATERAL (SELECT x.id, x.ended_at FROM {schema}.throttles x WHERE x.run_id = y.r AND x.step = y.st OFFSET 0) AS th
        WHERE th.ended_at IS NULL;
        IF cardinality(th_ids) > 0 THEN
            UPDATE {schema}.throttles x SET ended_at = th_at[array_position(th_ids, x.id)], attempt = th_attempts[array_position(th_ids, x.id)]
            WHERE x.id = ANY (th_ids);
        END IF;
        PERFORM pg_catalog.set_config('tenure.admitted',
            (SELECT jsonb_object_agg(y.r::text, y.at) FROM unnest(adm_runs, adm_at) AS y(r, at))::text, true);
    END IF;
END
$$;

-- _flow_gives is _flow's gives: the slots come back, in one statement, and
-- wake as many of their keys' oldest waiters; the outcomes count for the
-- breakers, one update per downstream: a probe's moves its breaker, the
-- others count in the window and in the streak of errors since the last
-- success. The breaker opens when the window holds at least min_calls
-- calls and the error ratio of them, or when the last min_calls calls all
-- failed: a window full of the successes before an outage does not keep
-- it closed while every call fails.
CREATE FUNCTION {schema}._flow_gives(runs uuid[], epochs bigint[], dss text[], keys text[], outcomes text[], by text,
                                     slots integer[] DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    k record;
    d {schema}.downstreams;
    s {schema}.downstream_state;
    p_n bigint; -- the probe's give: its place, its outcome
    p_o text;
    n_calls integer;
    n_errors integer;
    n_tail integer; -- errors after the batch's last success; NULL: none succeeded
BEGIN
    -- A give that names its slot frees it by its primary key; one that
    -- does not (a run's, a repeat's) looks for it among the key's held
    -- slots. (unnest pads slots with NULLs.)
    -- A run's give ('run': its end) frees the slot it took under any
    -- epoch, but only while it holds the run's lease (g.holds): a worker
    -- that lost it, its end refused, frees nothing of the next holder's.
    FOR k IN WITH g AS (SELECT x.*, x.outcome = 'run' AND EXISTS (
                            SELECT 1 FROM {schema}.runs r WHERE r.id = x.run_id AND r.epoch = x.epoch) AS holds
                        FROM unnest(runs, epochs, dss, keys, outcomes, slots) AS x(run_id, epoch, downstream, key, outcome, slot)),
             by_slot AS (UPDATE {schema}.flow_slots x SET run_id = NULL, epoch = NULL, step = NULL, taken_at = NULL
                         FROM g
                         WHERE g.slot IS NOT NULL AND x.downstream = g.downstream AND x.key = g.key AND x.slot = g.slot
                           AND x.run_id = g.run_id AND CASE WHEN g.outcome = 'run' THEN g.holds ELSE x.epoch = g.epoch END
                         RETURNING x.downstream, x.key),
             by_run AS (UPDATE {schema}.flow_slots x SET run_id = NULL, epoch = NULL, step = NULL, taken_at = NULL
                        FROM g
                        WHERE g.slot IS NULL AND x.run_id = g.run_id AND x.downstream = g.downstream AND x.key = g.key
                          AND CASE WHEN g.outcome = 'run' THEN g.holds ELSE x.epoch = g.epoch END
                        RETURNING x.downstream, x.key)
             SELECT f.downstream, f.key, count(*)::int AS n
             FROM (SELECT * FROM by_slot UNION ALL SELECT * FROM by_run) AS f GROUP BY 1, 2 ORDER BY 1, 2 LOOP
        IF EXISTS (SELECT 1 FROM {schema}.flow_waiters w
                   WHERE w.downstream = k.downstream AND w.cause = 'concurrency' AND w.key = k.key) THEN
            PERFORM {schema}._wake(k.downstream, k.key, 'concurrency', k.n);
        END IF;
    END LOOP;

    FOR k IN SELECT x.downstream, array_agg(x.run_id ORDER BY x.n) AS rs, array_agg(x.epoch ORDER BY x.n) AS eps,
                    array_agg(x.outcome ORDER BY x.n) AS outs
             FROM unnest(runs, epochs, dss, outcomes) WITH ORDINALITY AS x(run_id, epoch, downstream, outcome, n)
             GROUP BY 1 ORDER BY 1 LOOP
        SELECT * INTO s FROM {schema}.downstream_state x WHERE x.name = k.downstream;
        p_n := NULL;
        p_o := NULL;
        IF s.breaker = 'half_open' THEN
            SELECT y.n, y.o INTO p_n, p_o FROM unnest(k.rs, k.eps, k.outs) WITH ORDINALITY AS y(r, e, o, n)
            WHERE y.r = s.probe_run AND y.e = s.probe_epoch LIMIT 1;
        END IF;
        IF p_o = 'ok' THEN
            PERFORM {schema}._breaker_to(k.downstream, 'closed', 'the probe succeeded', by);
            PERFORM {schema}._wake(k.downstream, '', 'breaker', 2147483647);
        ELSIF p_o = 'error' THEN
            PERFORM {schema}._breaker_to(k.downstream, 'open', 'the probe failed', by);
            UPDATE {schema}.downstream_state x
            SET open_until = now() + (SELECT y.breaker_open_ms FROM {schema}.downstreams y WHERE y.name = k.downstream) * interval '1 millisecond'
            WHERE x.name = k.downstream;
            PERFORM {schema}._schedule_probe(k.downstream);
        ELSIF p_n IS NOT NULL THEN
            -- A probe that ended neither way (a permanent error, a cancel)
            -- says nothing of the downstream: the next take probes, and the
            -- oldest waiter is woken to be it.
            UPDATE {schema}.downstream_state x SET probe_run = NULL, probe_epoch = NULL WHERE x.name = k.downstream;
            PERFORM {schema}._wake(k.downstream, '', 'breaker', 1);
        END IF;
        -- The others' outcomes; 'none' and 'run' (a run's end) count for nothing.
        SELECT count(*) FILTER (WHERE y.o IN ('ok', 'error')), count(*) FILTER (WHERE y.o = 'error'),
               count(*) FILTER (WHERE y.o = 'error' AND y.n > y.last_ok) + CASE WHEN bool_or(y.o = 'ok') THEN 0 END
        INTO n_calls, n_errors, n_tail
        FROM (SELECT z.o, z.n, coalesce(max(z.n) FILTER (WHERE z.o = 'ok') OVER (), 0) AS last_ok
              FROM unnest(k.outs) WITH ORDINALITY AS z(o, n) WHERE z.n IS DISTINCT FROM p_n) AS y;
        IF n_calls = 0 THEN
            CONTINUE;
        END IF;
        SELECT * INTO d FROM {schema}.downstreams x WHERE x.name = k.downstream;
        UPDATE {schema}.downstream_state x SET
            calls = x.calls + n_calls, errors = x.errors + n_errors,
            window_start = CASE WHEN x.window_start + d.breaker_window_ms * interval '1 millisecond' < now() THEN now() ELSE x.window_start END,
            window_calls = CASE WHEN x.window_start + d.breaker_window_ms * interval '1 millisecond' < now() THEN n_calls
                                ELSE x.window_calls + n_calls END,
            window_errors = CASE WHEN x.window_start + d.breaker_window_ms * interval '1 millisecond' < now() THEN n_errors
                                 ELSE x.window_errors + n_errors END,
            -- (A streak, too, is of the window's calls: failures of long
            -- ago, or from before a breaker was declared, open nothing.)
            error_streak = CASE WHEN x.window_start + d.breaker_window_ms * interval '1 millisecond' < now() THEN coalesce(n_tail, n_errors)
                                ELSE coalesce(n_tail, x.error_streak + n_errors) END
        WHERE x.name = k.downstream
        RETURNING * INTO s;
        IF s.breaker = 'closed' AND d.breaker_error_ratio IS NOT NULL THEN
            IF s.window_calls >= d.breaker_min_calls AND s.window_errors >= d.breaker_error_ratio * s.window_calls THEN
                PERFORM {schema}._breaker_to(k.downstream, 'open',
                    format('%s errors in %s calls within %s ms', s.window_errors, s.window_calls, d.breaker_window_ms), by);
            ELSIF s.error_streak >= d.breaker_min_calls THEN
                PERFORM {schema}._breaker_to(k.downstream, 'open', format('the last %s calls failed', s.error_streak), by);
            ELSE
                CONTINUE;
            END IF;
            UPDATE {schema}.downstream_state x SET open_until = now() + d.breaker_open_ms * interval '1 millisecond'
            WHERE x.name = k.downstream;
        END IF;
    END LOOP;
END
$$;

-- _flow_bulk admits at once the takes of downstream ds that nothing but a
-- free slot can deny: its breaker closed, no rate limit, no retry charged
-- to a retry budget, an attempt's slot (not a run's). The takes of a key
-- get its free slots, lowest first, in the batch's order, in one
-- statement. A take it does not return (no free slot left, a repeat, a run
-- no longer running) goes through _flow's loop. Returns the takes
-- admitted, each with its slot, counted in the downstream's state.
CREATE FUNCTION {schema}._flow_bulk(ds text, runs uuid[], epochs bigint[], steps integer[], attempts integer[], dss text[],
                                    keys text[], retries boolean[], live uuid[], repeats uuid[])
RETURNS TABLE (run_id uuid, epoch bigint, step integer, attempt integer, slot integer)
LANGUAGE plpgsql AS $$
DECLARE
    d {schema}.downstreams;
    s {schema}.downstream_state;
    kk record;
    free integer[]; -- a key's free slots, as many as its takes
    tids tid[];     -- their rows
    m integer;
    n integer := 0;
    n_retries integer := 0;
BEGIN
    SELECT * INTO d FROM {schema}.downstreams x WHERE x.name = ds;
    SELECT * INTO s FROM {schema}.downstream_state x WHERE x.name = ds;
    IF NOT (s.breaker = 'closed' AND d.rate IS NULL AND d.holds = 'attempt'
            AND (d.retry_ratio IS NULL OR NOT EXISTS (SELECT 1 FROM unnest(dss, retries) AS y(dn, r) WHERE y.dn = ds AND y.r))) THEN
        RETURN;
    END IF;
    IF d.concurrency IS NULL THEN
        RETURN QUERY SELECT x.r, x.e, x.st, x.a, NULL::integer FROM unnest(runs, epochs, steps, attempts, dss) AS x(r, e, st, a, dn)
                     WHERE x.dn = ds AND x.r = ANY (live) AND NOT x.r = ANY (repeats);
        GET DIAGNOSTICS n = ROW_COUNT;
        n_retries := (SELECT count(*) FROM unnest(runs, dss, retries) AS x(r, dn, rt)
                      WHERE x.dn = ds AND x.rt AND x.r = ANY (live) AND NOT x.r = ANY (repeats))::int;
    ELSE
        -- A key at a time, each statement's values parameters of its
        -- index's search (a join of the takes to the slots was planned, on
        -- young tables, as a walk of every slot of the key per take).
        FOR kk IN SELECT x.k, array_agg(x.r ORDER BY x.n) AS rs, array_agg(x.e ORDER BY x.n) AS es,
                         array_agg(x.st ORDER BY x.n) AS sts, array_agg(x.a ORDER BY x.n) AS ats,
                         array_agg(x.rt ORDER BY x.n) AS rts
                  FROM unnest(runs, epochs, steps, attempts, dss, keys, retries) WITH ORDINALITY AS x(r, e, st, a, dn, k, rt, n)
                  WHERE x.dn = ds AND x.r = ANY (live) AND NOT x.r = ANY (repeats)
                  GROUP BY x.k ORDER BY x.k LOOP
            -- The key's free slots, as many as it has takes, while none is
            -- above the limit (see _flow).
            SELECT coalesce(array_agg(f.slot ORDER BY f.slot), '{}'), coalesce(array_agg(f.ctid ORDER BY f.slot), '{}')
            INTO free, tids
            FROM (SELECT z.slot, z.ctid FROM {schema}.flow_slots z
                  WHERE z.downstream = ds AND z.key = kk.k AND z.run_id IS NULL AND z.slot <= d.concurrency
                    AND NOT EXISTS (SELECT 1 FROM {schema}.flow_slots y WHERE y.downstream = ds AND y.key = kk.k
                                      AND y.slot > d.concurrency)
                  ORDER BY z.slot LIMIT cardinality(kk.rs)) AS f;
            IF cardinality(free) > 0 THEN
                -- By the rows' ctids, which nothing else changes meanwhile
                -- (every write of a key's slots holds its lock), and by
                -- nothing else: a TID scan is then the only plan (with
                -- slot = ANY, or with run_id IS NULL, plans cached on young
                -- tables filtered every slot, or every free slot, of the
                -- key).
                RETURN QUERY
                WITH took AS (
                    UPDATE {schema}.flow_slots x SET run_id = kk.rs[array_position(free, x.slot)],
                        epoch = kk.es[array_position(free, x.slot)], step = kk.sts[array_position(free, x.slot)], taken_at = now()
                    WHERE x.ctid = ANY (tids)
                    RETURNING x.slot)
                SELECT kk.rs[i], kk.es[i], kk.sts[i], kk.ats[i], took.slot
                FROM took, LATERAL (SELECT array_position(free, took.slot) AS i) AS p;
                GET DIAGNOSTICS m = ROW_COUNT;
                IF m <> cardinality(free) THEN -- a slot changed under the key's lock: nothing may
                    RAISE EXCEPTION '_flow_bulk: % of % free slots of downstream % key % taken', m, cardinality(free), ds, kk.k;
                END IF;
                n := n + m; -- the key's first m takes, in order
                n_retries := n_retries + (SELECT count(*) FROM unnest(kk.rts[1:m]) AS r WHERE r)::int;
            END IF;
        END LOOP;
    END IF;
    IF n > 0 THEN
        s.admitted := s.admitted + n;
        s.retries := s.retries + n_retries; -- (retries go here only without a retry budget)
        IF d.retry_ratio IS NOT NULL THEN -- n first attempts: the budget grows by n × ratio
            s.tokens := least(greatest(d.retry_per_s, 1),
                              coalesce(s.tokens, greatest(d.retry_per_s, 1))
                              + d.retry_per_s * coalesce(extract(epoch FROM now() - s.tokens_at), 0)
                              + n * d.retry_ratio);
            s.tokens_at := now();
        END IF;
        PERFORM {schema}._flow_save(s);
    END IF;
END
$$;

-- _flow_save writes what _flow's takes changed of a downstream's state:
-- once per downstream and batch, not once per take.
-- (PL/pgSQL, so that its plan is cached: a SQL function's is made at every
-- call, 0.1 ms.)
CREATE FUNCTION {schema}._flow_save(st {schema}.downstream_state)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {schema}.downstream_state x SET probe_due = st.probe_due, tokens = st.tokens, tokens_at = st.tokens_at,
        retry_wake = st.retry_wake, admitted = st.admitted, retries = st.retries,
        denied_concurrency = st.denied_concurrency, denied_rate = st.denied_rate,
        denied_breaker = st.denied_breaker, denied_budget = st.denied_budget
    WHERE x.name = st.name;
END
$$;

-- _flow_full is a take's concurrency admission when its key has no free
-- slot by the index (every slot names a holder, or one above a lowered
-- limit does): it counts the holders that still hold theirs. Below the
-- limit, it returns the first slot whose holder holds it no more (a lease
-- expired: a dead worker's capacity comes back); at the limit, the cause
-- of the denial: 'concurrency', or 'cancel-newest' for a take of that
-- policy, and for 'cancel-in-progress' it asks the oldest holders to
-- cancel, as many as make room.
CREATE FUNCTION {schema}._flow_full(run uuid, ds text, k text, policy text, d {schema}.downstreams,
                                    OUT slot integer, OUT cause text)
LANGUAGE plpgsql AS $$
DECLARE
    held integer;
BEGIN
    held := {schema}._live_holders(ds, k);
    IF held >= d.concurrency THEN
        cause := CASE WHEN policy = 'cancel-newest' THEN 'cancel-newest' ELSE 'concurrency' END;
        IF policy = 'cancel-in-progress' THEN
            PERFORM {schema}.cancel_run(x.run_id) FROM (
                SELECT x.run_id FROM {schema}.flow_slots x
                WHERE x.downstream = ds AND x.key = k AND x.run_id <> run
                  AND {schema}._holds(x.run_id, x.epoch, true)
                ORDER BY x.taken_at LIMIT held - d.concurrency + 1) AS x;
        END IF;
        RETURN;
    END IF;
    SELECT x.slot INTO slot FROM {schema}.flow_slots x
    WHERE x.downstream = ds AND x.key = k AND x.slot <= d.concurrency
      AND NOT {schema}._holds(x.run_id, x.epoch, d.holds = 'run')
    ORDER BY x.slot LIMIT 1;
    IF slot IS NULL THEN
        -- Every slot made is held: one more, if that stays within the
        -- limit; else one is held above the limit after it was lowered.
        slot := coalesce((SELECT max(x.slot) FROM {schema}.flow_slots x WHERE x.downstream = ds AND x.key = k), 0) + 1;
        IF slot <= d.concurrency THEN
            INSERT INTO {schema}.flow_slots (downstream, key, slot) VALUES (ds, k, slot);
        ELSE
            slot := NULL;
            cause := 'concurrency';
        END IF;
    END IF;
END
$$;

-- _schedule_probe gives the oldest run waiting on an open breaker the
-- breaker's open_until as its due time: it will be the probe.
CREATE FUNCTION {schema}._schedule_probe(ds text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    w record;
    due timestamptz;
BEGIN
    SELECT s.open_until INTO due FROM {schema}.downstream_state s WHERE s.name = ds;
    FOR w IN SELECT x.id, x.run_id FROM {schema}.flow_waiters x
             WHERE x.downstream = ds AND x.cause = 'breaker' AND x.key = '' ORDER BY x.since, x.id LOOP
        DELETE FROM {schema}.flow_waiters x WHERE x.id = w.id;
        UPDATE {schema}.runs SET run_after = due, updated_at = now()
        WHERE id = w.run_id AND status = 'queued' AND waiting_for = 'limit:' || ds;
        IF FOUND THEN
            UPDATE {schema}.downstream_state x SET probe_due = true WHERE x.name = ds;
            RETURN;
        END IF;
    END LOOP;
    UPDATE {schema}.downstream_state x SET probe_due = false WHERE x.name = ds;
END
$$;

-- flow_sweep gives back what no release gave back: capacity held by a
-- worker that died (its lease expired) wakes as many waiters as it frees;
-- a breaker whose probe died, or whose scheduled probe never came, wakes
-- the oldest waiter as its probe. Each worker calls it about once a second
-- with its downstreams, in the transaction of a claim. Returns each
-- downstream's breaker state and its waiting runs, for metrics.
CREATE FUNCTION {schema}.flow_sweep(names text[])
RETURNS TABLE (downstream text, breaker text, waiting bigint, in_use bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    k record;
    d {schema}.downstreams;
    s {schema}.downstream_state;
    free integer;
BEGIN
    -- And every downstream something waits on: a waiter's releaser may end
    -- without a give (a lost lease, a run failed by the backstop), and the
    -- workers alive may never have used the downstream themselves.
    -- (The downstreams with waiters, one index probe each, not every
    -- waiter read: a skip scan of flow_waiters_queue_idx.)
    names := ARRAY(SELECT DISTINCT x FROM unnest(names || ARRAY(
        WITH RECURSIVE w(ds) AS (
            SELECT (SELECT min(x.downstream) FROM {schema}.flow_waiters x)
            UNION ALL
            SELECT (SELECT min(x.downstream) FROM {schema}.flow_waiters x WHERE x.downstream > w.ds)
            FROM w WHERE w.ds IS NOT NULL)
        SELECT w.ds FROM w WHERE w.ds IS NOT NULL)) AS x);
    -- Nothing to give back or wake without a waiter or a breaker not
    -- closed: then no lock, which would hold up the commits that admit
    -- until the claim's transaction ends (the sweep waited for them, and
    -- they for it, 13 ms a sweep in L).
    IF NOT EXISTS (SELECT 1 FROM {schema}.flow_waiters w WHERE w.downstream = ANY (names))
       AND NOT EXISTS (SELECT 1 FROM {schema}.downstream_state x WHERE x.name = ANY (names) AND x.breaker <> 'closed') THEN
        RETURN QUERY
        SELECT x.name, x.breaker, {schema}._waiting(x.name),
               (SELECT count(*) FROM {schema}.flow_slots sl WHERE sl.downstream = x.name AND sl.run_id IS NOT NULL
                  AND {schema}._holds(sl.run_id, sl.epoch, coalesce((SELECT d.holds = 'run' FROM {schema}.downstreams d WHERE d.name = x.name), false)))
        FROM {schema}.downstream_state x WHERE x.name = ANY (names) ORDER BY x.name;
        RETURN;
    END IF;
    PERFORM 1 FROM {schema}.downstream_state x WHERE x.name = ANY (names) ORDER BY x.name FOR UPDATE;
    FOR k IN SELECT DISTINCT w.downstream, w.key FROM {schema}.flow_waiters w
             WHERE w.downstream = ANY (names) AND w.cause = 'concurrency' ORDER BY 1, 2 LOOP
        PERFORM 1 FROM {schema}.flow_keys x WHERE x.downstream = k.downstream AND x.key = k.key FOR UPDATE;
        SELECT * INTO d FROM {schema}.downstreams x WHERE x.name = k.downstream;
        free := coalesce(d.concurrency, 2147483647) - {schema}._live_holders(k.downstream, k.key);
        IF free > 0 THEN
            PERFORM {schema}._wake(k.downstream, k.key, 'concurrency', free);
        END IF;
    END LOOP;
    FOR s IN SELECT * FROM {schema}.downstream_state x WHERE x.name = ANY (names) AND x.breaker <> 'closed' LOOP
        IF (s.breaker = 'open' AND NOT s.breaker_manual AND s.open_until < now() - interval '1 second')
           OR (s.breaker = 'half_open' AND NOT EXISTS (
                SELECT 1 FROM {schema}.runs r WHERE r.id = s.probe_run AND r.epoch = s.probe_epoch
                  AND r.status = 'running' AND r.lease_expires_at > now())) THEN
            PERFORM {schema}._wake(s.name, '', 'breaker', 1);
        END IF;
    END LOOP;
    RETURN QUERY
    SELECT x.name, x.breaker,
           {schema}._waiting(x.name),
           (SELECT count(*) FROM {schema}.flow_slots sl WHERE sl.downstream = x.name AND sl.run_id IS NOT NULL
              AND {schema}._holds(sl.run_id, sl.epoch, coalesce((SELECT d.holds = 'run' FROM {schema}.downstreams d WHERE d.name = x.name), false)))
    FROM {schema}.downstream_state x WHERE x.name = ANY (names) ORDER BY x.name;
END
$$;

-- open_breaker and close_breaker move a downstream's breaker by hand,
-- audited with note. An open breaker opened by hand stays open until closed
-- by hand; closing wakes every run waiting on it. They run with the rights
-- of the caller, as set_downstream and the other functions a person calls
-- do: a role needs UPDATE on downstream_state (and, to close, DELETE on
-- flow_waiters and UPDATE on runs), so that a read-only role cannot stop a
-- downstream's calls.
CREATE FUNCTION {schema}.open_breaker(name text, note text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM {schema}.downstream_state x WHERE x.name = open_breaker.name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'open_breaker: no downstream %', name USING ERRCODE = 'P0002';
    END IF;
    PERFORM {schema}._breaker_to(open_breaker.name, 'open', coalesce(note, 'opened by hand'), 'person');
    UPDATE {schema}.downstream_state x SET breaker_manual = true, open_until = NULL WHERE x.name = open_breaker.name;
    RETURN 'open';
END
$$;

CREATE FUNCTION {schema}.close_breaker(name text, note text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM {schema}.downstream_state x WHERE x.name = close_breaker.name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'close_breaker: no downstream %', name USING ERRCODE = 'P0002';
    END IF;
    PERFORM {schema}._breaker_to(close_breaker.name, 'closed', coalesce(note, 'closed by hand'), 'person');
    UPDATE {schema}.downstream_state x SET breaker_manual = false, open_until = NULL WHERE x.name = close_breaker.name;
    PERFORM {schema}._wake(close_breaker.name, '', 'breaker', 2147483647);
    RETURN 'closed';
END
$$;

-- downstream_status: each downstream with its limits, what is in use and
-- waiting, its counters and its breaker. The Downstreams page, tenure
-- limits and operator.Downstreams read it.
CREATE VIEW {schema}.downstream_status AS
SELECT d.name,
       d.concurrency,
       d.rate,
       d.rate_interval_ms,
       d.burst,
       d.retry_ratio,
       d.retry_per_s,
       d.breaker_error_ratio,
       d.breaker_min_calls,
       d.breaker_window_ms,
       d.breaker_open_ms,
       d.overridden_at,
       d.overridden_by,
       d.declared,
       d.declared_by,
       d.declared_at,
       d.holds,
       (SELECT count(*) FROM {schema}.flow_slots sl WHERE sl.downstream = d.name AND sl.run_id IS NOT NULL
          AND {schema}._holds(sl.run_id, sl.epoch, d.holds = 'run')) AS in_use,
       {schema}._waiting(d.name)        AS waiting,
       (SELECT count(DISTINCT k.key) FROM {schema}.flow_keys k WHERE k.downstream = d.name) AS keys,
       coalesce(s.breaker, 'closed')   AS breaker,
       s.breaker_since,
       coalesce(s.breaker_manual, false) AS breaker_manual,
       s.open_until,
       s.probe_run,
       coalesce(s.window_calls, 0)     AS window_calls,
       coalesce(s.window_errors, 0)    AS window_errors,
       s.tokens                        AS retry_tokens,
       coalesce(s.admitted, 0)         AS admitted,
       coalesce(s.retries, 0)          AS retries,
       coalesce(s.denied_concurrency, 0) AS denied_concurrency,
       coalesce(s.denied_rate, 0)      AS denied_rate,
       coalesce(s.denied_breaker, 0)   AS denied_breaker,
       coalesce(s.denied_budget, 0)    AS denied_retry_budget,
       coalesce(s.calls, 0)            AS calls,
       coalesce(s.errors, 0)           AS errors
FROM {schema}.downstreams d
LEFT JOIN {schema}.downstream_state s ON s.name = d.name;

-- A downstream's breaker changes and limit changes are read newest first,
-- a page at a time (the Downstreams page, tenure limits show): by this
-- index, never by the whole audit log.
CREATE INDEX audit_log_downstream_idx ON {schema}.audit_log (action, (filter->>'downstream'), id)
    WHERE action IN ('limits', 'breaker');

-- breaker_history: every change of a breaker's state, newest first.
CREATE VIEW {schema}.breaker_history AS
SELECT a.id, a.at, a.filter->>'downstream' AS downstream, a.filter->>'from' AS from_state,
       a.filter->>'to' AS to_state, a.note AS why, coalesce(a.filter->>'by', a.actor) AS by, a.actor
FROM {schema}.audit_log a
WHERE a.action = 'breaker';

-- step_throttling: how often and how long each step waited on limits.
-- A wait that never ended (its run was cancelled while it waited) counts
-- until the run's end, and is no longer waiting.
CREATE VIEW {schema}.step_throttling AS
SELECT t.run_id, t.step, count(*) AS waits, sum(t.denials) AS denials,
       sum(coalesce(t.ended_at, r.finished_at, now()) - t.began_at) AS throttled_for,
       (array_agg(t.cause ORDER BY t.id DESC))[1] AS last_cause,
       bool_or(t.ended_at IS NULL AND r.finished_at IS NULL) AS waiting
FROM {schema}.throttles t
JOIN {schema}.runs r ON r.id = t.run_id
GROUP BY t.run_id, t.step;

-- attempt_timeline gains, for each attempt, the wait on limits just before
-- it (throttled_for) and its cause (throttled_by: concurrency, rate,
-- breaker, retry-budget): a wait that ended when the attempt started.
CREATE OR REPLACE VIEW {schema}.attempt_timeline AS
SELECT a.run_id,
       r.workflow,
       a.step,
       a.attempt,
       a.activity,
       a.status,
       a.is_rescue,
       a.started_at,
       a.ended_at,
       coalesce(a.ended_at, now()) - a.started_at            AS duration,
       a.delay_ms * interval '1 millisecond'                 AS delay_before_next,
       a.delay_source,
       lead(a.started_at) OVER (PARTITION BY a.run_id, a.step ORDER BY a.attempt) - a.ended_at AS waited,
       a.attempt > s.budget_from                             AS in_budget,
       a.worker,
       a.epoch,
       a.trace_id,
       a.span_id,
       a.error_type,
       a.error_message,
       th.throttled_for,
       th.cause                                              AS throttled_by
FROM {schema}.attempts a
JOIN {schema}.runs r ON r.id = a.run_id
JOIN {schema}.steps s ON s.run_id = a.run_id AND s.step = a.step
LEFT JOIN LATERAL (
    SELECT t.ended_at - t.began_at AS throttled_for, t.cause
    FROM {schema}.throttles t
    WHERE t.run_id = a.run_id AND t.step = a.step AND t.attempt = a.attempt
    ORDER BY t.id DESC LIMIT 1) AS th ON true;

-- The worker's functions run with the owner's rights (they write the flow
-- tables, which no other role needs to): only roles that may write runs
-- (workers, operators) may call them, never a read-only role. Roles set up
-- with the grants of docs/operations.md get them here; new roles, by those
-- grants.
REVOKE EXECUTE ON FUNCTION {schema}._flow(uuid[], bigint[], text[], text[], text[], uuid[], bigint[], integer[],
    integer[], text[], text[], boolean[], text[], text, boolean, integer[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.declare_downstream(text, jsonb, text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.flow_sweep(text[]) FROM PUBLIC;
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT r.rolname FROM pg_catalog.pg_roles r
        WHERE r.oid <> (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = '{schema}.runs'::regclass)
          AND NOT r.rolsuper AND r.rolname !~ '^pg_'
          AND pg_catalog.has_table_privilege(r.oid, '{schema}.runs', 'UPDATE')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {schema}._flow, {schema}.declare_downstream, {schema}.flow_sweep TO %I', g.rolname);
    END LOOP;
END
$$;
