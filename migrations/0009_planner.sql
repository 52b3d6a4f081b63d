-- Tenure schema, version 9: no statement of a worker or a client is ever
-- JIT-compiled, whatever the server's settings.
--
-- PostgreSQL compiles a statement with LLVM when the planner's cost for it
-- passes jit_above_cost (100,000 by default). The cost of the worker's
-- statements grows with the tables' statistics (the claim's row-by-row
-- lookups were costed at 226,000 with a million finished runs), so with a day
-- of history every claim, commit and heartbeat was compiled: 27 ms a claim,
-- where executing it takes 0.1 ms. jit = off is what they need; the UI's
-- queries already set it.
--
-- The settings are made by CALL {schema}.planner(mode) as the first statement
-- of each batch, local to its transaction (SET LOCAL), so the pooled
-- connection keeps its own, and nothing is set for the application's
-- statements. A procedure, because CALL is a utility statement: it is never
-- planned, so never compiled itself, even at jit_above_cost = 0, where a
-- SELECT set_config(...) was compiled at every call (3 ms); and SET LOCAL
-- inside a procedure applies to the caller's transaction, implicit ones
-- too (a batch sent outside a transaction), without the warning that a
-- top-level SET LOCAL gives there. The modes:
--
--   hot     jit off: every statement of the client and the worker's reads
--   write   jit off, no sequential or bitmap scans, generic plans: a
--           worker's commits and claims (see store.Commit: each reads its
--           rows by key, in a plan cached once; a custom plan of the claim
--           cost more to plan than to run)
--   renew   jit off, a custom plan at each call: the heartbeat's renewal,
--           planned for its values so that no plan cached while the table
--           was young outlives it
--   enter   jit off inside a caller's transaction (StartTx, SendTx), the
--           caller's setting kept in tenure.saved_jit ...
--   leave   ... and given back after Tenure's statements, so the rest of
--           the caller's transaction is planned as it was.
CREATE PROCEDURE {schema}.planner(mode text)
LANGUAGE plpgsql AS $$
DECLARE
    was text;
BEGIN
    IF mode = 'leave' THEN
        PERFORM pg_catalog.set_config('jit', pg_catalog.current_setting('tenure.saved_jit'), true);
        RETURN;
    END IF;
    was := pg_catalog.current_setting('jit'); -- a simple expression: never compiled
    SET LOCAL jit = off;
    CASE mode
    WHEN 'hot' THEN
        NULL;
    WHEN 'write' THEN
        SET LOCAL enable_seqscan = off;
        SET LOCAL enable_bitmapscan = off;
        SET LOCAL plan_cache_mode = force_generic_plan;
    WHEN 'renew' THEN
        SET LOCAL plan_cache_mode = force_custom_plan;
    WHEN 'enter' THEN
        PERFORM pg_catalog.set_config('tenure.saved_jit', was, true);
    ELSE
        RAISE EXCEPTION 'planner: unknown mode %', mode USING ERRCODE = '22023';
    END CASE;
END
$$;
