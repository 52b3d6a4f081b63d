-- Tenure schema, version 10: a fencing token is never issued twice, even by
-- a failover that loses commits.
--
-- A claim sets the run's epoch, the token every write of its holder is
-- fenced by. It was epoch + 1: after a failover to an asynchronous standby
-- that had not received a claim (worker A holds epoch 8 on the old primary,
-- the new one still says 7), the next claim handed epoch 8 to worker B, and
-- A's writes, reconnected to the new primary, passed B's fence: both ran the
-- run. The new epoch is now at least the database clock in milliseconds
-- since 1970, and always above the old one: a claim the new primary never
-- saw was given a smaller token than any it gives after the failover, as
-- long as the promotion takes longer than the two servers' clocks differ
-- (NTP keeps them within milliseconds; a promotion takes seconds). On one
-- server the epoch only grows, whatever its clock does.
CREATE FUNCTION {schema}.next_epoch(epoch bigint) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT greatest(epoch + 1, (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint)
$$;
