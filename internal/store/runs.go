package store

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/policy"
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
	// CancelRequested is true when Cancel asked for the run to end: its
	// workflow sees sdk.ErrCancelled.
	CancelRequested bool
	// Child is true for a run started by another run's workflow.
	Child bool
	// Key is the key the run was started with; "" for none.
	Key string

	fairVT int64 // the run's virtual time; 0 without a fairness key
}

// Claim takes the leases of up to limit runs of the given workflows and queues:
// running runs whose lease expired (crash recovery, taken first), then queued
// runs that are due, best priority first, earliest due first among equals
// (runs with a fairness key after the others of their priority, by virtual
// time: see below). The lease expiry comes from the database clock and every
// claim increments the epoch, fencing out the previous holder. SKIP LOCKED
// lets many workers claim concurrently without waiting on each other.
//
// Candidates are found per (queue, workflow) pair, each by a LATERAL scan of
// its own index range in order (queued runs by runs_claim_idx, expired leases
// by runs_lease_idx) that stops at limit, and the pairs' candidates are merged.
// So a claim costs the same whatever else the table holds: a million queued
// runs of its workflows, the backlog of a workflow no worker registered, or
// finished runs. Up to limit rows of each kind and pair are locked for the
// statement; those not taken are released when it ends.
//
// Fresh runs with a fairness key (never claimed yet) have an index of their
// own, runs_fair_idx, ordered by priority and virtual time (fair_vt, see
// migration 17), and a LATERAL scan of their own per pair; runs_claim_idx
// holds every other queued run. At equal priority the claim takes runs
// without a key first (they are not subject to fairness, and run as they
// would without fair runs beside them), then runs with a key by virtual
// time (a fair run that ran before, due again, keeps its time). The store
// advances each queue's virtual clock (fair_queues) to the greatest virtual
// time its claims took there, with the next claim's batch (see fairClock). A
// worker whose queues hold no fresh fair run reads one empty range of
// runs_fair_idx per pair more, and writes nothing else.
//
// Runs pinned to a build (sdk.WithPinning, schema version 19) are claimed
// only by a store of that build (WithBuild): pinned_to is a key column of
// runs_claim_idx and runs_lease_idx after the pair, so that the claim reads
// the pair's unpinned runs (pinned_to empty) and those pinned to its build
// as two ranges each, and never the runs pinned to another build, however
// many. A store with no build reads the unpinned ranges only. The claim
// pins the fresh runs it takes of the workflows given to Pin to its build.
func (s *Store) Claim(ctx context.Context, workflows, queues []string, limit int, claimant string, ttl time.Duration) ([]Claimed, error) {
	out, _, err := s.claim(ctx, nil, workflows, queues, limit, claimant, ttl)
	return out, err
}

// claim is Claim, after the wakes of wake when it is not nil, in the same
// transaction and round trip. limit 0 claims nothing.
func (s *Store) claim(ctx context.Context, wake *wakeRequest, workflows, queues []string, limit int, claimant string,
	ttl time.Duration) ([]Claimed, Woken, error) {
	// With the commit's planner settings (planWrite): generic plans, as a
	// custom plan of this statement cost more to plan than to run.
	b := &pgx.Batch{}
	clockQueues, clockVTs, advance := s.clock.take()
	if advance {
		b.Queue(s.sql(sqlAdvanceClock), clockQueues, clockVTs)
	}
	var woken Woken
	if wake != nil {
		wake.queue(s, b, &woken)
	}
	var out []Claimed
	if limit > 0 {
		b.Queue(s.sql(sqlClaim), workflows, queues, limit, claimant, ttl.Milliseconds(), s.pinnedOf(), s.build).Query(func(rows pgx.Rows) error {
			var err error
			out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Claimed, error) {
				var c Claimed
				var lagMS float64
				err := row.Scan(&c.ID, &c.Workflow, &c.Queue, &c.Input, &c.Epoch, &c.Reclaimed, &c.Reclaims, &c.Traceparent, &lagMS, &c.Fresh,
					&c.CancelRequested, &c.Child, &c.fairVT, &c.Key)
				c.QueueLag = time.Duration(lagMS * float64(time.Millisecond))
				return c, err
			})
			return err
		})
	}
	if err := s.send(ctx, s.pool, planWrite, b).Close(); err != nil {
		for i, q := range clockQueues { // for the next claim
			s.clock.add(q, clockVTs[i])
		}
		return nil, Woken{}, s.wrap("claim runs", err)
	}
	for _, c := range out {
		if c.fairVT > 0 {
			s.clock.add(c.Queue, c.fairVT)
		}
	}
	return out, woken, nil
}

// sqlClaim is Claim's statement.
const sqlClaim = `
		WITH pairs AS (
			-- Distinct, so that no pair's rows are found twice.
			SELECT DISTINCT q.name AS queue, w.name AS workflow
			FROM unnest($2::text[]) AS q(name), unnest($1::text[]) AS w(name)),
		expired AS (
			SELECT c.*
			FROM pairs p
			CROSS JOIN LATERAL (
				SELECT id, true AS reclaim, lease_expires_at AS due_at, false AS fresh, priority, run_after, fair_vt, queue
				FROM {schema}.runs
				WHERE status = 'running' AND queue = p.queue AND workflow = p.workflow AND pinned_to = ''
				  AND lease_expires_at < now()
				ORDER BY lease_expires_at
				LIMIT $3
				FOR UPDATE SKIP LOCKED) AS c),
		expired_pinned AS (
			SELECT c.*
			FROM pairs p
			CROSS JOIN LATERAL (
				SELECT id, true AS reclaim, lease_expires_at AS due_at, false AS fresh, priority, run_after, fair_vt, queue
				FROM {schema}.runs
				WHERE status = 'running' AND queue = p.queue AND workflow = p.workflow AND pinned_to = $7
				  AND lease_expires_at < now()
				ORDER BY lease_expires_at
				LIMIT $3
				FOR UPDATE SKIP LOCKED) AS c
			WHERE $7 <> ''),
		queued AS (
			SELECT c.*
			FROM pairs p
			CROSS JOIN LATERAL (
				SELECT id, false AS reclaim, run_after AS due_at, started_at IS NULL AS fresh, priority, run_after, fair_vt, queue
				FROM {schema}.runs
				WHERE status = 'queued' AND (fair_vt IS NULL OR started_at IS NOT NULL) -- runs_claim_idx's predicate
				  AND queue = p.queue AND workflow = p.workflow AND pinned_to = ''
				  AND run_after <= now()
				ORDER BY priority DESC, run_after
				LIMIT $3
				FOR UPDATE SKIP LOCKED) AS c),
		queued_pinned AS (
			SELECT c.*
			FROM pairs p
			CROSS JOIN LATERAL (
				SELECT id, false AS reclaim, run_after AS due_at, false AS fresh, priority, run_after, fair_vt, queue
				FROM {schema}.runs
				WHERE status = 'queued' AND (fair_vt IS NULL OR started_at IS NOT NULL) -- runs_claim_idx's predicate
				  AND queue = p.queue AND workflow = p.workflow AND pinned_to = $7
				  AND run_after <= now()
				ORDER BY priority DESC, run_after
				LIMIT $3
				FOR UPDATE SKIP LOCKED) AS c
			WHERE $7 <> ''),
		fair AS (
			SELECT c.*
			FROM pairs p
			CROSS JOIN LATERAL (
				SELECT id, false AS reclaim, run_after AS due_at, true AS fresh, priority, run_after, fair_vt, queue
				FROM {schema}.runs
				WHERE status = 'queued' AND fair_vt IS NOT NULL AND started_at IS NULL -- runs_fair_idx's predicate
				  AND queue = p.queue AND workflow = p.workflow
				  AND run_after <= now()
				ORDER BY priority DESC, fair_vt
				LIMIT $3
				FOR UPDATE SKIP LOCKED) AS c),
		due AS (
			SELECT * FROM expired
			UNION ALL
			SELECT * FROM expired_pinned
			UNION ALL
			SELECT * FROM queued
			UNION ALL
			SELECT * FROM queued_pinned
			UNION ALL
			SELECT * FROM fair
			ORDER BY reclaim DESC, priority DESC, fair_vt NULLS FIRST, run_after
			LIMIT $3)
		UPDATE {schema}.runs r
		SET status = 'running',
		    claimant = $4,
		    epoch = {schema}.next_epoch(r.epoch),
		    lease_expires_at = now() + $5 * interval '1 millisecond',
		    reclaims = r.reclaims + due.reclaim::int,
		    started_at = coalesce(r.started_at, now()),
		    build_id = coalesce(r.build_id, nullif(current_setting('tenure.build', true), '')), -- the first claim's
		    pinned_to = CASE WHEN r.started_at IS NULL AND r.workflow = ANY ($6::text[]) THEN $7 ELSE r.pinned_to END,
		    waiting_for = NULL,
		    updated_at = now()
		FROM due
		WHERE r.id >= due.id AND r.id <= due.id -- a lookup per run (see endFence), whatever LIMIT $3 is thought to be
		RETURNING r.id, r.workflow, r.queue, r.input, r.epoch, due.reclaim, r.reclaims,
		          coalesce(r.traceparent, ''), greatest(extract(epoch FROM now() - due.due_at) * 1000, 0), due.fresh,
		          r.cancel_requested_at IS NOT NULL, r.parent_run_id IS NOT NULL, coalesce(r.fair_vt, 0), coalesce(r.run_key, '')`

// sqlAdvanceClock advances the virtual clocks of queues ($1) to the
// virtual times ($2) that earlier claims took there, when they are behind:
// a lookup per queue. The queues come sorted, so that two workers lock
// their rows in one order.
const sqlAdvanceClock = `
		UPDATE {schema}.fair_queues q
		SET vt = x.vt
		FROM unnest($1::text[], $2::bigint[]) AS x(queue, vt)
		WHERE q.queue >= x.queue AND q.queue <= x.queue AND q.vt < x.vt`

// fairClock holds, per queue, the greatest virtual time this store's claims
// took there that the queue's clock (fair_queues.vt) may not have yet: the
// next claim's batch advances the clocks (sqlAdvanceClock), so that a claim
// statement writes nothing but the runs it takes. A clock is thus behind
// by at most the last claim of each worker, which only gives a key that
// starts meanwhile its first runs that much earlier.
type fairClock struct {
	mu      sync.Mutex
	pending map[string]int64
}

// take returns the pending advances, sorted by queue, and forgets them.
func (c *fairClock) take() (queues []string, vts []int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		return nil, nil, false
	}
	for q := range c.pending {
		queues = append(queues, q)
	}
	slices.Sort(queues)
	for _, q := range queues {
		vts = append(vts, c.pending[q])
	}
	c.pending = nil
	return queues, vts, true
}

// add records that a claim took virtual time vt on queue.
func (c *fairClock) add(queue string, vt int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		c.pending = map[string]int64{}
	}
	c.pending[queue] = max(c.pending[queue], vt)
}

// Lease identifies one held lease: the run and the epoch it was claimed at.
type Lease struct {
	RunID uuid.UUID
	Epoch int64
}

// Renew extends every given lease by ttl from the database clock in one
// statement on db. In the result, true means renewed; false means the run is
// still held under that lease but its row was locked by a write in flight (a
// commit of the run's own worker, say), so it was skipped rather than waited
// for: try again at the next beat. A lease missing from the result was lost:
// another worker claimed the run, or it was cancelled or ended, or the lease
// expired by the database's clock before this renewal ran. An expired lease
// is never extended, even when nobody claimed the run yet: from its expiry
// the run's slots under a downstream's limits count free (_flow_full), so a
// holder that renewed it late would run beside the attempt that took its
// slot. The renewal
// never waits for a lock, and the step-level writes of a worker lock their
// run's row only FOR KEY SHARE, which does not hold it up. The worker runs it
// on a connection of its own, so that a pool busy with activities cannot
// starve the heartbeat.
//
// CancelRequested reports the runs renewed whose Cancel was asked: a worker
// that missed the notice (it polls, or its LISTEN connection was down)
// learns of it here, at no extra statement.
//
// beat, when not nil, is the worker's registry row, written by the same
// statement.
func (s *Store) Renew(ctx context.Context, db DB, leases []Lease, ttl time.Duration, beat *WorkerBeat) (map[Lease]LeaseState, error) {
	ids := make([]uuidParam, len(leases))
	epochs := make([]int64, len(leases))
	for i, l := range leases {
		ids[i], epochs[i] = uuidArg(l.RunID), l.Epoch
	}
	registry, args := "", []any{ids, epochs, ttl.Milliseconds()}
	if beat != nil {
		registry = "wk AS (" + upsertSQL(4) + "),"
		args = append(args, beat.args()...)
	}
	// Planned for its values each time (planRenew: a statement per heartbeat
	// interval, where planning costs nothing that matters), so that no plan
	// cached while the table was young outlives it.
	out := make(map[Lease]LeaseState, len(leases))
	err := s.query(ctx, db, planRenew, func(rows pgx.Rows) error {
		var id [16]byte
		var epoch int64
		var st LeaseState
		_, err := pgx.ForEachRow(rows, []any{&id, &epoch, &st.Renewed, &st.CancelRequested}, func() error {
			out[Lease{RunID: id, Epoch: epoch}] = st
			return nil
		})
		return err
	}, s.sql(`
		WITH `+registry+` h AS (
			SELECT * FROM unnest($1::uuid[], $2::bigint[]) AS h(id, epoch)),
		free AS ( -- each run by its primary key, not a scan of every running run (see fence)
			SELECT held.id FROM h, LATERAL (
				SELECT r.id, r.status, r.lease_expires_at FROM {schema}.runs r WHERE r.id = h.id AND r.epoch = h.epoch
				OFFSET 0 FOR NO KEY UPDATE SKIP LOCKED) AS held
			WHERE held.status = 'running' AND held.lease_expires_at > now()),
		renewed AS (
			UPDATE {schema}.runs r
			SET lease_expires_at = now() + $3 * interval '1 millisecond'
			FROM free
			WHERE r.id >= free.id AND r.id <= free.id
			RETURNING r.id, r.cancel_requested_at IS NOT NULL AS cancel)
		SELECT h.id, h.epoch, renewed.id IS NOT NULL, coalesce(renewed.cancel, false)
		FROM h LEFT JOIN renewed ON renewed.id = h.id
		WHERE renewed.id IS NOT NULL
		   OR EXISTS (SELECT FROM (SELECT r.status, r.lease_expires_at FROM {schema}.runs r WHERE r.id = h.id AND r.epoch = h.epoch OFFSET 0) AS r
		              WHERE r.status = 'running' AND r.lease_expires_at > now())`),
		args...)
	if err != nil {
		return nil, s.wrap("renew leases", err)
	}
	return out, nil
}

// LeaseState is a held lease as Renew found it.
type LeaseState struct {
	// Renewed is true when the lease was extended; false when the run is
	// still held under it but its row was locked by a write in flight.
	Renewed bool
	// CancelRequested is true when the run's Cancel was asked (renewed
	// leases only).
	CancelRequested bool
}

// Failure is what a failing run records in the failure table.
type Failure struct {
	Reason       policy.Reason
	Step         int // 0: no step (the workflow itself failed)
	Activity     string
	Attempts     int
	Errors       int
	Rescues      int
	ErrorMessage string
	ErrorType    string
	ErrorStack   string
}
