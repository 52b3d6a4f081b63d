-- Tenure schema, version 26: River jobs' attempts as Tenure runs (issue 26,
-- docs/design/river-adapter.md, the riveradapter module).
--
-- A River job that the adapter's middleware works is a shadow run: workflow
-- 'river:<kind>', queue 'river', run_key 'river:<job id>', one activity step
-- (step 1, the job's kind, its Tenure policy) whose attempts are the job's
-- attempts. No worker serves 'river:*', so no Tenure worker claims one; the
-- failure table, its fingerprints, requeue, the UI and the CLI see them as
-- any run.
--
-- New values: an attempt 'snoozed' (a Retry-After hint: River snoozes the
-- job, which it does not count as an attempt; charged to no budget) and a
-- failure reason 'cancelled' (a River job cancelled outside its policy, by
-- Client.JobCancel). Both CHECKs are replaced NOT VALID: the rows already
-- there hold older values only.
--
-- Functions (SECURITY INVOKER: the River worker's role writes runs, steps,
-- attempts and failures, as a Tenure worker's does):
--   river_first  records a batch of first attempts, ended (the common
--                case: nothing is written before a job's first attempt);
--   river_begin  begins a batch of later attempts: makes or reopens each
--                job's run, closes an attempt still running as lost (River
--                rescued the job), counts the errors and rescues since the
--                step's budget_from, and either records the attempt or, past
--                MaxRescues, fails the run with 'rescues_exhausted';
--   river_end    ends a batch of attempts begun so: fenced by the attempt
--                (one closed as lost meanwhile is not ended again), it
--                completes, fails (with a failure row) or keeps the run for
--                River's retry.
-- The adapter calls each once per batch of jobs (natural batching, as the
-- group commit does): a first attempt costs one statement, after it; a
-- later one, one before and one after.

ALTER TABLE {schema}.attempts DROP CONSTRAINT attempts_status_check;
ALTER TABLE {schema}.attempts ADD CONSTRAINT attempts_status_check
    CHECK (status IN ('running', 'succeeded', 'failed', 'timed_out', 'lost', 'interrupted', 'cancelled', 'snoozed')) NOT VALID;

ALTER TABLE {schema}.failures DROP CONSTRAINT failures_reason_check;
ALTER TABLE {schema}.failures ADD CONSTRAINT failures_reason_check
    CHECK (reason IN ('retries_exhausted', 'rescues_exhausted', 'non_retryable', 'indeterminate', 'deadline_exceeded',
                      'nondeterminism', 'panic', 'workflow_error', 'bad_input', 'cancelled')) NOT VALID;

-- _river_fail fails a shadow run and its step, with a failure row that
-- counts the attempts, errors and rescues since the step's budget_from.
CREATE FUNCTION {schema}._river_fail(rid uuid, why text, msg text, typ text, stack text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    s record;
BEGIN
    UPDATE {schema}.steps
    SET status = 'failed', reason = why, error_message = msg, error_type = typ, finished_at = now()
    WHERE run_id = rid AND step = 1
    RETURNING activity, budget_from INTO s;
    UPDATE {schema}.runs
    SET status = 'failed', error_message = msg, finished_at = now(), lease_expires_at = NULL, updated_at = now()
    WHERE id = rid AND status IN ('running', 'queued');
    INSERT INTO {schema}.failures (run_id, workflow, reason, step, activity, attempts, errors, rescues,
                                   error_message, error_type, error_stack)
    SELECT r.id, r.workflow, why, 1, s.activity,
           count(a.attempt) FILTER (WHERE a.status <> 'snoozed'),
           count(a.attempt) FILTER (WHERE a.status IN ('failed', 'timed_out')),
           count(a.attempt) FILTER (WHERE a.status = 'lost'),
           msg, typ, stack
    FROM {schema}.runs r
    LEFT JOIN {schema}.attempts a ON a.run_id = r.id AND a.step = 1 AND a.attempt > s.budget_from
    WHERE r.id = rid
    GROUP BY r.id, r.workflow
    ON CONFLICT (run_id) WHERE requeued_at IS NULL DO NOTHING;
END
$$;

CREATE FUNCTION {schema}.river_begin(
    jobs        bigint[],
    ids         uuid[],
    kinds       text[],
    args        jsonb[],
    policies    jsonb[],
    max_rescues integer[],
    trace_ids   text[],
    span_ids    text[],
    histories   jsonb[],
    workers     text[],
    lease       interval)
RETURNS TABLE (ord integer, run_id uuid, attempt integer, errors integer, rescues integer, verdict text)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    i     integer;
    r     record;
    rid   uuid;
    ep    bigint;
    lost  integer;
    bf    integer;
    n     integer;
    e     integer;
    lmsg  text;
    made  boolean;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(jobs), 0) LOOP
        made := false;
        SELECT x.id, x.status, x.epoch INTO r
        FROM {schema}.runs x WHERE x.run_key = 'river:' || jobs[i] FOR UPDATE;
        IF NOT FOUND THEN
            -- A river_first of the same job may insert it meanwhile (a
            -- stale first attempt that ended late): then it is reopened.
            INSERT INTO {schema}.runs (id, workflow, queue, run_key, input, status, claimant, epoch,
                                       lease_expires_at, started_at)
            VALUES (ids[i], 'river:' || kinds[i], 'river', 'river:' || jobs[i], coalesce(args[i], 'null'),
                    'running', workers[i], 1, now() + lease, now())
            ON CONFLICT (run_key) WHERE run_key IS NOT NULL DO NOTHING;
            made := FOUND;
            IF NOT made THEN
                SELECT x.id, x.status, x.epoch INTO r
                FROM {schema}.runs x WHERE x.run_key = 'river:' || jobs[i] FOR UPDATE;
            END IF;
        END IF;
        IF made THEN
            INSERT INTO {schema}.steps (run_id, step, activity, status, policy, kind)
            VALUES (ids[i], 1, kinds[i], 'running', coalesce(policies[i], '{}'), 'activity');
            rid := ids[i];
            ep := 1;
            -- The job's earlier attempts have no rows (a first attempt
            -- lost to a crash before its end was written, or a job worked
            -- before the adapter): they are taken from River's errors, the
            -- rescuer's as lost.
            INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, started_at, ended_at, error_message,
                                           epoch, worker)
            SELECT rid, 1, e.n, kinds[i],
                   CASE WHEN e.v->>'error' = 'Stuck job rescued by JobRescuer' THEN 'lost' ELSE 'failed' END,
                   coalesce((e.v->>'at')::timestamptz, now()), coalesce((e.v->>'at')::timestamptz, now()),
                   CASE WHEN e.v->>'error' = 'Stuck job rescued by JobRescuer'
                        THEN 'lost: River rescued the job as stuck (its worker stopped, or passed RescueStuckJobsAfter)'
                        ELSE e.v->>'error' END,
                   0, 'river'
            FROM jsonb_array_elements(coalesce(histories[i], '[]')) WITH ORDINALITY AS e(v, n);
        ELSE
            rid := r.id;
            IF r.status IN ('failed', 'completed', 'cancelled') THEN
                -- River put the job back itself (JobRetry from its UI or
                -- API): the run is reopened with a fresh budget, audited as
                -- a requeue.
                UPDATE {schema}.runs SET requeues = requeues + 1, output = NULL, error_message = NULL, finished_at = NULL
                WHERE id = rid;
                UPDATE {schema}.failures f SET requeued_at = now(), requeue_count = x.requeues
                FROM {schema}.runs x
                WHERE x.id = rid AND f.run_id = rid AND f.requeued_at IS NULL;
                UPDATE {schema}.steps s
                SET status = 'running', reason = NULL, error_message = NULL, error_type = NULL, finished_at = NULL,
                    budget_from = (SELECT coalesce(max(a.attempt), 0) FROM {schema}.attempts a
                                   WHERE a.run_id = rid AND a.step = 1)
                WHERE s.run_id = rid AND s.step = 1;
                INSERT INTO {schema}.audit_log (action, runs, filter, run_ids, note)
                VALUES ('requeue', 1, jsonb_build_object('river_job', jobs[i]), ARRAY[rid],
                        'the River job was retried in River (JobRetry), outside Tenure');
            END IF;
            UPDATE {schema}.steps s SET policy = coalesce(policies[i], s.policy)
            WHERE s.run_id = rid AND s.step = 1 AND s.policy IS DISTINCT FROM policies[i];
            UPDATE {schema}.runs
            SET status = 'running', claimant = workers[i], epoch = epoch + 1, lease_expires_at = now() + lease,
                run_after = now(), updated_at = now()
            WHERE id = rid
            RETURNING epoch INTO ep;
        END IF;

        -- An attempt still running was lost: River rescued the job (its
        -- worker stopped, or passed RescueStuckJobsAfter) or its end was
        -- never written.
        UPDATE {schema}.attempts a
        SET status = 'lost', ended_at = now(),
            error_message = coalesce(a.error_message,
                'lost: the attempt never ended (its worker stopped, or River rescued the job as stuck)')
        WHERE a.run_id = rid AND a.step = 1 AND a.status = 'running';
        GET DIAGNOSTICS lost = ROW_COUNT;

        SELECT s.budget_from INTO bf FROM {schema}.steps s WHERE s.run_id = rid AND s.step = 1;
        SELECT coalesce(max(a.attempt), 0),
               count(*) FILTER (WHERE a.attempt > bf AND a.status IN ('failed', 'timed_out')),
               count(*) FILTER (WHERE a.attempt > bf AND a.status = 'lost')
        INTO n, e, lost
        FROM {schema}.attempts a WHERE a.run_id = rid AND a.step = 1;

        IF max_rescues[i] IS NOT NULL AND lost > max_rescues[i] THEN
            SELECT a.error_message INTO lmsg FROM {schema}.attempts a
            WHERE a.run_id = rid AND a.step = 1 AND a.status = 'lost' ORDER BY a.attempt DESC LIMIT 1;
            PERFORM {schema}._river_fail(rid, 'rescues_exhausted', lmsg, NULL, NULL);
            RETURN QUERY SELECT i, rid, NULL::integer, e, lost, 'rescues_exhausted'::text;
            CONTINUE;
        END IF;

        INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, is_rescue, epoch, worker, trace_id, span_id)
        SELECT rid, 1, n + 1, s.activity, 'running',
               EXISTS (SELECT FROM {schema}.attempts a WHERE a.run_id = rid AND a.step = 1 AND a.attempt = n AND a.status = 'lost'),
               ep, workers[i], trace_ids[i], span_ids[i]
        FROM {schema}.steps s WHERE s.run_id = rid AND s.step = 1;
        RETURN QUERY SELECT i, rid, n + 1, e, lost, 'run'::text;
    END LOOP;
END
$$;
COMMENT ON FUNCTION {schema}.river_begin(bigint[], uuid[], text[], jsonb[], jsonb[], integer[], text[], text[], jsonb[], text[], interval) IS
    'The River adapter: begins a batch of River jobs'' attempts on their shadow runs (one row back per job, by its place in the arrays: run, attempt, errors and rescues since the budget, verdict run or rescues_exhausted).';

CREATE FUNCTION {schema}.river_end(
    run_ids  uuid[],
    attempts integer[],
    statuses text[],
    messages text[],
    types    text[],
    stacks   text[],
    delays   bigint[],
    sources  text[],
    reasons  text[],
    lease    interval)
RETURNS TABLE (ord integer, recorded boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    i   integer;
    hit integer;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(run_ids), 0) LOOP
        UPDATE {schema}.attempts a
        SET status = statuses[i], ended_at = now(), error_message = messages[i], error_type = types[i],
            error_stack = stacks[i], delay_ms = delays[i], delay_source = sources[i]
        WHERE a.run_id = run_ids[i] AND a.step = 1 AND a.attempt = attempts[i] AND a.status = 'running';
        GET DIAGNOSTICS hit = ROW_COUNT;
        IF hit = 0 THEN
            -- Closed as lost meanwhile (a rescue's next attempt began): the
            -- run is the next attempt's now.
            RETURN QUERY SELECT i, false;
            CONTINUE;
        END IF;
        IF statuses[i] = 'succeeded' THEN
            UPDATE {schema}.steps SET status = 'completed', finished_at = now()
            WHERE run_id = run_ids[i] AND step = 1;
            UPDATE {schema}.runs
            SET status = 'completed', finished_at = now(), lease_expires_at = NULL, updated_at = now()
            WHERE id = run_ids[i];
        ELSIF reasons[i] IS NOT NULL THEN
            PERFORM {schema}._river_fail(run_ids[i], reasons[i], messages[i], types[i], stacks[i]);
        ELSE
            UPDATE {schema}.runs
            SET lease_expires_at = now() + lease + coalesce(delays[i], 0) * interval '1 millisecond', updated_at = now()
            WHERE id = run_ids[i] AND status = 'running';
        END IF;
        RETURN QUERY SELECT i, true;
    END LOOP;
END
$$;
COMMENT ON FUNCTION {schema}.river_end(uuid[], integer[], text[], text[], text[], text[], bigint[], text[], text[], interval) IS
    'The River adapter: ends a batch of River jobs'' attempts (fenced by the attempt: one closed as lost meanwhile is not ended), completing or failing their shadow runs.';

-- river_first records a batch of jobs' first attempts, ended, in one
-- statement: a job at River's attempt 1, no error, never snoozed, has no run, so the
-- middleware writes nothing before it runs and everything after (the run,
-- its step, the attempt, and the failure row of a job given up), set-based;
-- an attempt lost to a crash before its end leaves no row, and the job's
-- next attempt, at River's attempt 2 with the rescuer's error, begins with
-- river_begin, which counts it from River's errors (rescued). A job that
-- has a run already (a first attempt River rescued as stuck, which ended
-- after the next had begun elsewhere) is left to river_late: its row comes
-- back with run_id NULL.
CREATE FUNCTION {schema}.river_first(
    jobs      bigint[],
    ids       uuid[],
    kinds     text[],
    args      jsonb[],
    policies  jsonb[],
    started   timestamptz[],
    statuses  text[],
    messages  text[],
    types     text[],
    stacks    text[],
    delays    bigint[],
    sources   text[],
    reasons   text[],
    trace_ids text[],
    span_ids  text[],
    workers   text[],
    lease     interval)
RETURNS TABLE (ord integer, run_id uuid)
LANGUAGE sql VOLATILE AS $$
    WITH x AS (
        SELECT u.*, CASE WHEN u.status = 'succeeded' THEN 'completed' WHEN u.reason IS NOT NULL THEN 'failed' ELSE 'running' END AS run_status
        FROM unnest(jobs, ids, kinds, args, policies, started, statuses, messages, types, stacks, delays, sources, reasons,
                    trace_ids, span_ids, workers)
             WITH ORDINALITY AS u(job, id, kind, arg, pol, started, status, msg, typ, stack, delay, source, reason, trace_id, span_id,
                                  worker, ord)),
    r AS (
        INSERT INTO {schema}.runs AS r (id, workflow, queue, run_key, input, status, claimant, epoch, lease_expires_at,
                                        started_at, finished_at, error_message)
        SELECT x.id, 'river:' || x.kind, 'river', 'river:' || x.job, coalesce(x.arg, 'null'), x.run_status, x.worker, 1,
               CASE WHEN x.run_status = 'running' THEN now() + lease + coalesce(x.delay, 0) * interval '1 millisecond' END,
               x.started, CASE WHEN x.run_status <> 'running' THEN now() END,
               CASE WHEN x.run_status = 'failed' THEN x.msg END
        FROM x
        ON CONFLICT (run_key) WHERE run_key IS NOT NULL DO NOTHING
        RETURNING r.id),
    s AS (
        INSERT INTO {schema}.steps (run_id, step, activity, status, policy, kind, first_started_at, finished_at,
                                    reason, error_message, error_type)
        SELECT x.id, 1, x.kind, CASE x.run_status WHEN 'completed' THEN 'completed' WHEN 'failed' THEN 'failed' ELSE 'running' END,
               coalesce(x.pol, '{}'), 'activity', x.started, CASE WHEN x.run_status <> 'running' THEN now() END,
               x.reason, CASE WHEN x.run_status = 'failed' THEN x.msg END, CASE WHEN x.run_status = 'failed' THEN x.typ END
        FROM x JOIN r ON r.id = x.id),
    a AS (
        INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, started_at, ended_at, error_message, error_type,
                                       error_stack, delay_ms, delay_source, epoch, worker, trace_id, span_id)
        SELECT x.id, 1, 1, x.kind, x.status, x.started, greatest(now(), x.started), x.msg, x.typ, x.stack, x.delay, x.source, 1,
               x.worker, x.trace_id, x.span_id
        FROM x JOIN r ON r.id = x.id),
    f AS (
        INSERT INTO {schema}.failures (run_id, workflow, reason, step, activity, attempts, errors, rescues,
                                       error_message, error_type, error_stack)
        SELECT x.id, 'river:' || x.kind, x.reason, 1, x.kind, 1, CASE WHEN x.status IN ('failed', 'timed_out') THEN 1 ELSE 0 END, 0,
               x.msg, x.typ, x.stack
        FROM x JOIN r ON r.id = x.id
        WHERE x.reason IS NOT NULL)
    SELECT x.ord::integer, r.id FROM x LEFT JOIN r ON r.id = x.id
$$;
COMMENT ON FUNCTION {schema}.river_first(bigint[], uuid[], text[], jsonb[], jsonb[], timestamptz[], text[], text[], text[], text[], bigint[], text[], text[], text[], text[], text[], interval) IS
    'The River adapter: records a batch of River jobs'' first attempts, ended, with their runs, steps and failure rows (run_id NULL back for a job that has a run already).';

-- river_adopt records a River job that River ended (discarded or
-- cancelled) without a run in Tenure: a first attempt lost to a crash and
-- then discarded by the rescuer, or cancelled meanwhile. Its attempts are
-- taken from River's errors (the rescuer's as lost), and the run fails with
-- why. It returns false, writing nothing, when the job has a run.
CREATE FUNCTION {schema}.river_adopt(job bigint, id uuid, kind text, args jsonb, history jsonb, why text, msg text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    INSERT INTO {schema}.runs (id, workflow, queue, run_key, input, status, claimant, epoch, lease_expires_at, started_at)
    VALUES (id, 'river:' || kind, 'river', 'river:' || job, coalesce(args, 'null'), 'running', 'riveradapter', 1,
            now(), now())
    ON CONFLICT (run_key) WHERE run_key IS NOT NULL DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO {schema}.steps (run_id, step, activity, status, policy, kind)
    VALUES (id, 1, kind, 'running', '{}', 'activity');
    INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, started_at, ended_at, error_message, epoch, worker)
    SELECT id, 1, e.n, kind,
           CASE WHEN e.v->>'error' = 'Stuck job rescued by JobRescuer' THEN 'lost' ELSE 'failed' END,
           coalesce((e.v->>'at')::timestamptz, now()), coalesce((e.v->>'at')::timestamptz, now()),
           CASE WHEN e.v->>'error' = 'Stuck job rescued by JobRescuer'
                THEN 'lost: River rescued the job as stuck (its worker stopped, or passed RescueStuckJobsAfter)'
                ELSE e.v->>'error' END,
           0, 'river'
    FROM jsonb_array_elements(coalesce(history, '[]')) WITH ORDINALITY AS e(v, n);
    PERFORM {schema}._river_fail(id, why, msg, NULL, NULL);
    RETURN true;
END
$$;
COMMENT ON FUNCTION {schema}.river_adopt(bigint, uuid, text, jsonb, jsonb, text, text) IS
    'The River adapter''s reconciler: records a River job River ended without a run in Tenure, its attempts from River''s errors, as a failure.';

-- river_late records a first attempt that ended after its job had a run:
-- River rescued it as stuck and the next attempt began elsewhere (its run
-- made by river_begin, this attempt among its rows as lost, from River's
-- errors). That row is given the attempt's end (it was charged as a
-- rescue when the next began: that stands); the attempt running, if any,
-- is left alone, and the run ends with this one only if none is running.
CREATE FUNCTION {schema}.river_late(
    job bigint, kind text, started timestamptz, status text, msg text, typ text, stack text, delay bigint,
    source text, reason text, trace_id text, span_id text, worker text)
RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    rid  uuid;
    n    integer;
    busy boolean;
BEGIN
    SELECT x.id INTO rid FROM {schema}.runs x WHERE x.run_key = 'river:' || job FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    -- The row river_begin made of it from River's errors (attempt 1,
    -- lost) now says how it ended; without one, it is added after the last.
    UPDATE {schema}.attempts a
    SET status = river_late.status, ended_at = greatest(now(), river_late.started), error_message = msg, error_type = typ,
        error_stack = stack, delay_ms = delay, delay_source = source, worker = river_late.worker,
        trace_id = river_late.trace_id, span_id = river_late.span_id
    WHERE a.run_id = rid AND a.step = 1 AND a.attempt = 1 AND a.status = 'lost' AND a.epoch = 0;
    IF FOUND THEN
        n := 1;
    ELSE
        SELECT coalesce(max(a.attempt), 0) + 1 INTO n FROM {schema}.attempts a WHERE a.run_id = rid AND a.step = 1;
        INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, started_at, ended_at, error_message, error_type,
                                       error_stack, delay_ms, delay_source, epoch, worker, trace_id, span_id)
        VALUES (rid, 1, n, kind, status, started, greatest(now(), started), msg, typ, stack, delay, source, 0,
                worker, trace_id, span_id);
    END IF;
    SELECT EXISTS (SELECT FROM {schema}.attempts a WHERE a.run_id = rid AND a.step = 1 AND a.status = 'running') INTO busy;
    IF busy THEN
        RETURN n;
    END IF;
    IF status = 'succeeded' THEN
        UPDATE {schema}.steps SET status = 'completed', finished_at = now() WHERE run_id = rid AND step = 1;
        UPDATE {schema}.runs SET status = 'completed', finished_at = now(), lease_expires_at = NULL, updated_at = now()
        WHERE id = rid AND status IN ('running', 'queued');
    ELSIF reason IS NOT NULL THEN
        PERFORM {schema}._river_fail(rid, reason, msg, typ, stack);
    END IF;
    RETURN n;
END
$$;
COMMENT ON FUNCTION {schema}.river_late(bigint, text, timestamptz, text, text, text, text, bigint, text, text, text, text, text) IS
    'The River adapter: records a first attempt that ended after its job''s next attempt had begun elsewhere.';
