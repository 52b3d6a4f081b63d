-- Tenure schema, version 13: failure groups keep HTTP status codes.
--
-- failure_fingerprint (version 7) replaced every run of digits by <n>, so
-- that "503 Service Unavailable" and "502 Bad Gateway" from the same
-- activity were one group, "<n> service unavailable": the one number that
-- tells the causes apart was the one blanked. It now keeps a three-digit
-- number from 100 to 599 when it reads as an HTTP status: after "HTTP",
-- "HTTP/1.1", "status", "status code", "code", "returned", "responded",
-- "response", "received", "got", "expected" or "error" (and up to four
-- characters among space, colon, equals, quotes and #: "status=503",
-- "\"status\":503"), or before a standard reason phrase ("503 Service
-- Unavailable", "429 too many requests"). Every other number is still <n>:
-- "amount 250", "timeout after 120 ms", "order 1234503".
--
-- Cost: the fingerprint is a stored generated column, so a new function
-- means a new column: the migration drops failures.fingerprint (and its
-- index), replaces the function, adds the column again and builds the index
-- again. Adding a stored column rewrites the whole failures table, open and
-- requeued rows alike, computing the fingerprint of each (five regular
-- expressions on at most 300 characters), under an ACCESS EXCLUSIVE lock:
-- workers that fail a run and every reader of the failures wait until the
-- migration commits: 2.5 s per 100,000 failure rows on two cores. On a
-- large table, purge old failures first (tenure failures purge) or migrate
-- in a quiet hour. Groups of failures recorded before the migration are
-- regrouped by the new rule at once.

ALTER TABLE {schema}.failures DROP COLUMN fingerprint; -- drops failures_open_fingerprint_idx with it

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
            -- A status after the words that name one.
            '(\m(https?(/[0-9.]+)?|status([ _-]?code)?|code|returned|responded|response|received|got|expected|error)[ :="''#]{1,4})([1-5][0-9][0-9])(?![0-9])',
            E'\\1\x01\\5', 'gi'),
            -- A status before its reason phrase (net/http's StatusText).
            '(?<![0-9])([1-5][0-9][0-9])(?= (continue|switching protocols|ok|created|accepted|no content|partial content|multiple choices|moved permanently|found|see other|not modified|temporary redirect|permanent redirect|bad request|unauthorized|payment required|forbidden|not found|method not allowed|not acceptable|proxy authentication required|request timeout|conflict|gone|length required|precondition failed|request entity too large|content too large|payload too large|request uri too long|uri too long|unsupported media type|requested range not satisfiable|range not satisfiable|expectation failed|i''m a teapot|misdirected request|unprocessable entity|unprocessable content|locked|failed dependency|too early|upgrade required|precondition required|too many requests|request header fields too large|unavailable for legal reasons|internal server error|not implemented|bad gateway|service unavailable|gateway timeout|http version not supported|variant also negotiates|insufficient storage|loop detected|not extended|network authentication required)\M)',
            E'\x01\\1', 'gi'),
            '(?<![0-9\x01])[0-9]+', '<n>', 'g'),
        E'\x01', ''), 300)
$$;

-- As in version 7: computed once per failure row when it is written.
ALTER TABLE {schema}.failures
    ADD COLUMN fingerprint text GENERATED ALWAYS AS ({schema}.failure_fingerprint(error_message)) STORED;

-- As in version 7: the failure groups are read from this index alone.
CREATE INDEX failures_open_fingerprint_idx ON {schema}.failures
    (workflow, activity, reason, error_type, fingerprint, failed_at)
    INCLUDE (run_id)
    WHERE requeued_at IS NULL;
