-- Tenure schema, version 3: the claim's indexes name the workflow.
--
-- A worker claims only runs of workflows it registered. With the workflow
-- outside the claim index, every claim walked the queued runs of workflows no
-- live worker serves (100,000 of them: 0.55 ms -> 40 ms per claim) before
-- reaching its own. Keyed by (queue, workflow), store.Claim reads one index
-- range per queue and workflow it serves, in order, and stops at its limit:
-- its cost no longer depends on other workflows' backlogs, nor on finished runs
-- (the indexes are partial).
--
-- Building the indexes reads the whole runs table and blocks writes to it
-- (not reads) until the migration commits: seconds per million runs.

-- Due queued runs of one queue and workflow, best priority first.
DROP INDEX {schema}.runs_claim_idx;
CREATE INDEX runs_claim_idx ON {schema}.runs (queue, workflow, priority DESC, run_after) WHERE status = 'queued';

-- Crash recovery: running runs of one queue and workflow by lease expiry, so
-- that the expired leases of a workflow whose workers are gone for good are
-- not walked by every claim of the others.
DROP INDEX {schema}.runs_lease_idx;
CREATE INDEX runs_lease_idx ON {schema}.runs (queue, workflow, lease_expires_at) WHERE status = 'running';
