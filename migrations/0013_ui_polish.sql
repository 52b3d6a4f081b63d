-- Tenure schema, version 13: failure groups keep HTTP status codes.
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

-- As in version 7: computed once per failure row when it is written.
ALTER TABLE {schema}.failures
    ADD COLUMN fingerprint text GENERATED ALWAYS AS ({schema}.failure_fingerprint(error_message)) STORED;

-- As in version 7: the failure groups are read from this index alone.
CREATE INDEX failures_open_fingerprint_idx ON {schema}.failures
    (workflow, activity, reason, error_type, fingerprint, failed_at)
    INCLUDE (run_id)
    WHERE requeued_at IS NULL;
