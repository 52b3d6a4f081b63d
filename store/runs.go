package store

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Claimed is a run a worker now holds the lease of.
type Claimed struct {
	ID          uuid.UUID
	Workflow    string
	Queue       string
	Input       []byte
	Epoch       int64
	Reclaimed   bool // the previous holder's lease expired while the run was running
	Reclaims    int  // reclaims since an attempt last started (the backstop rescue count)
	Traceparent string
	// QueueLag is how long the run waited after it was due (or after its
	// previous lease expired) before this claim, by the database clock.
	QueueLag time.Duration
	// Fresh is true on a run's first claim: it has no steps to load yet.
	Fresh bool
}

// Claim takes the leases of up to limit runs of the given workflows and queues:
// running runs whose lease expired (crash recovery, taken first), then queued
// runs that are due, best priority first. The lease expiry comes from the
// database clock and every claim increments the epoch, fencing out the
// previous holder. SKIP LOCKED lets many workers claim concurrently without
// waiting on each other.
//
// Each kind of candidate is found by its own index in order (per queue, a
// LATERAL scan of runs_claim_idx; expired leases by runs_lease_idx), so a
// claim costs the same with a backlog of a million queued runs as with ten.
// Up to limit rows of each kind are locked for the statement; those not
// taken are released when it ends.
func (s *Store) Claim(ctx context.Context, workflows, queues []string, limit int, claimant string, ttl time.Duration) ([]Claimed, error) {
	rows, err := s.pool.Query(ctx, s.sql(`
		WITH expired AS (
			SELECT id, true AS reclaim, lease_expires_at AS due_at, false AS fresh, priority, run_after
			FROM {schema}.runs
			WHERE status = 'running' AND lease_expires_at < now()
			  AND workflow = ANY($1) AND queue = ANY($2)
			ORDER BY lease_expires_at
			LIMIT $3
			FOR UPDATE SKIP LOCKED),
		queued AS (
			SELECT c.*
			FROM unnest($2::text[]) AS q(name)
			CROSS JOIN LATERAL (
				SELECT id, false AS reclaim, run_after AS due_at, started_at IS NULL AS fresh, priority, run_after
				FROM {schema}.runs
				WHERE status = 'queued' AND queue = q.name AND run_after <= now()
				  AND workflow = ANY($1)
				ORDER BY priority DESC, run_after
				LIMIT $3
				FOR UPDATE SKIP LOCKED) AS c),
		due AS (
			SELECT * FROM expired
			UNION ALL
			SELECT * FROM queued
			ORDER BY reclaim DESC, priority DESC, run_after
			LIMIT $3)
		UPDATE {schema}.runs r
		SET status = 'running',
		    claimant = $4,
		    epoch = r.epoch + 1,
		    lease_expires_at = now() + $5 * interval '1 millisecond',
		    reclaims = r.reclaims + due.reclaim::int,
		    started_at = coalesce(r.started_at, now()),
		    updated_at = now()
		FROM due
		WHERE r.id = due.id
		RETURNING r.id, r.workflow, r.queue, r.input, r.epoch, due.reclaim, r.reclaims,
		          coalesce(r.traceparent, ''), greatest(extract(epoch FROM now() - due.due_at) * 1000, 0), due.fresh`),
		workflows, queues, limit, claimant, ttl.Milliseconds())
	if err != nil {
		return nil, s.wrap("claim runs", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Claimed, error) {
		var c Claimed
		var lagMS float64
		err := row.Scan(&c.ID, &c.Workflow, &c.Queue, &c.Input, &c.Epoch, &c.Reclaimed, &c.Reclaims, &c.Traceparent, &lagMS, &c.Fresh)
		c.QueueLag = time.Duration(lagMS * float64(time.Millisecond))
		return c, err
	})
	return out, s.wrap("claim runs", err)
}

// Lease identifies one held lease: the run and the epoch it was claimed at.
type Lease struct {
	RunID uuid.UUID
	Epoch int64
}

// Renew extends every given lease by ttl from the database clock in one
// statement on db and returns those it renewed. A lease missing from the
// result was lost: another worker claimed the run, or it was cancelled. The
// worker runs it on a connection of its own, so that a pool busy with
// activities cannot starve the heartbeat.
func (s *Store) Renew(ctx context.Context, db DB, leases []Lease, ttl time.Duration) (map[Lease]bool, error) {
	ids := make([]uuid.UUID, len(leases))
	epochs := make([]int64, len(leases))
	for i, l := range leases {
		ids[i], epochs[i] = l.RunID, l.Epoch
	}
	rows, err := db.Query(ctx, s.sql(`
		UPDATE {schema}.runs r
		SET lease_expires_at = now() + $3 * interval '1 millisecond'
		FROM unnest($1::uuid[], $2::bigint[]) AS held(id, epoch)
		WHERE r.id = held.id AND r.epoch = held.epoch AND r.status = 'running'
		RETURNING r.id, r.epoch`), ids, epochs, ttl.Milliseconds())
	if err != nil {
		return nil, s.wrap("renew leases", err)
	}
	renewed := make(map[Lease]bool, len(leases))
	var l Lease
	_, err = pgx.ForEachRow(rows, []any{&l.RunID, &l.Epoch}, func() error {
		renewed[l] = true
		return nil
	})
	return renewed, s.wrap("renew leases", err)
}

// CompleteRun records the workflow's output and ends the run, fenced by the
// lease, and wakes callers waiting in Result. It returns the run's age.
func (s *Store) CompleteRun(ctx context.Context, l Lease, output []byte) (age time.Duration, err error) {
	var ageMS float64
	err = s.pool.QueryRow(ctx, s.sql(`
		WITH r AS (
			UPDATE {schema}.runs
			SET status = 'completed', output = $3, finished_at = now(), updated_at = now(),
			    claimant = NULL, lease_expires_at = NULL
			WHERE id = $1 AND epoch = $2 AND status = 'running'
			RETURNING id, created_at)
		SELECT pg_notify($4, id::text)::text, extract(epoch FROM now() - created_at) * 1000 FROM r`),
		l.RunID, l.Epoch, output, s.DoneChannel()).Scan(new(string), &ageMS)
	return time.Duration(ageMS * float64(time.Millisecond)), s.fenceRow("complete run", err)
}

// Failure is what a failing run records in the failure table.
type Failure struct {
	Reason       string
	Step         int // 0: no step (the workflow itself failed)
	Activity     string
	Attempts     int
	Errors       int
	Rescues      int
	ErrorMessage string
	ErrorType    string
	ErrorStack   string
}

// FailRun ends the run as failed and writes its failure row in the same
// statement, hence the same transaction: a failed run always has exactly one
// open failure row. Fenced by the lease; wakes callers waiting in Result. It
// returns the run's age.
func (s *Store) FailRun(ctx context.Context, l Lease, f Failure) (age time.Duration, err error) {
	var step *int
	var activity *string
	if f.Step > 0 {
		step, activity = &f.Step, &f.Activity
	}
	var ageMS float64
	err = s.pool.QueryRow(ctx, s.sql(`
		WITH r AS (
			UPDATE {schema}.runs
			SET status = 'failed', error_message = $3, finished_at = now(), updated_at = now(),
			    claimant = NULL, lease_expires_at = NULL
			WHERE id = $1 AND epoch = $2 AND status = 'running'
			RETURNING id, workflow, created_at),
		f AS (
			INSERT INTO {schema}.failures
				(run_id, workflow, reason, step, activity, attempts, errors, rescues, error_message, error_type, error_stack)
			SELECT id, workflow, $4, $5, $6, $7, $8, $9, $3, $10, nullif($11, '') FROM r
			RETURNING run_id)
		SELECT pg_notify($12, f.run_id::text)::text, extract(epoch FROM now() - r.created_at) * 1000
		FROM f JOIN r ON r.id = f.run_id`),
		l.RunID, l.Epoch, f.ErrorMessage, f.Reason, step, activity, f.Attempts, f.Errors, f.Rescues,
		f.ErrorType, f.ErrorStack, s.DoneChannel()).Scan(new(string), &ageMS)
	return time.Duration(ageMS * float64(time.Millisecond)), s.fenceRow("fail run", err)
}

// ReleaseRun gives up the lease and puts the run back in the queue, due after
// delay: a durable suspension for a long backoff, or a hand-off at shutdown.
// Fenced by the lease. A run due at once is announced to idle workers.
func (s *Store) ReleaseRun(ctx context.Context, l Lease, delay time.Duration) error {
	err := s.pool.QueryRow(ctx, s.sql(`
		WITH r AS (
			UPDATE {schema}.runs
			SET status = 'queued', run_after = now() + $3 * interval '1 millisecond',
			    claimant = NULL, lease_expires_at = NULL, updated_at = now()
			WHERE id = $1 AND epoch = $2 AND status = 'running'
			RETURNING id, queue)
		SELECT CASE WHEN $3 <= 0 THEN pg_notify($4, queue)::text ELSE '' END FROM r`),
		l.RunID, l.Epoch, delay.Milliseconds(), s.RunsChannel()).Scan(new(string))
	return s.fenceRow("release run", err)
}

// fenceRow maps "the fenced statement returned no row" to ErrLeaseLost.
func (s *Store) fenceRow(what string, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrLeaseLost
	}
	return s.wrap(what, err)
}
