-- Tenure schema, version 29: the common batch of a limited downstream's
-- capacity in three small statements (issue 22).
--
-- Migration 28 made a concurrency limit a count per key, but _flow_batch
-- still runs about 25 statements a commit whatever the batch holds: the
-- missing-row checks, two lock statements, the runs' liveness, the gives'
-- loop, the breaker's accounting, _flow_bulk's own reads, _flow_save, the
-- waits the admissions end. L (a limit declared that never binds) measured
-- ×1.13 to ×1.19 of A's p50 against a target of ×1.10, and a _flow of two
-- statements ×1.02 to ×1.07 (docs/design/flow-counters.md).
--
-- _flow_commit is what a worker of this version calls. The worker counts
-- its batch (its takes and retries by downstream, its gives' calls, errors
-- and errors after the last success by downstream, its takes by key) and
-- says whether it may take the fast path at all: not a repeat of a write
-- whose first try may have committed (Write.Again), no workflow's
-- concurrency key. The fast path then takes two statements that read and
-- lock, and one that writes:
--
-- * the downstreams, locked in order, only when every downstream and key
--   of the batch has its rows (a one-time test before the first lock: a
--   missing row is inserted by _flow_batch, before it locks anything):
--   each admits the fast path when its breaker is closed, it has no rate,
--   attempts hold it (not runs), no retry of the batch is charged to its
--   retry budget, and no give of the batch is an error its breaker would
--   count;
-- * the keys, locked in order after the downstreams, as _flow_batch locks
--   them: each has room for its takes after the gives that count;
-- * the writes: each key's count (its gives subtracted, its takes added,
--   one update a key), each downstream's state (admissions, retries, the
--   breaker's calls, window and streak, the retry budget's growth), and
--   the time of the admissions (tenure.admitted_at, the attempts'
--   started_at, read after every lock).
--
-- Only when a downstream of the batch has a wait open (a run parked by a
-- limit, woken or not) do two statements more run: the wakes of the
-- gives' waiters (each key's gives wake as many of its waiters, oldest
-- first, as _flow_gives wakes them: a limit that binds is the common batch
-- too), and the end of the waits the admissions end. A run waiting for a
-- release always has a wait open, so the test is a lookup of one index.
--
-- Every take the fast path admits is answered by no row (an attempt's take
-- holds no slot). Anything else goes to _flow_batch, which finds the same
-- rows locked already, in the same order, and nothing written.
--
-- A give counts as _flow_batch counts it: for an attempt of its epoch that
-- names the downstream and that this transaction ended (xmin). A take
-- counts whether or not its run is still running: a take whose attempt the
-- start's fence then refuses (the lease lost) counts one too many, never
-- too few, until a recount, as migration 28 allows; the fast path reads no
-- run.
--
-- The rows every limited batch updates, a downstream's state and its
-- keys' counts, are a handful updated hundreds of times a second: their
-- pages are kept nine tenths empty (fillfactor 10), so that each update
-- stays on its page (HOT) and pruning, which a page's fill sets off,
-- keeps each row's chain of old versions short (about 60 versions long at
-- the default fill: each lookup walked them).
--
-- Locks: SHARE UPDATE EXCLUSIVE on downstream_state and flow_keys, for
-- their fillfactor (no row is rewritten; pages filled before keep their
-- rows).

ALTER TABLE {schema}.downstream_state SET (fillfactor = 10);
ALTER TABLE {schema}.flow_keys SET (fillfactor = 10);

CREATE FUNCTION {schema}._flow_commit(
    give_runs uuid[], give_epochs bigint[], give_downstreams text[], give_keys text[], give_outcomes text[],
    take_runs uuid[], take_epochs bigint[], take_steps integer[], take_attempts integer[], take_downstreams text[],
    take_keys text[], take_retries boolean[], take_policies text[], by text, again boolean,
    give_slots integer[], give_steps integer[], give_attempts integer[],
    fast boolean, ds text[], ds_takes integer[], ds_retries integer[], ds_calls integer[], ds_errors integer[],
    ds_tails integer[], ks_downstreams text[], ks_keys text[], ks_takes integer[], wake_for text)
RETURNS TABLE (run_id uuid, epoch bigint, cause text, wait_ms float8, slot integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    throttled boolean; -- a downstream of the batch has a wait open (then perhaps a waiter)
    cd text[]; -- the downstreams, in order, and what the rest needs of each
    cc integer[]; -- concurrency
    cr float8[]; -- retry_ratio
    cp float8[]; -- retry_per_s
    cw bigint[]; -- breaker_window_ms
    kd text[]; -- the keys, in order: downstream, key, gives counted, takes
    kk text[];
    kg integer[];
    kt integer[];
    tnow timestamptz;
BEGIN
    IF fast AND NOT again THEN
        -- The downstreams, locked in order, each by its primary key, when
        -- every row the batch needs exists (a one-time test before the
        -- first lock: a missing row is inserted by _flow_batch, before it
        -- locks anything); each admits the fast path. Whether one has a
        -- wait open: a run waiting for a release has one, so without one
        -- no give of the batch has a waiter to wake.
        SELECT count(*) = cardinality(ds) AND coalesce(bool_and(
                   l.breaker = 'closed' AND l.rate IS NULL AND l.holds = 'attempt'
                   AND (l.retry_ratio IS NULL OR y.rt = 0) AND (l.breaker_error_ratio IS NULL OR y.er = 0)), false),
               coalesce(bool_or(l.throttled), false),
               array_agg(y.d), array_agg(l.concurrency), array_agg(l.retry_ratio), array_agg(l.retry_per_s),
               array_agg(l.breaker_window_ms)
        INTO fast, throttled, cd, cc, cr, cp, cw
        FROM (SELECT y.d, y.rt, y.er FROM unnest(ds, ds_retries, ds_errors) AS y(d, rt, er) ORDER BY y.d) AS y,
             LATERAL (SELECT x.breaker, c.*,
                             EXISTS (SELECT 1 FROM {schema}.throttles t WHERE t.downstream = x.name AND t.ended_at IS NULL) AS throttled
                      FROM {schema}.downstream_state x,
                           LATERAL (SELECT c.concurrency, c.rate, c.holds, c.retry_ratio, c.retry_per_s, c.breaker_error_ratio,
                                           c.breaker_window_ms
                                    FROM {schema}.downstreams c WHERE c.name = x.name OFFSET 0) AS c
                      WHERE x.name = y.d OFFSET 0 FOR UPDATE OF x) AS l
        WHERE NOT EXISTS (SELECT 1 FROM unnest(ds) AS z(d)
                          WHERE NOT EXISTS (SELECT 1 FROM {schema}.downstream_state x WHERE x.name = z.d OFFSET 0))
          AND NOT EXISTS (SELECT 1 FROM unnest(ks_downstreams, ks_keys) AS z(d, k)
                          WHERE NOT EXISTS (SELECT 1 FROM {schema}.flow_keys x WHERE x.downstream = z.d AND x.key = z.k OFFSET 0));
        IF fast THEN
            -- The keys, locked in order after the downstreams (as
            -- _flow_batch locks them): each has room for its takes after
            -- the gives that count (an attempt of the give's epoch, naming
            -- the downstream, that this transaction ended).
            SELECT count(*) = cardinality(ks_downstreams) AND coalesce(bool_and(
                       k.t = 0 OR greatest(fk.in_use - k.g, 0) + k.t <= coalesce(cc[array_position(cd, k.d)], 2147483647)), true),
                   array_agg(k.d), array_agg(k.k), array_agg(k.g), array_agg(k.t)
            INTO fast, kd, kk, kg, kt
            FROM (SELECT z.d, z.k, z.t, coalesce(g.n, 0) AS g
                  FROM unnest(ks_downstreams, ks_keys, ks_takes) AS z(d, k, t)
                  LEFT JOIN (SELECT g.d, g.k, count(*)::int AS n
                             FROM unnest(give_runs, give_epochs, give_downstreams, give_keys, give_steps, give_attempts)
                                      AS g(r, e, d, k, st, a),
                                  LATERAL (SELECT a.status, a.epoch, a.hold_downstream, a.hold_key, a.xmin AS xm
                                           FROM {schema}.attempts a
                                           WHERE a.run_id = g.r AND a.step = g.st AND a.attempt = g.a OFFSET 0) AS a
                             WHERE g.st > 0 AND a.hold_downstream = g.d AND a.epoch = g.e AND a.status <> 'running'
                               AND a.hold_key IS NULL AND a.xm = pg_catalog.pg_current_xact_id()::xid
                             GROUP BY g.d, g.k) AS g ON g.d = z.d AND g.k = z.k
                  ORDER BY z.d, z.k) AS k,
                 LATERAL (SELECT x.in_use FROM {schema}.flow_keys x
                          WHERE x.downstream = k.d AND x.key = k.k OFFSET 0 FOR UPDATE) AS fk;
        END IF;
        IF fast THEN
            -- The writes, each row by its primary key: the keys' counts;
            -- the downstreams' states (the takes admitted, the gives'
            -- outcomes, counted by the worker: their calls, errors, and the
            -- errors after the last success, -1 when none succeeded).
            tnow := clock_timestamp(); -- after every lock, as _flow_batch's takes
            WITH ku AS (
                UPDATE {schema}.flow_keys x SET in_use = greatest(x.in_use - k.g, 0) + k.t
                FROM unnest(kd, kk, kg, kt) AS k(d, k, g, t)
                WHERE (x.downstream, x.key) >= (k.d, k.k) AND (x.downstream, x.key) <= (k.d, k.k) AND (k.g > 0 OR k.t > 0))
            UPDATE {schema}.downstream_state x SET
                admitted = x.admitted + y.n, retries = x.retries + y.rt,
                tokens = CASE WHEN y.ratio IS NULL OR y.n = 0 THEN x.tokens
                              ELSE least(greatest(y.per_s, 1),
                                         coalesce(x.tokens, greatest(y.per_s, 1))
                                         + y.per_s * coalesce(extract(epoch FROM now() - x.tokens_at), 0)
                                         + y.n * y.ratio) END,
                tokens_at = CASE WHEN y.ratio IS NULL OR y.n = 0 THEN x.tokens_at ELSE now() END,
                calls = x.calls + y.calls, errors = x.errors + y.er,
                window_start = CASE WHEN y.calls = 0 THEN x.window_start
                                    WHEN x.window_start + y.window_ms * interval '1 millisecond' < now() THEN now()
                                    ELSE x.window_start END,
                window_calls = CASE WHEN y.calls = 0 THEN x.window_calls
                                    WHEN x.window_start + y.window_ms * interval '1 millisecond' < now() THEN y.calls
                                    ELSE x.window_calls + y.calls END,
                window_errors = CASE WHEN y.calls = 0 THEN x.window_errors
                                     WHEN x.window_start + y.window_ms * interval '1 millisecond' < now() THEN y.er
                                     ELSE x.window_errors + y.er END,
                error_streak = CASE WHEN y.calls = 0 THEN x.error_streak
                                    WHEN x.window_start + y.window_ms * interval '1 millisecond' < now()
                                    THEN coalesce(nullif(y.tail, -1), y.er)
                                    ELSE coalesce(nullif(y.tail, -1), x.error_streak + y.er) END
            FROM (SELECT y.*, cr[array_position(cd, y.d)] AS ratio, cp[array_position(cd, y.d)] AS per_s,
                         cw[array_position(cd, y.d)] AS window_ms
                  FROM unnest(ds, ds_takes, ds_retries, ds_calls, ds_errors, ds_tails) AS y(d, n, rt, calls, er, tail)
                  WHERE y.n > 0 OR y.calls > 0) AS y
            WHERE x.name >= y.d AND x.name <= y.d;
            IF throttled THEN
                -- Each key's gives wake as many of its waiters, oldest
                -- first, as _flow_gives wakes them (the batch's takes,
                -- counted above, may have used up the room: a woken run
                -- denied again waits on in the same wait, as after
                -- _flow_batch); the notice names the worker that listens
                -- for them (wake_for: the batch's own, '' for every
                -- worker; _wake_for).
                PERFORM {schema}._wake_for(k.d, k.k, 'concurrency', k.g, coalesce(wake_for, ''))
                FROM unnest(kd, kk, kg) AS k(d, k, g)
                WHERE k.g > 0 AND EXISTS (SELECT 1 FROM {schema}.flow_waiters w
                                          WHERE w.downstream = k.d AND w.cause = 'concurrency' AND w.key = k.k);
                -- The waits the admissions end (a run woken from one, still
                -- running in the take's epoch: the take of a lease lost
                -- ends no wait of the run's next holder), each found by
                -- its step's index, then updated by its primary key.
                UPDATE {schema}.throttles x SET ended_at = tnow, attempt = th.a
                FROM (SELECT w.id, y.a
                      FROM unnest(take_runs, take_epochs, take_steps, take_attempts) AS y(r, e, st, a),
                           LATERAL (SELECT h.status FROM {schema}.runs h WHERE h.id = y.r AND h.epoch = y.e OFFSET 0) AS h,
                           LATERAL (SELECT w.id, w.ended_at FROM {schema}.throttles w
                                    WHERE w.run_id = y.r AND w.step = y.st OFFSET 0) AS w
                      WHERE h.status = 'running' AND w.ended_at IS NULL) AS th
                WHERE x.id >= th.id AND x.id <= th.id;
            END IF;
            -- Each attempt admitted starts when it was (sqlStartAttempt).
            PERFORM pg_catalog.set_config('tenure.admitted_at', tnow::text, true);
            RETURN; -- each take admitted: no row (an attempt's take holds no slot)
        END IF;
    END IF;
    RETURN QUERY SELECT * FROM {schema}._flow_batch(give_runs, give_epochs, give_downstreams, give_keys, give_outcomes,
        take_runs, take_epochs, take_steps, take_attempts, take_downstreams, take_keys, take_retries, take_policies,
        by, again, give_slots, give_steps, give_attempts);
END
$$;

-- _wake_for is _wake whose notice names the worker that is to claim the
-- runs it woke: 'woke:<label>' on the runs channel, '' (every worker)
-- when target is ''. The fast path's gives name their own worker, which
-- has just ended the attempt that held the capacity: under a limit that
-- binds, every release woke a run and every worker's claimer answered its
-- notice, one to claim it and the others to claim nothing (F-conc, four
-- workers: three empty claims a run). The worker named claims at once;
-- the others claim a moment later for what it does not take (runtime,
-- listener), and workers of an earlier version claim at once, as for any
-- notice. Only the fast path names a worker: _flow_batch's wakes and the
-- sweep's notify every worker.
CREATE FUNCTION {schema}._wake_for(ds text, k text, why text, n integer, target text)
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
        PERFORM pg_catalog.pg_notify({schema}.runs_channel(), CASE WHEN target = '' THEN '' ELSE 'woke:' || target END);
    END IF;
    RETURN woken;
END
$$;

-- _wake, as migration 16 wrote it: _wake_for's notice to every worker.
CREATE OR REPLACE FUNCTION {schema}._wake(ds text, k text, why text, n integer)
RETURNS integer
LANGUAGE sql AS $$
    SELECT {schema}._wake_for(ds, k, why, n, '')
$$;

-- _flow_sweep is flow_sweep as migration 28 left it, with its reads
-- before its locks, and the waits counted only when counts is set.
--
-- It counted the waits (_waiting, a lookup per open wait) and read the
-- keys with waiters (every waiter's index entry) while it held the
-- downstream's and its keys' locks: with 4,000 runs waiting, 17 to 21 ms
-- a sweep, each worker's every second, in which no commit of the
-- downstream took or gave back. The counts are now read first, without a
-- lock (the same figures: a run woken keeps its wait open until it is
-- admitted); the locks cover only the recounts and wakes, and only when a
-- key has a concurrency waiter or a breaker is not closed (a breaker's
-- waiters are woken only then). The keys with waiters are found by a skip
-- scan of flow_waiters_queue_idx, a probe per key.
--
-- And every worker counted every wait every second for a gauge
-- (FlowObserver.DownstreamState): a worker of this version counts them
-- every tenth second or so (runtime's flowCountEvery), or at the next
-- sweep when waits appear where it last counted none; its sweeps in
-- between cost what the keys with waiters cost.
CREATE FUNCTION {schema}._flow_sweep(names text[], counts boolean)
RETURNS TABLE (downstream text, breaker text, waiting bigint, in_use bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    k record;
    d {schema}.downstreams;
    s {schema}.downstream_state;
    free integer;
    counted text[]; -- the downstreams, in order, with their waits counted
    waits bigint[];
    kd text[]; -- the keys with a concurrency waiter: downstream, key
    kk text[];
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
        SELECT w.ds FROM w WHERE w.ds IS NOT NULL)) AS x ORDER BY 1);
    -- The waits, counted before any lock, when asked for (NULL when not).
    counted := '{}';
    waits := '{}';
    IF counts THEN
        SELECT coalesce(array_agg(x.name ORDER BY x.name), '{}'), coalesce(array_agg({schema}._waiting(x.name) ORDER BY x.name), '{}')
        INTO counted, waits
        FROM {schema}.downstream_state x WHERE x.name = ANY (names);
    END IF;
    -- The keys with a concurrency waiter, a probe each (a skip scan of
    -- flow_waiters_queue_idx within each downstream).
    SELECT coalesce(array_agg(y.d ORDER BY y.d, y.k), '{}'), coalesce(array_agg(y.k ORDER BY y.d, y.k), '{}')
    INTO kd, kk
    FROM unnest(names) AS n(d), LATERAL (
        WITH RECURSIVE w(k) AS (
            SELECT (SELECT min(x.key) FROM {schema}.flow_waiters x WHERE x.downstream = n.d AND x.cause = 'concurrency')
            UNION ALL
            SELECT (SELECT min(x.key) FROM {schema}.flow_waiters x WHERE x.downstream = n.d AND x.cause = 'concurrency' AND x.key > w.k)
            FROM w WHERE w.k IS NOT NULL)
        SELECT n.d, w.k FROM w WHERE w.k IS NOT NULL) AS y(d, k);
    -- Nothing to give back or wake without a waiter or a breaker not
    -- closed: then no lock, which would hold up the commits that admit
    -- until the claim's transaction ends (the sweep waited for them, and
    -- they for it, 13 ms a sweep in L).
    IF cardinality(kd) > 0
       OR EXISTS (SELECT 1 FROM {schema}.downstream_state x WHERE x.name = ANY (names) AND x.breaker <> 'closed') THEN
        PERFORM 1 FROM {schema}.downstream_state x WHERE x.name = ANY (names) ORDER BY x.name FOR UPDATE;
        FOR k IN SELECT y.d AS downstream, y.k AS key FROM unnest(kd, kk) AS y(d, k) ORDER BY 1, 2 LOOP
            PERFORM 1 FROM {schema}.flow_keys x WHERE x.downstream = k.downstream AND x.key = k.key FOR UPDATE;
            SELECT * INTO d FROM {schema}.downstreams x WHERE x.name = k.downstream;
            -- (An activities' key is recounted: its dead holders taken away.)
            free := coalesce(d.concurrency, 2147483647) - CASE WHEN d.holds = 'attempt' THEN {schema}._recount(k.downstream, k.key, 0)
                                                                ELSE {schema}._live_holders(k.downstream, k.key) END;
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
    END IF;
    -- Not counted, the waits are 0 when none is open (a probe of
    -- throttles_downstream_idx), else NULL: the worker counts at its next
    -- sweep when it last counted none.
    RETURN QUERY
    SELECT x.name, x.breaker,
           CASE WHEN counts THEN waits[array_position(counted, x.name)]
                WHEN NOT EXISTS (SELECT 1 FROM {schema}.throttles t WHERE t.downstream = x.name AND t.ended_at IS NULL) THEN 0 END,
           {schema}._in_use(x.name, coalesce((SELECT d.holds = 'run' FROM {schema}.downstreams d WHERE d.name = x.name), false))
    FROM {schema}.downstream_state x WHERE x.name = ANY (names) ORDER BY x.name;
END
$$;

-- flow_sweep, as workers before schema 29 call it: with the waits counted.
CREATE OR REPLACE FUNCTION {schema}.flow_sweep(names text[])
RETURNS TABLE (downstream text, breaker text, waiting bigint, in_use bigint)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT * FROM {schema}._flow_sweep(names, true)
$$;

-- As _flow_batch and flow_sweep: only the roles that may write runs call them.
REVOKE EXECUTE ON FUNCTION {schema}._flow_commit(uuid[], bigint[], text[], text[], text[], uuid[], bigint[], integer[],
    integer[], text[], text[], boolean[], text[], text, boolean, integer[], integer[], integer[],
    boolean, text[], integer[], integer[], integer[], integer[], integer[], text[], text[], integer[], text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}._flow_sweep(text[], boolean) FROM PUBLIC;
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT r.rolname FROM pg_catalog.pg_roles r
        WHERE NOT r.rolsuper AND r.rolname !~ '^pg_'
          AND pg_catalog.has_function_privilege(r.oid, '{schema}.flow_sweep(text[])', 'EXECUTE')
          AND pg_catalog.has_table_privilege(r.oid, '{schema}.runs', 'UPDATE')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {schema}._flow_commit, {schema}._flow_sweep TO %I', g.rolname);
    END LOOP;
END
$$;
