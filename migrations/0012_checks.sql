-- Tenure schema, version 12: failure_buckets refuses a width that is not
-- positive with a clear error; it divided by zero (22012) for interval '0'
-- and counted nonsense for a negative one.
CREATE OR REPLACE FUNCTION {schema}.failure_buckets(
    width interval DEFAULT interval '1 hour',
    since timestamptz DEFAULT now() - interval '1 day')
RETURNS TABLE (bucket timestamptz, workflow text, activity text, reason text, failures bigint, still_open bigint)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    IF width IS NULL OR extract(epoch FROM width) <= 0 THEN
        RAISE EXCEPTION 'failure_buckets: the width must be a positive interval, not %', coalesce(width::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT to_timestamp(floor(extract(epoch FROM f.failed_at) / extract(epoch FROM width)) * extract(epoch FROM width)),
           f.workflow, f.activity, f.reason,
           count(*), count(*) FILTER (WHERE f.requeued_at IS NULL)
    FROM {schema}.failures f
    WHERE f.failed_at >= since
    GROUP BY 1, 2, 3, 4
    ORDER BY 1, 5 DESC;
END
$$;
