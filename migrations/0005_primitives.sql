-- Tenure schema, version 5: durable sleeps, signals, events, child workflows
-- and cancellation that reaches activities.
--
-- Every one of them is a step of its run (steps.kind), so that a replay finds
-- it recorded instead of doing it again, and history shows it in order.

-- What a step is. An activity step has attempts; the other kinds have none:
--   sleep        a durable sleep; due_at is fixed at its first execution
--   signal       the receipt of a signal (signals.consumed_step names it);
--                due_at is its timeout, NULL for none
--   event        an event set by the workflow (events.step names it)
--   child        a child workflow started by the run (child_run_id)
--   now          the time read by sdk.Now, recorded once (output)
--   side_effect  a value made by sdk.SideEffect, recorded once (output)
-- For a step of another kind than activity, activity holds its name: the
-- signal's name, the event's key, the child's workflow, or the kind itself.
ALTER TABLE {schema}.steps
    ADD COLUMN kind text NOT NULL DEFAULT 'activity'
        CHECK (kind IN ('activity', 'sleep', 'signal', 'event', 'child', 'now', 'side_effect')),
    ADD COLUMN due_at timestamptz,
    ADD COLUMN child_run_id uuid;

-- waiting: a sleep not yet due, a signal not yet received, a child not yet
-- ended. The run itself is queued meanwhile, holding no lease.
ALTER TABLE {schema}.steps DROP CONSTRAINT steps_status_check;
ALTER TABLE {schema}.steps ADD CONSTRAINT steps_status_check
    CHECK (status IN ('running', 'waiting', 'completed', 'failed'));

-- cancelled: the run was cancelled while the attempt ran; its activity's
-- context was cancelled with sdk.ErrCancelled. Charged to no budget.
ALTER TABLE {schema}.attempts DROP CONSTRAINT attempts_status_check;
ALTER TABLE {schema}.attempts ADD CONSTRAINT attempts_status_check
    CHECK (status IN ('running', 'succeeded', 'failed', 'timed_out', 'lost', 'interrupted', 'cancelled'));

-- waiting_for: why a queued run that has started waits, in words: 'sleep',
-- 'signal:<name>' or 'child:<run id>'; NULL when it waits for nothing but
-- its turn. run_after is then the sleep's due time, the signal's timeout, or
-- 'infinity' until a signal or the child's end wakes it.
-- parent_run_id and parent_step link a child run to the step of its parent
-- that started it. cancel_requested_at is set by Cancel of a run that has
-- started: its worker cancels the running activity and lets the workflow
-- clean up before the run ends cancelled.
ALTER TABLE {schema}.runs
    ADD COLUMN waiting_for text,
    ADD COLUMN parent_run_id uuid,
    ADD COLUMN parent_step integer,
    ADD COLUMN cancel_requested_at timestamptz;
CREATE INDEX runs_parent_idx ON {schema}.runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

-- Signals sent to runs, consumed once each in the order sent (id) per name.
CREATE TABLE {schema}.signals (
    id            bigserial   PRIMARY KEY,
    run_id        uuid        NOT NULL REFERENCES {schema}.runs (id) ON DELETE CASCADE,
    name          text        NOT NULL,
    payload       jsonb       NOT NULL,
    sent_at       timestamptz NOT NULL DEFAULT now(),
    -- The step of the run that received it, and when; NULL until then.
    consumed_step integer,
    consumed_at   timestamptz,
    CHECK ((consumed_step IS NULL) = (consumed_at IS NULL))
);
CREATE INDEX signals_pending_idx ON {schema}.signals (run_id, name, id) WHERE consumed_at IS NULL;
-- A step consumes one signal at most: a repeat of a receive that raced its
-- first try fails here instead of consuming a second one.
CREATE UNIQUE INDEX signals_consumed_idx ON {schema}.signals (run_id, consumed_step) WHERE consumed_step IS NOT NULL;
CREATE INDEX signals_run_idx ON {schema}.signals (run_id);

-- Events a workflow sets (progress, intermediate results): the latest value
-- per key, set by the step named. A set event is announced on the done
-- channel ('<schema>_done') with the run's ID, as a run's end is.
CREATE TABLE {schema}.events (
    run_id  uuid        NOT NULL REFERENCES {schema}.runs (id) ON DELETE CASCADE,
    key     text        NOT NULL,
    value   jsonb       NOT NULL,
    step    integer     NOT NULL,
    set_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, key)
);

-- send_signal is the one implementation of a send, used by the Go client
-- (Send and SendTx), the CLI and SQL. It takes the run's signal lock first
-- (_signal_lock, a transaction-scoped advisory lock, held until the send's
-- transaction ends), never the run's row: a send in a long transaction holds
-- up no heartbeat and no checkpoint of the worker running the run. A worker
-- suspending the run to wait for a signal tries the same lock: when a send
-- holds it, the run is woken at once; when it gets it, a later send waits
-- for the suspension to commit and then finds the run waiting. So no wake-up
-- is lost, and sends to one run take their IDs in commit order. A run
-- waiting for a signal of this name is made due now, and its workers are
-- woken. Sending to a run that has ended raises SQLSTATE TN002, to an
-- unknown run TN001.
CREATE FUNCTION {schema}._signal_lock(run uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT pg_catalog.hashtextextended('tenure signal ' || run::text, 0)
$$;

CREATE FUNCTION {schema}.send_signal(run uuid, name text, payload jsonb DEFAULT 'null')
RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    st   text;
    q    text;
    sid  bigint;
BEGIN
    IF name IS NULL OR name = '' THEN
        RAISE EXCEPTION 'send_signal: empty signal name' USING ERRCODE = '22023';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock({schema}._signal_lock(run));
    SELECT r.status, r.queue INTO st, q FROM {schema}.runs r WHERE r.id = run;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'send_signal: run % not found', run USING ERRCODE = 'TN001';
    END IF;
    IF st NOT IN ('queued', 'running') THEN
        RAISE EXCEPTION 'send_signal: run % is %', run, st USING ERRCODE = 'TN002';
    END IF;
    INSERT INTO {schema}.signals (run_id, name, payload)
    VALUES (run, send_signal.name, coalesce(payload, 'null'::jsonb))
    RETURNING id INTO sid;
    UPDATE {schema}.runs r SET run_after = now(), updated_at = now()
    WHERE r.id = run AND r.status = 'queued' AND r.waiting_for = 'signal:' || send_signal.name;
    IF FOUND THEN
        PERFORM pg_catalog.pg_notify({schema}.runs_channel(), q);
    END IF;
    RETURN sid;
END
$$;

-- cancel_run is the one implementation of Cancel, used by the Go client,
-- the operator API, the CLI and the cascade to children. It returns what it
-- did:
--   'cancelled'  the run had not started (queued, never claimed): it is
--                ended cancelled now, and so are its children, in turn;
--   'requested'  the run has started (running, or queued and waiting): it is
--                marked cancel_requested_at and made due now; its worker
--                cancels the running activity (sdk.ErrCancelled), lets the
--                workflow clean up, and ends the run cancelled;
--   NULL         the run had already ended, or does not exist.
-- The run's row is locked FOR UPDATE first, which waits for a worker's
-- commit in flight. Workers are told on the runs channel ('cancel:<id>').
CREATE FUNCTION {schema}.cancel_run(run uuid)
RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r {schema}.runs%ROWTYPE;
BEGIN
    SELECT * INTO r FROM {schema}.runs x WHERE x.id = run FOR UPDATE;
    IF NOT FOUND OR r.status NOT IN ('queued', 'running') THEN
        RETURN NULL;
    END IF;
    IF r.status = 'queued' AND r.started_at IS NULL THEN
        UPDATE {schema}.runs x
        SET status = 'cancelled', epoch = x.epoch + 1, finished_at = now(), updated_at = now(),
            error_message = 'cancelled before it started', cancel_requested_at = coalesce(x.cancel_requested_at, now()),
            waiting_for = NULL
        WHERE x.id = run;
        PERFORM pg_catalog.pg_notify(n.nspname || '_done', run::text)
        FROM pg_catalog.pg_namespace n WHERE n.oid = '{schema}'::regnamespace;
        PERFORM {schema}._wake_parent(run);
        PERFORM {schema}.cancel_run(c.id) FROM {schema}.runs c
        WHERE c.parent_run_id = run AND c.status IN ('queued', 'running');
        RETURN 'cancelled';
    END IF;
    UPDATE {schema}.runs x
    SET cancel_requested_at = coalesce(x.cancel_requested_at, now()), updated_at = now(),
        run_after = CASE WHEN x.status = 'queued' THEN now() ELSE x.run_after END
    WHERE x.id = run;
    PERFORM pg_catalog.pg_notify({schema}.runs_channel(), 'cancel:' || run::text);
    RETURN 'requested';
END
$$;

-- _wake_parent makes the parent of a run that ended due now, if it waits for
-- that very child, and wakes its workers.
CREATE FUNCTION {schema}._wake_parent(child uuid)
RETURNS void
LANGUAGE sql VOLATILE AS $$
    WITH p AS (
        UPDATE {schema}.runs p SET run_after = now(), updated_at = now()
        FROM {schema}.runs c
        WHERE c.id = child AND p.id = c.parent_run_id AND p.status = 'queued'
          AND p.waiting_for = 'child:' || child::text
        RETURNING p.queue)
    SELECT FROM p, LATERAL pg_catalog.pg_notify({schema}.runs_channel(), p.queue) AS notified
$$;

-- step_timeline: one row per step of every run, in order, whatever its kind:
-- activities with their attempt count, sleeps with their due and wake times,
-- signals received (with the signal's ID and send time), events set, and
-- children with their run and its status.
CREATE VIEW {schema}.step_timeline AS
SELECT s.run_id,
       r.workflow,
       s.step,
       s.kind,
       s.activity                                           AS name,
       s.status,
       s.first_started_at                                   AS started_at,
       s.finished_at,
       s.due_at,
       CASE WHEN s.kind IN ('sleep', 'signal') THEN s.finished_at END AS woke_at,
       (SELECT count(*) FROM {schema}.attempts a WHERE a.run_id = s.run_id AND a.step = s.step) AS attempts,
       sg.id                                                AS signal_id,
       sg.sent_at                                           AS signal_sent_at,
       s.child_run_id,
       c.status                                             AS child_status,
       s.reason,
       s.error_message
FROM {schema}.steps s
JOIN {schema}.runs r ON r.id = s.run_id
LEFT JOIN {schema}.signals sg ON sg.run_id = s.run_id AND sg.consumed_step = s.step
LEFT JOIN {schema}.runs c ON c.id = s.child_run_id;

-- _requeue (version 4) now also resets the child steps of a requeued run
-- that recorded their child's failure or cancellation: they wait for the
-- child again, so that requeueing a failed child and then its parent lets
-- the parent see the child's new outcome (a child that is still failed is
-- seen failed again). Everything else is unchanged.
CREATE OR REPLACE FUNCTION {schema}._requeue(ids uuid[])
RETURNS TABLE (run_id uuid, queue text, requeues integer)
LANGUAGE sql VOLATILE AS $$
    WITH r AS (
        UPDATE {schema}.runs
        SET status = 'queued', run_after = now(), requeues = requeues + 1, reclaims = 0,
            error_message = NULL, output = NULL, finished_at = NULL, updated_at = now()
        WHERE id = ANY (ids) AND status = 'failed'
        RETURNING id, queue, requeues),
    f AS (
        UPDATE {schema}.failures f
        SET requeued_at = now(), requeue_count = r.requeues
        FROM r
        WHERE f.run_id = r.id AND f.requeued_at IS NULL
        RETURNING f.run_id, f.step),
    st AS (
        UPDATE {schema}.steps s
        SET status = 'running', reason = NULL, error_message = NULL, error_type = NULL, error_value = NULL,
            finished_at = NULL,
            budget_from = (SELECT coalesce(max(a.attempt), 0) FROM {schema}.attempts a
                           WHERE a.run_id = s.run_id AND a.step = s.step)
        FROM f
        WHERE s.run_id = f.run_id AND s.step = f.step),
    ch AS (
        UPDATE {schema}.steps s
        SET status = 'waiting', reason = NULL, error_message = NULL, error_type = NULL, finished_at = NULL
        FROM r
        WHERE s.run_id = r.id AND s.kind = 'child' AND s.status = 'failed')
    -- Identical notifications in one transaction are delivered once: one per queue.
    SELECT r.id, r.queue, r.requeues
    FROM r, LATERAL pg_catalog.pg_notify({schema}.runs_channel(), r.queue) AS notified
$$;

-- waiting_runs: the runs that wait without a lease for a sleep, a signal or
-- a child, what for, since when, and until when (NULL: until a signal or
-- the child's end wakes them).
CREATE VIEW {schema}.waiting_runs AS
SELECT r.id                                                         AS run_id,
       r.workflow,
       r.queue,
       r.waiting_for,
       r.updated_at                                                 AS waiting_since,
       CASE WHEN r.run_after = 'infinity' THEN NULL ELSE r.run_after END AS wakes_at,
       r.parent_run_id,
       r.cancel_requested_at
FROM {schema}.runs r
WHERE r.status = 'queued' AND r.waiting_for IS NOT NULL;
