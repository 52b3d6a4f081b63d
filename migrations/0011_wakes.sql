-- Tenure schema, version 11: what a caller's transaction writes never locks
-- a run's row, so a send or a cancel in a transaction of any length holds
-- up no claim, rescue, cancel, heartbeat or checkpoint.
--
-- Before, send_signal took the run's row twice: its insert's foreign-key
-- check (signals -> runs) locked it FOR KEY SHARE, which the claim's FOR
-- UPDATE SKIP LOCKED skipped (a due run was not claimed, a dead worker's run
-- not rescued, while the sender's transaction stayed open) and cancel_run's
-- FOR UPDATE waited for; and a send to a run waiting for it updated the
-- run's row, as cancel_run did for a run that had started, which the
-- worker's writes that end a lease, and its heartbeat, then waited for or
-- skipped until the caller committed.
--
-- Now a send and the cancel of a run that has started only insert rows of
-- their own: the signal, and a wake (below) that a worker applies to the
-- run's row in a transaction of its own, once the caller has committed.

-- A signal's run is found without its row's lock: the foreign key goes, its
-- cascade stays (a statement-level trigger, as for steps in version 8). A
-- signal inserted for a run a purge deletes in the same instant can outlive
-- it; nothing reads a signal but through its run.
ALTER TABLE {schema}.signals DROP CONSTRAINT signals_run_id_fkey;

-- wakes: what was asked of a run's row by a transaction that must not wait
-- for it or lock it, for a worker to apply (apply_wakes) in a transaction of
-- its own, once the asker has committed:
--   signal   a signal of that name was sent: the run is made due if it
--            waits for it;
--   cancel   the run's Cancel, after it had started: the run is marked
--            cancel_requested_at (and made due when it waits), for its
--            worker to cancel it; one that has not started after all is
--            ended cancelled;
--   child    the run suspended to wait for a child whose row was locked (its
--            end in flight, or a caller's Cancel or requeue of it in an
--            open transaction): the run is made due once the child has
--            ended.
-- A wake is deleted once applied. Workers apply wakes when they are told of
-- one (the runs channel's 'wake' and 'cancel:<id>' notices), after each
-- LISTEN, and at every poll besides (each second by default), so a notice
-- lost costs a poll interval at most; a wake whose rows are busy (a commit
-- in flight, or a caller's open transaction) is kept for a later try.
CREATE TABLE {schema}.wakes (
    id      bigserial   PRIMARY KEY,
    run_id  uuid        NOT NULL,
    kind    text        NOT NULL CHECK (kind IN ('signal', 'cancel', 'child')),
    signal  text,
    at      timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind = 'signal') = (signal IS NOT NULL))
);
-- A worker's pending cancels, after its LISTEN.
CREATE INDEX wakes_run_idx ON {schema}.wakes (run_id);

CREATE FUNCTION {schema}._delete_signals_of_runs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM {schema}.signals s USING gone g WHERE s.run_id = g.id;
    DELETE FROM {schema}.wakes w USING gone g WHERE w.run_id = g.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_delete_signals AFTER DELETE ON {schema}.runs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}._delete_signals_of_runs();

CREATE OR REPLACE FUNCTION {schema}._truncate_steps_of_runs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    TRUNCATE {schema}.steps, {schema}.attempts, {schema}.signals, {schema}.wakes;
    RETURN NULL;
END
$$;

-- Names of signals (and event keys, which the SDK checks) are at most 200
-- bytes: they are index keys, and a longer one failed with an index error.
CREATE FUNCTION {schema}._check_name(what text, name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF name IS NULL OR name = '' THEN
        RAISE EXCEPTION '%: empty name', what USING ERRCODE = '22023';
    END IF;
    IF octet_length(name) > 200 THEN
        RAISE EXCEPTION '%: a name of % bytes, over the limit of 200', what, octet_length(name)
            USING ERRCODE = '22023';
    END IF;
END
$$;

-- send_signal is the one implementation of a send, used by the Go client
-- (Send and SendTx), the CLI and SQL. It locks no row of the run: it reads
-- the run's status, inserts the signal and a wake, and tells workers on the
-- runs channel ('wake'); a worker makes the run due if it waits for the
-- signal, once the send has committed (apply_wakes). Sends to one run
-- serialize on the run's signal lock (_signal_lock, a transaction-scoped
-- advisory lock no worker takes), so they take their IDs in commit order,
-- the order they are received in. A run that suspends to wait while a send
-- is in flight finds its signal (the suspension checks for one after
-- locking its row) or is woken by its wake (applied after the suspension
-- commits: a run whose row is locked keeps its wake for the next try).
-- Sending to a run that has ended raises SQLSTATE TN002, to an unknown run
-- TN001, a name empty or over 200 bytes 22023.
CREATE OR REPLACE FUNCTION {schema}.send_signal(run uuid, name text, payload jsonb DEFAULT 'null')
RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    st   text;
    sid  bigint;
BEGIN
    PERFORM {schema}._check_name('send_signal', name);
    PERFORM pg_catalog.pg_advisory_xact_lock({schema}._signal_lock(run));
    SELECT r.status INTO st FROM {schema}.runs r WHERE r.id = run;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'send_signal: run % not found', run USING ERRCODE = 'TN001';
    END IF;
    IF st NOT IN ('queued', 'running') THEN
        RAISE EXCEPTION 'send_signal: run % is %', run, st USING ERRCODE = 'TN002';
    END IF;
    INSERT INTO {schema}.signals (run_id, name, payload)
    VALUES (run, send_signal.name, coalesce(payload, 'null'::jsonb))
    RETURNING id INTO sid;
    INSERT INTO {schema}.wakes (run_id, kind, signal) VALUES (run, 'signal', send_signal.name);
    PERFORM pg_catalog.pg_notify({schema}.runs_channel(), 'wake');
    RETURN sid;
END
$$;

-- _cancel_unstarted ends a run that has not started (queued, never
-- claimed), whose row the caller has locked, as cancelled, with its
-- children. A parent waiting for it is woken by a wake of kind child, not by
-- an update of its row: a Cancel in a caller's open transaction locks the
-- cancelled run's row alone.
CREATE FUNCTION {schema}._cancel_unstarted(run uuid)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    parent uuid;
BEGIN
    UPDATE {schema}.runs x
    SET status = 'cancelled', epoch = {schema}.next_epoch(x.epoch), finished_at = now(), updated_at = now(),
        error_message = 'cancelled before it started', cancel_requested_at = coalesce(x.cancel_requested_at, now()),
        waiting_for = NULL
    WHERE x.id = run
    RETURNING x.parent_run_id INTO parent;
    PERFORM pg_catalog.pg_notify(n.nspname || '_done', run::text)
    FROM pg_catalog.pg_namespace n WHERE n.oid = '{schema}'::regnamespace;
    IF parent IS NOT NULL THEN
        INSERT INTO {schema}.wakes (run_id, kind) VALUES (parent, 'child');
        PERFORM pg_catalog.pg_notify({schema}.runs_channel(), 'wake');
    END IF;
    PERFORM {schema}.cancel_run(c.id) FROM {schema}.runs c
    WHERE c.parent_run_id = run AND c.status IN ('queued', 'running');
END
$$;

-- cancel_run is the one implementation of Cancel, used by the Go client,
-- the operator API, the CLI and the cascade to children. It returns what it
-- did:
--   'cancelled'  the run had not started (queued, never claimed): it is
--                ended cancelled now, and so are its children, in turn;
--   'requested'  the run has started (running, or queued and waiting): a
--                wake asks for it, and the run's workers are told on the
--                runs channel ('cancel:<id>'); a worker marks the run
--                cancel_requested_at once this transaction has committed,
--                and the run's worker cancels the running activity
--                (sdk.ErrCancelled), lets the workflow clean up, and ends
--                the run cancelled;
--   NULL         the run had already ended, or does not exist.
-- Only the row of a run that has not started is locked, and never waited
-- for: a run whose row is busy (a claim in flight) is asked, as one that
-- has started.
CREATE OR REPLACE FUNCTION {schema}.cancel_run(run uuid)
RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    st text;
BEGIN
    SELECT x.status INTO st FROM {schema}.runs x WHERE x.id = run;
    IF NOT FOUND OR st NOT IN ('queued', 'running') THEN
        RETURN NULL;
    END IF;
    PERFORM FROM {schema}.runs x
    WHERE x.id = run AND x.status = 'queued' AND x.started_at IS NULL
    FOR NO KEY UPDATE SKIP LOCKED;
    IF FOUND THEN
        PERFORM {schema}._cancel_unstarted(run);
        RETURN 'cancelled';
    END IF;
    INSERT INTO {schema}.wakes (run_id, kind) VALUES (run, 'cancel');
    PERFORM pg_catalog.pg_notify({schema}.runs_channel(), 'cancel:' || run::text);
    RETURN 'requested';
END
$$;

-- _make_due makes a queued run due now and tells its workers.
CREATE FUNCTION {schema}._make_due(run uuid, queue text)
RETURNS void
LANGUAGE sql VOLATILE AS $$
    UPDATE {schema}.runs x SET run_after = now(), updated_at = now() WHERE x.id = run;
    SELECT pg_catalog.pg_notify({schema}.runs_channel(), queue);
$$;

-- apply_wakes applies up to lim wakes, oldest first, in the worker's own
-- transaction, each to its run's row locked without waiting:
--   signal: a run queued and waiting for that signal is made due now;
--   cancel: a run that has not started is ended cancelled; one running or
--     waiting is marked cancel_requested_at, made due now when it waits, and
--     its worker told again ('cancel:<id>');
--   child: a run still waiting for its child is made due now if the child
--     has ended;
-- and deletes each wake it applied (or whose run ended or is gone). A wake
-- whose run's row (or child's row) is busy, locked by a commit in flight or
-- a caller's open transaction, is kept for a later call and passed over,
-- so that it holds up none behind it. Workers of the runs made due are told
-- on the runs channel. It returns how many wakes it applied and how many it
-- left busy: applied = lim means more may be waiting.
CREATE FUNCTION {schema}.apply_wakes(lim integer, OUT applied integer, OUT busy integer)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    w     record;
    r     record;
    child text;
BEGIN
    applied := 0;
    busy := 0;
    FOR w IN SELECT * FROM {schema}.wakes x ORDER BY x.id FOR UPDATE SKIP LOCKED LOOP
        EXIT WHEN applied >= lim;
        SELECT x.id, x.status, x.queue, x.waiting_for, x.started_at, x.run_after INTO r
        FROM {schema}.runs x WHERE x.id = w.run_id
        FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            IF EXISTS (SELECT FROM {schema}.runs x WHERE x.id = w.run_id) THEN
                busy := busy + 1; -- the next call
                CONTINUE;
            END IF;
        ELSIF w.kind = 'cancel' AND r.status = 'queued' AND r.started_at IS NULL THEN
            PERFORM {schema}._cancel_unstarted(r.id);
        ELSIF w.kind = 'cancel' AND r.status IN ('queued', 'running') THEN
            UPDATE {schema}.runs x
            SET cancel_requested_at = coalesce(x.cancel_requested_at, now()), updated_at = now(),
                run_after = CASE WHEN x.status = 'queued' THEN least(x.run_after, now()) ELSE x.run_after END
            WHERE x.id = r.id;
            PERFORM pg_catalog.pg_notify({schema}.runs_channel(),
                CASE WHEN r.status = 'queued' THEN r.queue ELSE 'cancel:' || r.id::text END);
        ELSIF r.status <> 'queued' OR r.run_after <= now() THEN
            NULL; -- running, ended or due already: nothing to wake
        ELSIF w.kind = 'signal' AND r.waiting_for = 'signal:' || w.signal THEN
            PERFORM {schema}._make_due(r.id, r.queue);
        ELSIF w.kind = 'child' AND r.waiting_for LIKE 'child:%' THEN
            SELECT c.status INTO child FROM {schema}.runs c
            WHERE c.id = substr(r.waiting_for, 7)::uuid FOR SHARE SKIP LOCKED;
            IF NOT FOUND AND EXISTS (SELECT FROM {schema}.runs c WHERE c.id = substr(r.waiting_for, 7)::uuid) THEN
                busy := busy + 1; -- the child's row is still busy
                CONTINUE;
            END IF;
            IF child IN ('completed', 'failed', 'cancelled') THEN
                PERFORM {schema}._make_due(r.id, r.queue);
            END IF;
        END IF;
        DELETE FROM {schema}.wakes x WHERE x.id = w.id;
        applied := applied + 1;
    END LOOP;
END
$$;

-- _cancel_asked_at is when a run's Cancel was asked: recorded on the run,
-- or still a wake no worker has applied.
CREATE FUNCTION {schema}._cancel_asked_at(run uuid, recorded timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT coalesce(recorded, (SELECT min(w.at) FROM {schema}.wakes w WHERE w.run_id = run AND w.kind = 'cancel'))
$$;

-- waiting_runs (version 5) shows a cancel asked of a waiting run at once,
-- before a worker applies its wake.
CREATE OR REPLACE VIEW {schema}.waiting_runs AS
SELECT r.id                                                         AS run_id,
       r.workflow,
       r.queue,
       r.waiting_for,
       r.updated_at                                                 AS waiting_since,
       CASE WHEN r.run_after = 'infinity' THEN NULL ELSE r.run_after END AS wakes_at,
       r.parent_run_id,
       {schema}._cancel_asked_at(r.id, r.cancel_requested_at)      AS cancel_requested_at
FROM {schema}.runs r
WHERE r.status = 'queued' AND r.waiting_for IS NOT NULL;

-- Roles set up with the grants of docs/operations.md get what the wakes need
-- from what they had on signals: a role that could update signals (a
-- worker's) may apply and delete wakes, one that could insert them (a
-- client's, an operator's: sends) may insert wakes (cancels, sends), one
-- that could read them may read wakes.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT r.rolname,
               pg_catalog.has_table_privilege(r.oid, '{schema}.signals', 'UPDATE') AS upd,
               pg_catalog.has_table_privilege(r.oid, '{schema}.signals', 'INSERT') AS ins,
               pg_catalog.has_table_privilege(r.oid, '{schema}.signals', 'SELECT') AS sel
        FROM pg_catalog.pg_roles r
        WHERE r.oid <> (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = '{schema}.signals'::regclass)
          AND NOT r.rolsuper AND r.rolname !~ '^pg_'
          AND pg_catalog.has_table_privilege(r.oid, '{schema}.signals', 'SELECT, INSERT, UPDATE')
    LOOP
        IF g.sel THEN
            EXECUTE format('GRANT SELECT ON {schema}.wakes TO %I', g.rolname);
        END IF;
        IF g.ins THEN
            EXECUTE format('GRANT INSERT ON {schema}.wakes TO %I', g.rolname);
            EXECUTE format('GRANT USAGE ON SEQUENCE {schema}.wakes_id_seq TO %I', g.rolname);
        END IF;
        IF g.upd THEN
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.wakes TO %I', g.rolname);
            EXECUTE format('GRANT USAGE ON SEQUENCE {schema}.wakes_id_seq TO %I', g.rolname);
        END IF;
    END LOOP;
END
$$;
