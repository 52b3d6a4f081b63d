-- Tenure schema, version 1: runs, steps, attempts and failures.
--
-- Statuses are text with CHECK constraints so that SQL users read them as words.
-- Every time is the database clock (now()); workers never write their own.

CREATE TABLE {schema}.runs (
    id               uuid        PRIMARY KEY,
    workflow         text        NOT NULL,
    queue            text        NOT NULL DEFAULT 'default',
    priority         integer     NOT NULL DEFAULT 0,
    run_key          text,
    input            jsonb       NOT NULL,
    output           jsonb,
    status           text        NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    run_after        timestamptz NOT NULL DEFAULT now(),
    -- The lease: who holds the run, the fencing token, and until when.
    claimant         text,
    epoch            bigint      NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    -- Reclaims of an expired lease since the last attempt started: the backstop
    -- rescue budget for crashes outside activities (DESIGN section 2).
    reclaims         integer     NOT NULL DEFAULT 0,
    requeues         integer     NOT NULL DEFAULT 0,
    error_message    text,
    traceparent      text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    CHECK ((status = 'running') = (lease_expires_at IS NOT NULL))
);

-- Idempotent start: one run per caller key.
CREATE UNIQUE INDEX runs_run_key_idx ON {schema}.runs (run_key) WHERE run_key IS NOT NULL;
-- The claim query: queued runs that are due, per queue, best priority first.
CREATE INDEX runs_claim_idx ON {schema}.runs (queue, priority DESC, run_after) WHERE status = 'queued';
-- Crash recovery: running runs ordered by lease expiry.
CREATE INDEX runs_lease_idx ON {schema}.runs (lease_expires_at) WHERE status = 'running';
CREATE INDEX runs_workflow_status_idx ON {schema}.runs (workflow, status);

CREATE TABLE {schema}.steps (
    run_id           uuid        NOT NULL REFERENCES {schema}.runs (id) ON DELETE CASCADE,
    step             integer     NOT NULL CHECK (step > 0),
    activity         text        NOT NULL,
    status           text        NOT NULL
        CHECK (status IN ('running', 'completed', 'failed')),
    output           jsonb,
    -- For a failed step: why it gave up and the last error, returned to the
    -- workflow again on replay.
    reason           text,
    error_message    text,
    error_type       text,
    -- The effective policy in force for the latest attempt, as JSON.
    policy           jsonb       NOT NULL,
    -- Attempts numbered <= budget_from are not charged to the step's budgets:
    -- a requeue gives the step a fresh budget without rewriting history.
    budget_from      integer     NOT NULL DEFAULT 0,
    first_started_at timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    PRIMARY KEY (run_id, step)
);

CREATE TABLE {schema}.attempts (
    run_id        uuid        NOT NULL,
    step          integer     NOT NULL,
    attempt       integer     NOT NULL CHECK (attempt > 0),
    activity      text        NOT NULL,
    status        text        NOT NULL
        CHECK (status IN ('running', 'succeeded', 'failed', 'timed_out', 'lost', 'interrupted')),
    started_at    timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz,
    error_message text,
    error_type    text,
    error_stack   text,
    -- This attempt follows a lost one: it is charged to the rescue budget.
    is_rescue     boolean     NOT NULL DEFAULT false,
    -- The delay chosen before the next attempt, and where it came from.
    delay_ms      bigint,
    delay_source  text CHECK (delay_source IN ('policy', 'jitter', 'retry-after', 'deadline')),
    epoch         bigint      NOT NULL,
    worker        text        NOT NULL,
    trace_id      text,
    span_id       text,
    PRIMARY KEY (run_id, step, attempt),
    FOREIGN KEY (run_id, step) REFERENCES {schema}.steps (run_id, step) ON DELETE CASCADE,
    CHECK ((status = 'running') = (ended_at IS NULL))
);

-- Rescue detection: attempts left running by a lost lease.
CREATE INDEX attempts_running_idx ON {schema}.attempts (run_id) WHERE status = 'running';
CREATE INDEX attempts_activity_time_idx ON {schema}.attempts (activity, started_at);

CREATE TABLE {schema}.failures (
    id            bigserial   PRIMARY KEY,
    run_id        uuid        NOT NULL REFERENCES {schema}.runs (id) ON DELETE CASCADE,
    workflow      text        NOT NULL,
    reason        text        NOT NULL
        CHECK (reason IN ('retries_exhausted', 'rescues_exhausted', 'non_retryable', 'indeterminate',
                          'deadline_exceeded', 'nondeterminism', 'panic', 'workflow_error', 'bad_input')),
    step          integer,
    activity      text,
    attempts      integer     NOT NULL DEFAULT 0,
    errors        integer     NOT NULL DEFAULT 0,
    rescues       integer     NOT NULL DEFAULT 0,
    error_message text,
    error_type    text,
    error_stack   text,
    failed_at     timestamptz NOT NULL DEFAULT now(),
    requeued_at   timestamptz,
    requeue_count integer     NOT NULL DEFAULT 0
);

-- A run has at most one open failure; requeued ones stay as history.
CREATE UNIQUE INDEX failures_open_run_idx ON {schema}.failures (run_id) WHERE requeued_at IS NULL;
CREATE INDEX failures_activity_time_idx ON {schema}.failures (activity, failed_at);
CREATE INDEX failures_reason_time_idx ON {schema}.failures (reason, failed_at);
CREATE INDEX failures_workflow_time_idx ON {schema}.failures (workflow, failed_at);
CREATE INDEX failures_time_idx ON {schema}.failures (failed_at);
