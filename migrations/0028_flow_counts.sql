-- Tenure schema, version 28: an activities' concurrency limit is a count
-- per key, and its holders are the attempts themselves (issue 22).
--
-- Until now a unit of a concurrency limit was a row of flow_slots: a take
-- wrote its holder into a free slot and a give cleared it, two updates that
-- are never HOT (a slot moves between two partial indexes), about 680 bytes
-- of WAL and 0.07 ms of machine CPU a limited run (docs/benchmarks.md,
-- "Flow control"). Now a downstream that attempts hold counts, per key,
-- the takes not yet given back (flow_keys.in_use), and an attempt admitted
-- under it names its downstream and key (attempts.hold_downstream,
-- hold_key), set by the insert that records it, which its commit writes
-- anyway. docs/design/flow-counters.md is the design.
--
-- The count is never below the holders that can still give back:
--
-- * a take adds to in_use, under the key's lock, only while in_use stays
--   within the limit (a take whose attempt is then not written, its lease
--   lost, counts one too many: never too few);
-- * a give subtracts, under the key's lock, only for an attempt of the
--   give's epoch that names the downstream (no recount took it away) and
--   that its own transaction ended (xmin; every end of the batch now comes
--   before _flow): never twice for one attempt, as a repeat of the write
--   finds it ended by another transaction, and never for an attempt whose
--   end the fence refused;
-- * a recount (_recount: a take that finds no room, and flow_sweep for a
--   key with waiters) takes the dead holders away, an attempt no longer
--   running or whose run's lease moved on or expired, clearing both of its
--   columns, and sets in_use to the holders left. A holder whose row
--   another transaction has locked (its end under way) is kept and
--   counted. A dead worker's capacity so comes back when it is needed,
--   once its lease has expired.
--
-- An attempt's end clears hold_key (the index's column: the row leaves the
-- index) and keeps hold_downstream, by which the give of the same
-- transaction knows it held. A run's hold (a workflow's concurrency key,
-- holds = 'run') keeps its slot row, as before.
--
-- Workers of an earlier version, still running after the migration, call
-- _flow with 16 arguments and write no holder into their attempts: that
-- _flow (legacy) keeps a slot row for each of their holders, which their
-- gives delete (by run and epoch) and recounts count. The slots held at
-- the migration stay so: they are those workers' holders.
--
-- Locks: ACCESS EXCLUSIVE on attempts and its partitions for the new
-- columns (no row is rewritten: nullable, no default) and SHARE for the
-- partial index, built empty but for the attempts holding a slot now;
-- EXCLUSIVE on flow_slots and flow_keys while the counts are set.

LOCK TABLE {schema}.flow_keys, {schema}.flow_slots IN EXCLUSIVE MODE;

ALTER TABLE {schema}.flow_keys ADD COLUMN in_use integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN {schema}.flow_keys.in_use IS
    'The takes of this key not yet given back (an activities'' downstream): never fewer than the holders that can still give back.';
ALTER TABLE {schema}.attempts ADD COLUMN hold_downstream text, ADD COLUMN hold_key text;
COMMENT ON COLUMN {schema}.attempts.hold_downstream IS
    'The downstream whose capacity this attempt was admitted under; cleared (with hold_key) when a recount found it dead.';
COMMENT ON COLUMN {schema}.attempts.hold_key IS
    'The key of hold_downstream while the attempt holds its capacity; cleared by its end.';
-- The holders of a key, running or dead, and no ended attempt: what a
-- recount reads.
CREATE INDEX attempts_holds_idx ON {schema}.attempts (hold_downstream, hold_key) WHERE hold_key IS NOT NULL;

-- The slots held now are the holders of the running workers, all of an
-- earlier version: they stay, as those workers' holders (see _flow's
-- legacy), and the counts are their number (dead holders too: a recount
-- takes those away). The free slots of activities' downstreams go.
UPDATE {schema}.flow_keys k SET in_use = h.n
FROM (SELECT s.downstream, s.key, count(*)::int AS n FROM {schema}.flow_slots s
      JOIN {schema}.downstreams d ON d.name = s.downstream AND d.holds = 'attempt'
      WHERE s.run_id IS NOT NULL GROUP BY 1, 2) AS h
WHERE k.downstream = h.downstream AND k.key = h.key;
DELETE FROM {schema}.flow_slots s USING {schema}.downstreams d
WHERE d.name = s.downstream AND d.holds = 'attempt' AND s.run_id IS NULL;

-- _recount takes away the dead holders of a key of an activities'
-- downstream and sets its count to the holders left, plus pending: the
-- takes the caller's transaction admitted already, whose attempts it has
-- not written yet. Returns the count. The caller holds the key's lock: no
-- other transaction adds a holder meanwhile.
CREATE FUNCTION {schema}._recount(ds text, k text, pending integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    total integer;
    gone integer;
BEGIN
    -- The holders of workers of an earlier version: slot rows (_flow's
    -- legacy), the dead ones deleted. (Each read once, judged in the
    -- select list: a filter would read the live ones twice.)
    WITH h AS MATERIALIZED (
        SELECT s.slot, {schema}._holds(s.run_id, s.epoch, false) AS live FROM {schema}.flow_slots s
        WHERE s.downstream = ds AND s.key = k AND s.run_id IS NOT NULL),
    del AS (
        DELETE FROM {schema}.flow_slots s USING h
        WHERE NOT h.live AND s.downstream = ds AND s.key = k AND s.slot = h.slot
        RETURNING 1)
    SELECT (SELECT count(*) FROM h) - (SELECT count(*) FROM del) INTO total;
    -- The attempts: each judged live or dead once; a dead one locked by its
    -- primary key and cleared, unless another transaction holds its row
    -- (an end under way): then it is kept and counted.
    WITH h AS MATERIALIZED (
        SELECT a.run_id, a.step, a.attempt,
               -- (The run by its primary key, its status tested outside
               -- the lookup: naming it there made runs_lease_idx a
               -- candidate.)
               a.status = 'running' AND coalesce((
                   SELECT r.epoch = a.epoch AND r.status = 'running' AND r.lease_expires_at > clock_timestamp()
                   FROM (SELECT x.epoch, x.status, x.lease_expires_at FROM {schema}.runs x WHERE x.id = a.run_id OFFSET 0) AS r),
                   false) AS live
        FROM {schema}.attempts a WHERE a.hold_downstream = ds AND a.hold_key = k),
    dead AS (
        SELECT y.run_id, y.step, y.attempt FROM h, LATERAL (
            SELECT z.run_id, z.step, z.attempt FROM {schema}.attempts z
            WHERE z.run_id = h.run_id AND z.step = h.step AND z.attempt = h.attempt AND z.hold_key IS NOT NULL
            OFFSET 0 FOR NO KEY UPDATE SKIP LOCKED) AS y
        WHERE NOT h.live),
    cleared AS (
        UPDATE {schema}.attempts a SET hold_downstream = NULL, hold_key = NULL
        FROM dead WHERE a.run_id >= dead.run_id AND a.run_id <= dead.run_id AND a.step = dead.step AND a.attempt = dead.attempt
        RETURNING 1)
    SELECT total + (SELECT count(*) FROM h), (SELECT count(*) FROM cleared) INTO total, gone;
    UPDATE {schema}.flow_keys x SET in_use = greatest(total - gone, 0) + pending WHERE x.downstream = ds AND x.key = k;
    RETURN greatest(total - gone, 0) + pending;
END
$$;

-- _in_use is what a downstream has in use now: its live holders (read, not
-- recounted), attempts or runs.
CREATE FUNCTION {schema}._in_use(ds text, by_run boolean)
RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN by_run THEN
        (SELECT count(*) FROM {schema}.flow_slots sl WHERE sl.downstream = ds AND sl.run_id IS NOT NULL
           AND {schema}._holds(sl.run_id, sl.epoch, true))
    ELSE
        (SELECT count(*) FROM {schema}.attempts a WHERE a.hold_downstream = ds AND a.hold_key IS NOT NULL
           AND a.status = 'running' AND {schema}._holds(a.run_id, a.epoch, false))
        + (SELECT count(*) FROM {schema}.flow_slots sl WHERE sl.downstream = ds AND sl.run_id IS NOT NULL
             AND {schema}._holds(sl.run_id, sl.epoch, false))
    END
$$;

CREATE OR REPLACE FUNCTION {schema}._live_holders(ds text, k text)
RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN coalesce((SELECT d.holds = 'run' FROM {schema}.downstreams d WHERE d.name = ds), false) THEN
        (SELECT count(*)::int FROM {schema}.flow_slots s
         WHERE s.downstream = ds AND s.key = k AND s.run_id IS NOT NULL AND {schema}._holds(s.run_id, s.epoch, true))
    ELSE
        (SELECT count(*)::int FROM {schema}.attempts a WHERE a.hold_downstream = ds AND a.hold_key = k
           AND a.status = 'running' AND {schema}._holds(a.run_id, a.epoch, false))
        + (SELECT count(*)::int FROM {schema}.flow_slots s
           WHERE s.downstream = ds AND s.key = k AND s.run_id IS NOT NULL AND {schema}._holds(s.run_id, s.epoch, false))
    END
$$;

CREATE OR REPLACE FUNCTION {schema}._truncate_flow_of_runs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    TRUNCATE {schema}.throttles, {schema}.flow_waiters;
    UPDATE {schema}.flow_slots SET run_id = NULL, epoch = NULL, step = NULL, taken_at = NULL WHERE run_id IS NOT NULL;
    UPDATE {schema}.flow_keys SET in_use = 0 WHERE in_use <> 0;
    RETURN NULL;
END
$$;

DROP FUNCTION {schema}._flow(uuid[], bigint[], text[], text[], text[], uuid[], bigint[], integer[],
    integer[], text[], text[], boolean[], text[], text, boolean, integer[]);
DROP FUNCTION {schema}._flow_gives(uuid[], bigint[], text[], text[], text[], text, integer[]);

-- _flow_batch is migration 16's _flow, which workers now call under this
-- name, with give_steps and give_attempts (the attempt each give ends; 0
-- or NULL: a run's) and an attempt's take counted; legacy for the calls of
-- workers of an earlier version (_flow, below).
CREATE FUNCTION {schema}._flow_batch(
    give_runs uuid[], give_epochs bigint[], give_downstreams text[], give_keys text[], give_outcomes text[],
    take_runs uuid[], take_epochs bigint[], take_steps integer[], take_attempts integer[], take_downstreams text[],
    take_keys text[], take_retries boolean[], take_policies text[], by text, again boolean,
    give_slots integer[], give_steps integer[], give_attempts integer[], legacy boolean DEFAULT false)
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
    recounted text[] := '{}'; -- the keys recounted by this call (downstream, newline, key)
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
        PERFORM {schema}._flow_gives(give_runs, give_epochs, give_downstreams, give_keys, give_outcomes, by, give_slots,
                                     give_steps, give_attempts, legacy);
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
             JOIN {schema}.downstreams x ON x.name = y.d WHERE x.concurrency IS NOT NULL AND x.holds = 'run'
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
        IF why IS NULL AND d.concurrency IS NOT NULL AND d.holds = 'attempt' THEN
            -- An attempt's take: room while the key's count is below the
            -- limit, else once a recount (once a key and call) finds it.
            IF (SELECT x.in_use FROM {schema}.flow_keys x WHERE x.downstream = t.downstream AND x.key = t.key) >= d.concurrency
               AND (t.downstream || E'\n' || t.key = ANY (recounted)
                    OR {schema}._recount(t.downstream, t.key, (
                           SELECT count(*)::int FROM unnest(take_runs, take_downstreams, take_keys) AS x(r, dn, k)
                           WHERE x.r = ANY (adm_runs) AND x.dn = t.downstream AND x.k = t.key)) >= d.concurrency) THEN
                why := 'concurrency';
            END IF;
            recounted := recounted || (t.downstream || E'\n' || t.key);
        ELSIF why IS NULL AND d.concurrency IS NOT NULL AND held_slot IS NULL THEN
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
            IF d.holds = 'attempt' THEN -- counted, limited or not: a limit set later finds the count right
                UPDATE {schema}.flow_keys x SET in_use = x.in_use + 1 WHERE x.downstream = t.downstream AND x.key = t.key;
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
    IF legacy AND cardinality(adm_runs) > 0 THEN
        -- A worker of an earlier version writes no holder into its
        -- attempts: each of its admitted takes of an activities' downstream
        -- holds a slot row instead, numbered after the key's others, which
        -- its give (by its run and epoch) deletes and recounts see.
        INSERT INTO {schema}.flow_slots (downstream, key, slot, run_id, epoch, step, taken_at)
        SELECT x.dn, x.k, coalesce((SELECT max(z.slot) FROM {schema}.flow_slots z WHERE z.downstream = x.dn AND z.key = x.k), 0)
                          + row_number() OVER (PARTITION BY x.dn, x.k ORDER BY x.n),
               x.r, x.e, x.st, now()
        FROM unnest(take_runs, take_epochs, take_steps, take_downstreams, take_keys) WITH ORDINALITY AS x(r, e, st, dn, k, n)
        JOIN {schema}.downstreams d ON d.name = x.dn AND d.holds = 'attempt'
        WHERE x.r = ANY (adm_runs);
    END IF;
END
$$;


CREATE FUNCTION {schema}._flow_gives(runs uuid[], epochs bigint[], dss text[], keys text[], outcomes text[], by text,
                                     slots integer[], steps integer[], attempts integer[], legacy boolean)
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
    --
    -- An attempt's give subtracts from its key's count, once: for an
    -- attempt of the give's epoch that names the downstream (no recount
    -- took it away) and that this transaction ended (its end, earlier in
    -- the batch, cleared hold_key). An attempt the batch did not end (its
    -- lease lost) stays counted until a recount finds it dead. Each
    -- attempt by its primary key. Its key's waiters are woken as for a
    -- slot.
    FOR k IN SELECT g.downstream, g.key, count(*)::int AS n
             FROM unnest(runs, epochs, dss, keys, outcomes, steps, attempts) AS g(run_id, epoch, downstream, key, outcome, step, attempt),
                  LATERAL (SELECT a.status, a.epoch, a.hold_downstream, a.hold_key, a.xmin AS xm FROM {schema}.attempts a
                           WHERE a.run_id = g.run_id AND a.step = g.step AND a.attempt = g.attempt OFFSET 0) AS a
             WHERE g.outcome <> 'run' AND g.step > 0 AND a.hold_downstream = g.downstream AND a.epoch = g.epoch
               AND a.status <> 'running' AND a.hold_key IS NULL AND a.xm = pg_catalog.pg_current_xact_id()::xid
             GROUP BY 1, 2 ORDER BY 1, 2 LOOP
        UPDATE {schema}.flow_keys x SET in_use = greatest(x.in_use - k.n, 0) WHERE x.downstream = k.downstream AND x.key = k.key;
        IF EXISTS (SELECT 1 FROM {schema}.flow_waiters w
                   WHERE w.downstream = k.downstream AND w.cause = 'concurrency' AND w.key = k.key) THEN
            PERFORM {schema}._wake(k.downstream, k.key, 'concurrency', k.n);
        END IF;
    END LOOP;

    IF legacy THEN
        -- A worker of an earlier version's gives: its holders' slot rows
        -- (see _flow), each deleted once.
        FOR k IN WITH m AS (DELETE FROM {schema}.flow_slots x
                            USING unnest(runs, epochs, dss, keys, outcomes) AS g(run_id, epoch, downstream, key, outcome)
                            WHERE g.outcome <> 'run' AND x.downstream = g.downstream AND x.key = g.key
                              AND x.run_id = g.run_id AND x.epoch = g.epoch
                            RETURNING x.downstream, x.key)
                 SELECT m.downstream, m.key, count(*)::int AS n FROM m GROUP BY 1, 2 ORDER BY 1, 2 LOOP
            UPDATE {schema}.flow_keys x SET in_use = greatest(x.in_use - k.n, 0) WHERE x.downstream = k.downstream AND x.key = k.key;
            IF EXISTS (SELECT 1 FROM {schema}.flow_waiters w
                       WHERE w.downstream = k.downstream AND w.cause = 'concurrency' AND w.key = k.key) THEN
                PERFORM {schema}._wake(k.downstream, k.key, 'concurrency', k.n);
            END IF;
        END LOOP;
    END IF;

    FOR k IN WITH g AS (SELECT x.*, EXISTS (
                            SELECT 1 FROM {schema}.runs r WHERE r.id = x.run_id AND r.epoch = x.epoch) AS holds
                        FROM unnest(runs, epochs, dss, keys, outcomes, slots) AS x(run_id, epoch, downstream, key, outcome, slot)
                        WHERE x.outcome = 'run'),
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


-- _flow_bulk admits at once the takes of downstream ds that nothing but
-- room can deny: its breaker closed, no rate limit, no retry charged to a
-- retry budget, an attempt's take (not a run's). The takes of a key are
-- admitted in the batch's order while its count stays within the limit (a
-- recount first, when they would not fit), the count raised in one
-- statement a key. A take it does not return (no room left, a repeat, a
-- run no longer running) goes through _flow's loop. Returns the takes
-- admitted, counted in the downstream's state (slot NULL: attempts hold
-- no slot).
CREATE OR REPLACE FUNCTION {schema}._flow_bulk(ds text, runs uuid[], epochs bigint[], steps integer[], attempts integer[], dss text[],
                                    keys text[], retries boolean[], live uuid[], repeats uuid[])
RETURNS TABLE (run_id uuid, epoch bigint, step integer, attempt integer, slot integer)
LANGUAGE plpgsql AS $$
DECLARE
    d {schema}.downstreams;
    s {schema}.downstream_state;
    kk record;
    used integer;
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
    -- A key at a time (each statement's values parameters of its index's
    -- search), counted whether or not the downstream has a limit: a limit
    -- set later finds the count right.
    FOR kk IN SELECT x.k, array_agg(x.r ORDER BY x.n) AS rs, array_agg(x.e ORDER BY x.n) AS es,
                     array_agg(x.st ORDER BY x.n) AS sts, array_agg(x.a ORDER BY x.n) AS ats,
                     array_agg(x.rt ORDER BY x.n) AS rts
              FROM unnest(runs, epochs, steps, attempts, dss, keys, retries) WITH ORDINALITY AS x(r, e, st, a, dn, k, rt, n)
              WHERE x.dn = ds AND x.r = ANY (live) AND NOT x.r = ANY (repeats)
              GROUP BY x.k ORDER BY x.k LOOP
        m := cardinality(kk.rs);
        IF d.concurrency IS NOT NULL THEN
            SELECT x.in_use INTO used FROM {schema}.flow_keys x WHERE x.downstream = ds AND x.key = kk.k;
            IF used + m > d.concurrency THEN
                used := {schema}._recount(ds, kk.k, 0); -- (the key's first takes of the batch)
            END IF;
            m := least(m, greatest(d.concurrency - used, 0));
        END IF;
        IF m > 0 THEN
            UPDATE {schema}.flow_keys x SET in_use = x.in_use + m WHERE x.downstream = ds AND x.key = kk.k;
            RETURN QUERY SELECT kk.rs[i], kk.es[i], kk.sts[i], kk.ats[i], NULL::integer FROM generate_series(1, m) AS i;
            n := n + m; -- the key's first m takes, in order
            n_retries := n_retries + (SELECT count(*) FROM unnest(kk.rts[1:m]) AS r WHERE r)::int;
        END IF;
    END LOOP;
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

CREATE OR REPLACE FUNCTION {schema}.flow_sweep(names text[])
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
               {schema}._in_use(x.name, coalesce((SELECT d.holds = 'run' FROM {schema}.downstreams d WHERE d.name = x.name), false))
        FROM {schema}.downstream_state x WHERE x.name = ANY (names) ORDER BY x.name;
        RETURN;
    END IF;
    PERFORM 1 FROM {schema}.downstream_state x WHERE x.name = ANY (names) ORDER BY x.name FOR UPDATE;
    FOR k IN SELECT DISTINCT w.downstream, w.key FROM {schema}.flow_waiters w
             WHERE w.downstream = ANY (names) AND w.cause = 'concurrency' ORDER BY 1, 2 LOOP
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
    RETURN QUERY
    SELECT x.name, x.breaker,
           {schema}._waiting(x.name),
           {schema}._in_use(x.name, coalesce((SELECT d.holds = 'run' FROM {schema}.downstreams d WHERE d.name = x.name), false))
    FROM {schema}.downstream_state x WHERE x.name = ANY (names) ORDER BY x.name;
END
$$;

CREATE OR REPLACE VIEW {schema}.downstream_status AS
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
       {schema}._in_use(d.name, d.holds = 'run') AS in_use,
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

-- _flow as workers of an earlier version call it (16 arguments): their
-- takes and gives, by slot rows (legacy), so that a migration keeps them
-- working (docs/compatibility.md) until they are replaced.
CREATE FUNCTION {schema}._flow(
    give_runs uuid[], give_epochs bigint[], give_downstreams text[], give_keys text[], give_outcomes text[],
    take_runs uuid[], take_epochs bigint[], take_steps integer[], take_attempts integer[], take_downstreams text[],
    take_keys text[], take_retries boolean[], take_policies text[], by text, again boolean DEFAULT true,
    give_slots integer[] DEFAULT NULL)
RETURNS TABLE (run_id uuid, epoch bigint, cause text, wait_ms float8, slot integer)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT * FROM {schema}._flow_batch(give_runs, give_epochs, give_downstreams, give_keys, give_outcomes,
        take_runs, take_epochs, take_steps, take_attempts, take_downstreams, take_keys, take_retries, take_policies,
        by, again, give_slots, NULL::integer[], NULL::integer[], true)
$$;

-- As in migration 16: only the roles that may write runs call them.
REVOKE EXECUTE ON FUNCTION {schema}._flow_batch(uuid[], bigint[], text[], text[], text[], uuid[], bigint[], integer[],
    integer[], text[], text[], boolean[], text[], text, boolean, integer[], integer[], integer[], boolean) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}._flow(uuid[], bigint[], text[], text[], text[], uuid[], bigint[], integer[],
    integer[], text[], text[], boolean[], text[], text, boolean, integer[]) FROM PUBLIC;
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
        EXECUTE format('GRANT EXECUTE ON FUNCTION {schema}._flow, {schema}._flow_batch TO %I', g.rolname);
    END LOOP;
END
$$;
