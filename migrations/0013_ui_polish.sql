-- Tenure schema, version 13: failure groups keep HTTP status codes, failure
-- rows count the rescues made, and the web UI's bulk actions are counted
-- and performed in SQL against a fixed window or cutoff (purges of failures
-- and requeues of a set of failures, below).
--
-- failure_fingerprint (version 7) replaced every run of digits by <n>, so
-- that "503 Service Unavailable" and "502 Bad Gateway" from the same
-- activity were one group, "<n> service unavailable": the one number that
-- tells the causes apart was the one blanked. It now keeps a three-digit
-- number from 100 to 599 where it can only be an HTTP status: after "HTTP"
-- ("HTTP/1.1", "HTTPS"), "status", "status code" or "http_status", in any
-- case (and up to four characters among space, colon, equals, quotes and #:
-- "status=503", "\"status\":503", "StatusCode: 404"), or right before its
-- own reason phrase as net/http's StatusText writes it, in Title Case and
-- matched case-sensitively ("503 Service Unavailable", "200 OK"). Every other
-- number is still <n>: "received 312 bytes", "got 150 rows", "user 123 not
-- found", "user 123 Not Found" (123 is no status with that phrase), "amount
-- 250", "order 1234503". Lower-case phrases do not count ("429 too many
-- requests" is "<n> too many requests"): "ok", "found", "gone", "locked" and
-- "not found" follow counts and IDs as often as statuses.
--
-- Cost: failures.fingerprint was a stored generated column (version 7),
-- which a new function cannot recompute without a rewrite of the whole
-- table under an ACCESS EXCLUSIVE lock (2.5 s per 100,000 failure rows,
-- while every replaying worker, which reads the failures, and every commit
-- of a run failure waited). Instead, the migration
--   1. replaces failure_fingerprint;
--   2. regroups the open failures: an UPDATE of those rows alone (the
--      generated column is recomputed), which takes their row locks and the
--      table's ROW EXCLUSIVE lock, as a requeue does: workers keep reading
--      failures and writing new ones meanwhile; only a requeue or a purge of
--      an open failure waits for the migration. It costs about 45 µs per
--      open failure (4.5 s for 100,000 on two cores), whatever the number
--      of requeued ones: 0.6 s for 10,000 open failures in a table of
--      1,000,000 rows;
--   3. turns the column into a plain one (ALTER COLUMN … DROP EXPRESSION,
--      PostgreSQL 13 and later: a change of the catalog, no rewrite; views
--      on the column are kept), which takes an ACCESS EXCLUSIVE lock held
--      until the migration commits, a moment later: it waits for the
--      transactions that use the failures table and holds up those that
--      come meanwhile, a worker that replays a run among them;
--   4. under that lock, regroups the open failures that other transactions
--      committed during step 2 (which it could not see, and whose workers
--      computed them by the old rule): a read of the open failures' xmin,
--      about 0.4 µs each (40 ms per 100,000), and the new fingerprint of
--      those rows alone;
--   5. keeps the column for new rows and changed messages with a trigger
--      (BEFORE INSERT OR UPDATE OF error_message), which calls the function
--      the generated column called, once per row written.
-- Requeued failures keep the fingerprint they were recorded with: they are
-- history, outside the failure groups and their index, and the migration
-- does not touch them (failure_fingerprint(error_message) gives their new
-- one). The test TestMigration13_RegroupsOpenFailuresWithoutARewrite
-- measures the migration.

-- failure_fingerprint is the error message as the UI groups it: UUIDs become
-- <uuid>, hex IDs (0x…, or words of 8 or more hex digits mixing letters and
-- digits) <hex>, other runs of digits <n> but for HTTP status codes (see
-- above); only the first 300 characters of the message count (so that an
-- index entry stays far below B-tree's limit of about 2,700 bytes, whatever
-- an activity returned). A status code is marked with the character U+0001
-- while the numbers around it are replaced, and the mark removed (the
-- message's own U+0001 characters are removed first). SQL users group by it
-- too:
--   SELECT fingerprint, count(*) FROM tenure.failures WHERE requeued_at IS NULL GROUP BY 1;
CREATE OR REPLACE FUNCTION {schema}.failure_fingerprint(message text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT AS $$
    SELECT pg_catalog.left(pg_catalog.replace(
        pg_catalog.regexp_replace(
        pg_catalog.regexp_replace(
        pg_catalog.regexp_replace(
        pg_catalog.regexp_replace(
        pg_catalog.regexp_replace(
            pg_catalog.replace(pg_catalog.left(message, 300), E'\x01', ''),
            '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<uuid>', 'gi'),
            '\m(0x[0-9a-f]+|(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{8,})\M', '<hex>', 'gi'),
            -- A status after HTTP (HTTP/1.1, HTTPS), status, status code or
            -- http_status, in any case.
            '(\m(?:https?(?:/[0-9.]+)?|(?:https?_)?status(?:[ _-]?code)?)[ :="''#]{1,4})([1-5][0-9][0-9])(?![0-9])',
            E'\\1\x01\\2', 'gi'),
            -- A status before its own reason phrase, as net/http's StatusText
            -- writes it (Title Case, matched case-sensitively).
            '(?<![0-9])('
            '100(?= Continue\M)|101(?= Switching Protocols\M)|102(?= Processing\M)|103(?= Early Hints\M)|'
            '200(?= OK\M)|201(?= Created\M)|202(?= Accepted\M)|203(?= Non-Authoritative Information\M)|'
            '204(?= No Content\M)|205(?= Reset Content\M)|206(?= Partial Content\M)|207(?= Multi-Status\M)|'
            '208(?= Already Reported\M)|226(?= IM Used\M)|300(?= Multiple Choices\M)|'
            '301(?= Moved Permanently\M)|302(?= Found\M)|303(?= See Other\M)|304(?= Not Modified\M)|'
            '305(?= Use Proxy\M)|307(?= Temporary Redirect\M)|308(?= Permanent Redirect\M)|'
            '400(?= Bad Request\M)|401(?= Unauthorized\M)|402(?= Payment Required\M)|403(?= Forbidden\M)|'
            '404(?= Not Found\M)|405(?= Method Not Allowed\M)|406(?= Not Acceptable\M)|'
            '407(?= Proxy Authentication Required\M)|408(?= Request Timeout\M)|409(?= Conflict\M)|'
            '410(?= Gone\M)|411(?= Length Required\M)|412(?= Precondition Failed\M)|'
            '413(?= Request Entity Too Large\M)|414(?= Request URI Too Long\M)|'
            '415(?= Unsupported Media Type\M)|416(?= Requested Range Not Satisfiable\M)|'
            '417(?= Expectation Failed\M)|418(?= I''m a teapot\M)|421(?= Misdirected Request\M)|'
            '422(?= Unprocessable Entity\M)|423(?= Locked\M)|424(?= Failed Dependency\M)|425(?= Too Early\M)|'
            '426(?= Upgrade Required\M)|428(?= Precondition Required\M)|429(?= Too Many Requests\M)|'
            '431(?= Request Header Fields Too Large\M)|451(?= Unavailable For Legal Reasons\M)|'
            '500(?= Internal Server Error\M)|501(?= Not Implemented\M)|502(?= Bad Gateway\M)|'
            '503(?= Service Unavailable\M)|504(?= Gateway Timeout\M)|505(?= HTTP Version Not Supported\M)|'
            '506(?= Variant Also Negotiates\M)|507(?= Insufficient Storage\M)|508(?= Loop Detected\M)|'
            '510(?= Not Extended\M)|511(?= Network Authentication Required\M))',
            E'\x01\\1', 'g'),
            '(?<![0-9\x01])[0-9]+', '<n>', 'g'),
        E'\x01', ''), 300)
$$;

-- Step 2: every open failure, regrouped. Assigning error_message to itself
-- recomputes the generated column. Rows the new rule leaves as they were
-- are written too, so that step 4 can tell every row this statement saw
-- (it wrote it) from those it could not see.
UPDATE {schema}.failures f
SET error_message = f.error_message
WHERE f.requeued_at IS NULL;

-- A failure row's rescues counts the attempts that rescued a lost one
-- (attempts.is_rescue) since this version's release: a step that gave up on
-- its lost attempt, failing indeterminate (at most once) or
-- rescues_exhausted, rescued one fewer than it lost, and its row used to
-- count the lost attempts ("1 attempt (0 errors, 1 rescue)" for a lost
-- at-most-once attempt that nothing rescued). Those rows are exactly the
-- ones of these two reasons with a step (a workflow that ran out of
-- rescues outside its steps has none, and counted none); the others counted
-- the same before. Cost: the rows of those two reasons only, open and
-- requeued, read through failures_reason_time_idx, with their row locks.
-- (A development database that ran the unreleased runtime of commit b657133
-- on schema 12 has rows of the new count already, which this makes one
-- fewer.)
UPDATE {schema}.failures
SET rescues = rescues - 1
WHERE reason IN ('indeterminate', 'rescues_exhausted') AND step IS NOT NULL AND rescues > 0;

-- Step 3: a plain column, kept by the trigger below.
ALTER TABLE {schema}.failures ALTER COLUMN fingerprint DROP EXPRESSION;

-- Step 4: the open failures committed by others during step 2. The rows
-- step 2 wrote are this transaction's (their xmin is its ID); any other
-- open row with a stale fingerprint was committed meanwhile.
UPDATE {schema}.failures f
SET fingerprint = {schema}.failure_fingerprint(f.error_message)
WHERE f.requeued_at IS NULL
  AND CASE WHEN f.xmin::text = (pg_catalog.pg_current_xact_id()::text::bigint % 4294967296)::text THEN false
           ELSE f.fingerprint IS DISTINCT FROM {schema}.failure_fingerprint(f.error_message) END;

-- Step 5: the fingerprint of every new failure row, and of a row whose
-- message changes, computed once when it is written (as by the generated
-- column of version 7).
CREATE FUNCTION {schema}._failure_fingerprint() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.fingerprint := {schema}.failure_fingerprint(NEW.error_message);
    RETURN NEW;
END
$$;

CREATE TRIGGER failures_fingerprint
    BEFORE INSERT OR UPDATE OF error_message ON {schema}.failures
    FOR EACH ROW EXECUTE FUNCTION {schema}._failure_fingerprint();

-- Purges of failures, against a fixed cutoff. The web UI counts what a purge
-- would delete, shows the oldest of those runs, and deletes them on a
-- confirm minutes later: the three must select the same runs, by a cutoff
-- fixed at the count (not an age from each statement's now()), and the
-- count must not lock them. Version 2's purge_failures took FOR UPDATE on
-- every candidate in its dry run too, so that a preview row-locked and
-- dirtied every run it counted.

-- purge_failure_candidates is the one selection of a purge of failures: the
-- runs with failure history (failed runs, and completed or cancelled runs
-- that failed before a requeue) that finished before the cutoff, of one
-- workflow or all. Runs still queued or running are never among them. It
-- locks nothing.
CREATE FUNCTION {schema}.purge_failure_candidates(before timestamptz, workflow text DEFAULT NULL)
RETURNS TABLE (run_id uuid, workflow text, status text, finished_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT r.id, r.workflow, r.status, r.finished_at
    FROM {schema}.runs r
    WHERE r.status IN ('failed', 'completed', 'cancelled')
      AND r.finished_at < purge_failure_candidates.before
      AND (purge_failure_candidates.workflow IS NULL OR r.workflow = purge_failure_candidates.workflow)
      AND EXISTS (SELECT 1 FROM {schema}.failures f WHERE f.run_id = r.id)
$$;

-- _purge_failures is purge_failures and purge_failures_before: with dry_run
-- it counts the candidates and their failure rows, locking nothing;
-- otherwise it locks the candidates, keeps those that are candidates still
-- once locked (a requeue committed meanwhile made its run queued: it is
-- left alone; one that comes after finds no run), deletes them with their
-- failure rows, steps and attempts, and writes one audit row: filter, the
-- cutoff ("before") and the workflow, both counts and the note.
CREATE FUNCTION {schema}._purge_failures(before timestamptz, workflow text, dry_run boolean, note text, filter jsonb)
RETURNS TABLE (runs_deleted bigint, failures_deleted bigint)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    ids uuid[];
    nf  bigint;
BEGIN
    IF _purge_failures.before IS NULL THEN
        RAISE EXCEPTION 'purge_failures: the cutoff must not be NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF dry_run THEN
        RETURN QUERY
            SELECT count(DISTINCT c.run_id), count(*)
            FROM {schema}.purge_failure_candidates(_purge_failures.before, _purge_failures.workflow) c
            JOIN {schema}.failures f ON f.run_id = c.run_id;
        RETURN;
    END IF;
    ids := ARRAY(SELECT c.run_id FROM {schema}.purge_failure_candidates(_purge_failures.before, _purge_failures.workflow) c);
    PERFORM 1 FROM {schema}.runs r WHERE r.id = ANY (ids) FOR UPDATE;
    -- A statement of its own, so a snapshot of its own: the runs as they
    -- are now that they are locked.
    ids := ARRAY(SELECT c.run_id FROM {schema}.purge_failure_candidates(_purge_failures.before, _purge_failures.workflow) c
                 WHERE c.run_id = ANY (ids));
    SELECT count(*) INTO nf FROM {schema}.failures f WHERE f.run_id = ANY (ids);
    DELETE FROM {schema}.runs r WHERE r.id = ANY (ids);
    INSERT INTO {schema}.audit_log (action, runs, failures, filter, note)
    VALUES ('purge_failures', cardinality(ids), nf,
            coalesce(filter, '{}') || jsonb_strip_nulls(jsonb_build_object('before', _purge_failures.before,
                                                                            'workflow', _purge_failures.workflow)),
            _purge_failures.note);
    RETURN QUERY SELECT cardinality(ids)::bigint, nf;
END
$$;

-- purge_failures (version 2) deletes the runs with failure history that
-- finished before now() - older_than; its audit row records older_than and
-- the cutoff it made of it.
CREATE OR REPLACE FUNCTION {schema}.purge_failures(
    older_than interval,
    workflow   text DEFAULT NULL,
    dry_run    boolean DEFAULT false,
    note       text DEFAULT NULL)
RETURNS TABLE (runs_deleted bigint, failures_deleted bigint)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF older_than IS NULL OR older_than < interval '0' THEN
        RAISE EXCEPTION 'purge_failures: older_than must be a non-negative interval, got %', older_than
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY SELECT * FROM {schema}._purge_failures(now() - older_than, workflow, dry_run, note,
                                                       jsonb_build_object('older_than', older_than::text));
END
$$;

-- purge_failures_before is purge_failures against a cutoff given as a time,
-- the runs that finished before it: a count and the purge that follows it
-- minutes later select the same runs (those finishing meanwhile finish
-- after the cutoff).
CREATE FUNCTION {schema}.purge_failures_before(
    before   timestamptz,
    workflow text DEFAULT NULL,
    dry_run  boolean DEFAULT false,
    note     text DEFAULT NULL)
RETURNS TABLE (runs_deleted bigint, failures_deleted bigint)
LANGUAGE sql VOLATILE AS $$
    SELECT * FROM {schema}._purge_failures(before, workflow, dry_run, note, '{}')
$$;

-- purge_completed_before is purge_completed (version 2, which locks nothing)
-- against a cutoff given as a time; its audit row records the cutoff.
CREATE FUNCTION {schema}.purge_completed_before(
    before   timestamptz,
    workflow text DEFAULT NULL,
    dry_run  boolean DEFAULT false,
    note     text DEFAULT NULL)
RETURNS TABLE (runs_deleted bigint, failures_deleted bigint)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    ids uuid[];
    n   bigint;
BEGIN
    IF purge_completed_before.before IS NULL THEN
        RAISE EXCEPTION 'purge_completed: the cutoff must not be NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT coalesce(array_agg(r.id), '{}') INTO ids
    FROM {schema}.runs r
    WHERE r.status IN ('completed', 'cancelled')
      AND r.finished_at < purge_completed_before.before
      AND (purge_completed_before.workflow IS NULL OR r.workflow = purge_completed_before.workflow)
      AND NOT EXISTS (SELECT 1 FROM {schema}.failures f WHERE f.run_id = r.id);
    n := cardinality(ids);
    IF NOT dry_run THEN
        DELETE FROM {schema}.runs r WHERE r.id = ANY (ids);
        INSERT INTO {schema}.audit_log (action, runs, failures, filter, note)
        VALUES ('purge_completed', n, 0,
                jsonb_strip_nulls(jsonb_build_object('before', purge_completed_before.before,
                                                     'workflow', purge_completed_before.workflow)),
                purge_completed_before.note);
    END IF;
    RETURN QUERY SELECT n, 0::bigint;
END
$$;

-- Requeues of a set of failures by filter, of any size. The web UI previews
-- the open failures a filter selects in a window it fixes (failed_at from
-- its age before now to now), with a count, a breakdown and a digest of
-- the set computed here rather than in the client, and its confirm
-- requeues that set, in the same window, if it is still the one previewed.
-- Nothing of the set travels to the client and back: the confirm's
-- statement selects the failure IDs itself (ARRAY(SELECT f.id FROM ... WHERE
-- <the filter and window>)), and its audit row records the filter, the
-- window, the count and the digest.

-- failure_set_digest names a set of failure rows: the md5 of their IDs in
-- ascending order, joined by commas (of the empty set: of the empty
-- string). A preview computes it of the set it shows; requeue_failure_set
-- of the set it locked.
CREATE FUNCTION {schema}.failure_set_digest(failure_ids bigint[]) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT pg_catalog.md5(coalesce(pg_catalog.string_agg(i::text, ',' ORDER BY i), ''))
    FROM pg_catalog.unnest(failure_ids) AS i
$$;

-- requeue_failure_set requeues the runs of the open failures among
-- failure_ids (a preview's set, selected again by its filter and window)
-- when that set is still the one the preview counted: it locks those
-- failure rows and their failed runs (a requeue committed meanwhile is
-- either before, and its row is no longer open, or after), and compares
-- the digest of the rows it locked with digest. When they differ it changes
-- nothing and returns changed = true. Otherwise it requeues them all, or
-- with skip_indeterminate those that did not fail indeterminate, and
-- writes one audit row: filter (how the set was selected, its window
-- included) with the set's size ("failures") and its digest, the runs it
-- put back (run_ids: a run's page lists its requeues by them; the failure
-- IDs are not recorded, the failure rows' requeued_at is the audit row's
-- at) and the note. It returns how many runs it put back.
CREATE FUNCTION {schema}.requeue_failure_set(
    failure_ids        bigint[],
    digest             text,
    skip_indeterminate boolean DEFAULT false,
    note               text DEFAULT NULL,
    filter             jsonb DEFAULT '{}')
RETURNS TABLE (requeued bigint, changed boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    locked bigint[];
    chosen uuid[];
    done   uuid[];
BEGIN
    SELECT coalesce(array_agg(x.id), '{}'),
           coalesce(array_agg(x.run_id) FILTER (WHERE NOT requeue_failure_set.skip_indeterminate OR x.reason <> 'indeterminate'), '{}')
    INTO locked, chosen
    FROM (SELECT f.id, f.run_id, f.reason
          FROM {schema}.failures f JOIN {schema}.runs r ON r.id = f.run_id
          WHERE f.id = ANY (requeue_failure_set.failure_ids) AND f.requeued_at IS NULL AND r.status = 'failed'
          FOR UPDATE OF f, r) AS x;
    IF {schema}.failure_set_digest(locked) IS DISTINCT FROM requeue_failure_set.digest THEN
        RETURN QUERY SELECT 0::bigint, true;
        RETURN;
    END IF;
    done := ARRAY(SELECT q.run_id FROM {schema}._requeue(chosen) AS q);
    IF cardinality(done) > 0 THEN
        INSERT INTO {schema}.audit_log (action, runs, filter, run_ids, note)
        VALUES ('requeue', cardinality(done),
                coalesce(requeue_failure_set.filter, '{}')
                    || jsonb_build_object('failures', cardinality(locked), 'digest', requeue_failure_set.digest),
                done, requeue_failure_set.note);
    END IF;
    RETURN QUERY SELECT cardinality(done)::bigint, false;
END
$$;
