package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// StepMark records a step of a kind other than activity, or moves it on:
// created waiting or finished, then finished. Repeated, it changes nothing
// once the step is finished, and keeps the due time and output first
// recorded.
type StepMark struct {
	Step   int
	Kind   StepKind
	Name   string     // the activity column: the signal's name, the child's workflow, or the kind
	Status StepStatus // waiting, completed or failed
	// Output is the step's JSON output, if it has one. For KindNow with a nil
	// Output the database records its clock.
	Output []byte
	// Due is, for a sleep, its due time as a delay from the database clock
	// at the first record, or from Began when set (DueAt, when set,
	// instead).
	Due   time.Duration
	DueAt time.Time
	// Began and Woke are when the step began and ended on the worker's
	// monotonic clock, for a mark written after the fact (a short sleep's):
	// the record's times are the database clock less the time since. Zero:
	// the record's own time.
	Began, Woke time.Time
	// For a failed step: why, and the error.
	Reason       string
	ErrorMessage string
	ErrorType    string
}

// SignalReceive consumes the oldest signal of Name sent to the run and not
// yet consumed, recording step Step completed with its payload. When there
// is none, the step is recorded waiting, timing out Timeout after its first
// record (0: never), or failed when that time has passed. Repeated, it
// returns what the step already recorded.
type SignalReceive struct {
	Step    int
	Name    string
	Timeout time.Duration
}

// EventSet sets the run's event Key to Value, as step Step.
type EventSet struct {
	Step  int
	Key   string
	Value []byte // JSON
}

// ChildStart starts a child run, as step Step of its parent: the child's ID
// is derived from the parent and the step, so a repeat starts nothing.
type ChildStart struct {
	Step        int
	ID          uuid.UUID
	Workflow    string
	Queue       string
	Priority    int
	Input       []byte // JSON
	Traceparent string
	InputHash   uint64 // InputHash(Input), checked when the step is replayed
}

// RunCancel ends a run whose cancellation was requested, as cancelled; its
// unfinished children are cancelled in turn.
type RunCancel struct{ Message string }

// Marked is what a StepMark or a SignalReceive found recorded.
type Marked struct {
	Status StepStatus
	Output []byte
	// DueIn is the time left until the step's due time, by the database
	// clock (negative: past); NoDue when the step has none.
	DueIn time.Duration
}

// NoDue is Marked.DueIn of a step without a due time.
const NoDue = time.Duration(-1 << 63)

// ChildID is the ID of the child a run starts as step step: derived from the
// two (UUID version 5), so a replay that starts the child again finds it.
func ChildID(parent uuid.UUID, step int) uuid.UUID {
	return uuid.NewSHA1(parent, []byte("tenure-child-step-"+strconv.Itoa(step)))
}

// Step marks, created or moved on. The existing row is read from the
// statement's snapshot (old) so that a repeat returns what was recorded.
const sqlMark = `
	WITH x AS (
		SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[],
		                     $8::bigint[], $9::timestamptz[], $10::text[], $11::text[], $12::text[],
		                     $13::bigint[], $14::bigint[])
			AS x(run_id, epoch, step, kind, name, status, output, due_ms, due_at, reason, error_message, error_type,
			     began_ms, woke_ms)),` + fence + `,
	s AS (
		INSERT INTO {schema}.steps AS s (run_id, step, activity, kind, status, output, policy, due_at,
		                                 reason, error_message, error_type, first_started_at, finished_at)
		SELECT run_id, step, name, kind, status,
		       CASE WHEN kind = 'now' AND output IS NULL THEN to_jsonb(now()) ELSE output::jsonb END,
		       '{}', coalesce(due_at, now() + due_ms * interval '1 millisecond'),
		       nullif(reason, ''), nullif(error_message, ''), nullif(error_type, ''),
		       now() - began_ms * interval '1 millisecond',
		       CASE WHEN status IN ('completed', 'failed') THEN now() - woke_ms * interval '1 millisecond' END
		FROM f
		ON CONFLICT (run_id, step) DO UPDATE
		SET status = EXCLUDED.status, output = coalesce(s.output, EXCLUDED.output),
		    due_at = coalesce(s.due_at, EXCLUDED.due_at), reason = EXCLUDED.reason,
		    error_message = EXCLUDED.error_message, error_type = EXCLUDED.error_type,
		    finished_at = EXCLUDED.finished_at
		WHERE s.status NOT IN ('completed', 'failed')
		RETURNING s.run_id, s.step, s.status, s.output, s.due_at),
	pt AS ( -- a patch's first record names it in patches (patch_status), in order: no two batches wait on each other's
		INSERT INTO {schema}.patches (workflow, patch)
		SELECT DISTINCT r.workflow, f.name FROM f, LATERAL (
			SELECT r.workflow FROM {schema}.runs r WHERE r.id = f.run_id OFFSET 0) AS r
		WHERE f.kind = 'patch'
		ORDER BY 1, 2
		ON CONFLICT DO NOTHING)
	SELECT f.run_id, f.epoch,
	       coalesce(extract(epoch FROM coalesce(s.due_at, o.due_at) - now()) * 1000, 'NaN')::float8,
	       coalesce(s.output, o.output)::text, coalesce(s.status, o.status), f.step
	FROM f LEFT JOIN s ON s.run_id = f.run_id AND s.step = f.step
	LEFT JOIN LATERAL (
		SELECT o.status, o.output, o.due_at FROM {schema}.steps o
		WHERE o.run_id = f.run_id AND o.step = f.step OFFSET 0) AS o ON true -- a lookup per row (see fence)`

// Sleeps' wakes, recorded after the fact (Write.Marks): a short sleep's row
// is inserted completed, its times the commit's clock less the time since on
// the worker's clock; a recorded (waiting) sleep's row is completed. A repeat
// changes nothing.
const sqlSlept = `
	WITH x AS (
		SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[])
			AS x(run_id, epoch, step, due_ms, began_ms, woke_ms)),` + fence + `,
	s AS (
		INSERT INTO {schema}.steps AS s (run_id, step, activity, kind, status, policy, due_at, first_started_at, finished_at)
		SELECT run_id, step, 'sleep', 'sleep', 'completed', '{}', now() + due_ms * interval '1 millisecond',
		       now() - began_ms * interval '1 millisecond', now() - woke_ms * interval '1 millisecond'
		FROM f
		ON CONFLICT (run_id, step) DO UPDATE
		SET status = 'completed', finished_at = EXCLUDED.finished_at
		WHERE s.status = 'waiting')
	SELECT run_id, epoch, 0::float8 FROM f`

// Signals received: the oldest pending one of each name, consumed by the
// step, or the step recorded waiting (or failed, once its timeout passed).
const sqlReceive = `
	WITH x AS (
		SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::int[], $4::text[], $5::bigint[])
			AS x(run_id, epoch, step, name, timeout_ms)),
	f AS (
		SELECT x.*, o.status, o.output, o.due_at FROM x
		CROSS JOIN LATERAL (
			SELECT r.status FROM {schema}.runs r WHERE r.id = x.run_id AND r.epoch = x.epoch
			OFFSET 0 FOR KEY SHARE) AS held
		LEFT JOIN LATERAL (
			SELECT o.status, o.output, o.due_at FROM {schema}.steps o
			WHERE o.run_id = x.run_id AND o.step = x.step OFFSET 0) AS o ON true -- a lookup per row (see fence)
		WHERE held.status = 'running'),
	open AS (
		SELECT * FROM f WHERE status IS NULL OR status = 'waiting'),
	g AS (
		SELECT open.run_id, sg.id, sg.payload FROM open, LATERAL (
			SELECT s.id, s.payload FROM {schema}.signals s
			WHERE s.run_id = open.run_id AND s.name = open.name AND s.consumed_at IS NULL
			ORDER BY s.id LIMIT 1
			FOR UPDATE) AS sg),
	c AS (
		UPDATE {schema}.signals s SET consumed_step = open.step, consumed_at = now()
		FROM g JOIN open USING (run_id) WHERE s.id = g.id),
	st AS (
		INSERT INTO {schema}.steps AS s (run_id, step, activity, kind, status, output, policy, due_at,
		                                 reason, error_message, error_type, finished_at)
		SELECT open.run_id, open.step, open.name, 'signal', v.status, g.payload, '{}', v.due_at,
		       CASE WHEN v.status = 'failed' THEN 'timeout' END,
		       CASE WHEN v.status = 'failed' THEN 'no signal ' || quote_literal(open.name) || ' within the timeout' END,
		       CASE WHEN v.status = 'failed' THEN 'tenure.ReceiveTimeout' END,
		       CASE WHEN v.status <> 'waiting' THEN now() END
		FROM open LEFT JOIN g USING (run_id),
		LATERAL (SELECT coalesce(open.due_at, now() + open.timeout_ms * interval '1 millisecond') AS due_at) AS d,
		LATERAL (SELECT d.due_at,
		                CASE WHEN g.id IS NOT NULL THEN 'completed'
		                     WHEN d.due_at <= now() THEN 'failed'
		                     ELSE 'waiting' END AS status) AS v
		ON CONFLICT (run_id, step) DO UPDATE
		SET status = EXCLUDED.status, output = EXCLUDED.output, reason = EXCLUDED.reason,
		    error_message = EXCLUDED.error_message, error_type = EXCLUDED.error_type, finished_at = EXCLUDED.finished_at
		WHERE s.status = 'waiting' -- never a step a concurrent try of this write finished
		RETURNING s.run_id, s.status, s.output, s.due_at)
	SELECT f.run_id, f.epoch,
	       coalesce(extract(epoch FROM coalesce(st.due_at, f.due_at) - now()) * 1000, 'NaN')::float8,
	       coalesce(st.output, f.output)::text, coalesce(st.status, f.status), f.step
	FROM f LEFT JOIN st USING (run_id)`

// Events set: the step, and the latest value per key.
const sqlSetEvent = `
	WITH x AS (
		SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::int[], $4::text[], $5::jsonb[])
			AS x(run_id, epoch, step, key, value)),` + fence + `,
	st AS (
		INSERT INTO {schema}.steps (run_id, step, activity, kind, status, output, policy, finished_at)
		SELECT run_id, step, key, 'event', 'completed', value, '{}', now() FROM f
		ON CONFLICT (run_id, step) DO NOTHING
		RETURNING run_id),
	ev AS (
		INSERT INTO {schema}.events AS e (run_id, key, value, step)
		SELECT f.run_id, f.key, f.value, f.step FROM f JOIN st USING (run_id)
		ON CONFLICT (run_id, key) DO UPDATE SET value = EXCLUDED.value, step = EXCLUDED.step, set_at = now())
	SELECT run_id, epoch, 0::float8 FROM f`

// Children started: the child's run, linked to its parent's step, and the
// step, waiting for the child's end.
const sqlStartChild = `
	WITH x AS (
		SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::int[], $4::uuid[], $5::text[], $6::text[], $7::int[],
		                     $8::jsonb[], $9::text[], $10::bigint[])
			AS x(run_id, epoch, step, child_id, workflow, queue, priority, input, traceparent, input_hash)),` + fence + `,
	c AS (
		INSERT INTO {schema}.runs (id, workflow, queue, priority, run_key, input, parent_run_id, parent_step, traceparent)
		SELECT child_id, workflow, queue, priority, 'tenure-child:' || run_id::text || '/' || step::text, input,
		       run_id, step, nullif(traceparent, '')
		FROM f
		ON CONFLICT DO NOTHING),
	st AS (
		INSERT INTO {schema}.steps (run_id, step, activity, kind, status, policy, child_run_id, input_hash)
		SELECT run_id, step, workflow, 'child', 'waiting', '{}', child_id, input_hash FROM f
		ON CONFLICT (run_id, step) DO NOTHING)
	SELECT run_id, epoch, 0::float8 FROM f`

// Runs ended cancelled, at their workflow's return after Cancel.
var sqlCancelRun = `
	WITH x AS (
		SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::text[]) AS x(run_id, epoch, message)),` + endFenceFor(RunCancelled) + `,` + strayAttempts("") + `,
	u AS (
		UPDATE {schema}.runs r
		SET status = 'cancelled', error_message = f.message, finished_at = now(), updated_at = now(),
		    claimant = NULL, lease_expires_at = NULL, waiting_for = NULL
		FROM f WHERE r.id >= f.run_id AND r.id <= f.run_id AND f.was = 'running'
		RETURNING r.id, r.epoch, extract(epoch FROM now() - r.created_at)::float8 * 1000 AS ms)
	SELECT id, epoch, ms FROM u
	UNION ALL SELECT run_id, epoch, 0 FROM f WHERE was <> 'running'`

// The children of runs this batch cancelled are cancelled in turn.
// Only the runs this transaction did cancel count (a refused fence cancelled
// nothing).
const sqlCancelChildren = `
	SELECT count({schema}.cancel_run(c.id))
	FROM unnest($1::uuid[], $2::bigint[]) AS x(id, epoch),
	LATERAL (SELECT p.status, p.finished_at FROM {schema}.runs p
	         WHERE p.id = x.id AND p.epoch = x.epoch OFFSET 0) AS p, -- a lookup per run (see fence)
	LATERAL (SELECT c.id FROM {schema}.runs c
	         WHERE c.parent_run_id = x.id AND c.status IN ('queued', 'running') OFFSET 0) AS c
	WHERE p.status = 'cancelled' AND p.finished_at = now()`

// The parents of runs this batch ended are woken when they wait for them
// (only runs this transaction did end).
const sqlWakeParents = `
	SELECT count(*)
	FROM unnest($1::uuid[], $2::bigint[]) AS x(id, epoch)
	JOIN {schema}.runs r ON r.id = x.id AND r.epoch = x.epoch
	     AND r.status IN ('completed', 'failed', 'cancelled') AND r.finished_at = now(),
	LATERAL {schema}._wake_parent(r.id) AS woken`

// A run suspended to wait for a signal or a child is made due when what it
// waits for may already have happened:
//   - a signal: one pending that committed before this statement (its
//     snapshot is taken after the suspension locked the run's row). A send
//     that commits later has left a wake, which a worker applies once this
//     suspension has committed (apply_wakes skips a row that is locked, and
//     tries again), so no wake-up is lost and no send is waited for;
//   - a child: its end, read FOR SHARE SKIP LOCKED; a child that ends later
//     finds the parent waiting (_wake_parent). A child whose row is locked
//     (its end in flight, or a Cancel or requeue of it in a caller's open
//     transaction) is not waited for: a wake of kind child is left, which a
//     worker applies once the child's row is free (apply_wakes), and
//     workers are told of it ('wake');
//   - a cancel requested meanwhile (a wake's, applied to the row when it is
//     not locked: before or after the suspension, not during).
const sqlWakeWaiting = `
	WITH w AS (
		-- Each run by its key (a lookup per run, see fence).
		SELECT r.id, r.queue, r.waiting_for, r.cancel_requested_at,
		       -- a lookup of the run's pending signals of that name, not a
		       -- hashed scan of every pending signal
		       (SELECT true FROM {schema}.signals s
		        WHERE s.run_id = r.id AND s.name = substr(r.waiting_for, 8) AND s.consumed_at IS NULL
		        LIMIT 1) AS pending
		FROM unnest($1::uuid[]) AS x(id),
		LATERAL (SELECT r.id, r.queue, r.waiting_for, r.cancel_requested_at, r.status, r.run_after
		         FROM {schema}.runs r WHERE r.id = x.id OFFSET 0) AS r
		WHERE r.status = 'queued' AND r.run_after > now()),
	kids AS (
		-- The child's row, locked without waiting: NULL when it is busy.
		SELECT w.id AS parent, l.status FROM w
		JOIN LATERAL (SELECT c.id FROM {schema}.runs c WHERE c.id = substr(w.waiting_for, 7)::uuid OFFSET 0) AS c ON true
		LEFT JOIN LATERAL (SELECT l.status FROM {schema}.runs l WHERE l.id = c.id OFFSET 0 FOR SHARE SKIP LOCKED) AS l ON true
		WHERE w.waiting_for LIKE 'child:%'),
	due AS (
		SELECT w.id, w.queue FROM w LEFT JOIN kids k ON k.parent = w.id
		WHERE w.cancel_requested_at IS NOT NULL
		   OR (w.waiting_for LIKE 'signal:%' AND w.pending)
		   OR k.status IN ('completed', 'failed', 'cancelled')),
	busy AS (
		INSERT INTO {schema}.wakes (run_id, kind)
		SELECT k.parent, 'child' FROM kids k
		WHERE k.status IS NULL AND NOT EXISTS (SELECT FROM due WHERE due.id = k.parent)
		RETURNING 1),
	woken AS (
		UPDATE {schema}.runs r SET run_after = now() FROM due WHERE r.id >= due.id AND r.id <= due.id
		RETURNING r.queue)
	SELECT (SELECT count(pg_notify($2, queue)) FROM woken) + (SELECT count(pg_notify($2, 'wake')) FROM busy)`

// SendSignal sends a signal to a run on db (the pool, or the caller's
// transaction): the SQL function send_signal. It returns the signal's ID. A
// run that ended is ErrFinished, an unknown one ErrNotFound.
func (s *Store) SendSignal(ctx context.Context, db DB, run uuid.UUID, name string, payload []byte) (int64, error) {
	var id int64
	err := s.query(ctx, db, planHot, scanOne(&id), s.sql(`SELECT {schema}.send_signal($1, $2, $3::text::jsonb)`),
		uuidArg(run), name, jsonArg(payload))
	switch sqlState(err) {
	case "TN001":
		return 0, fmt.Errorf("send signal %q to run %s: %w", name, run, ErrNotFound)
	case "TN002":
		var pe *pgconn.PgError
		errors.As(err, &pe)
		return 0, fmt.Errorf("send signal %q: %s: %w", name, strings.TrimPrefix(pe.Message, "send_signal: "), ErrFinished)
	}
	return id, s.wrap("send signal", err)
}

// Event is a run's event as GetEvent reads it.
type Event struct {
	Found     bool
	Value     []byte
	RunStatus RunStatus // the run's status; empty when the run does not exist
}

// GetEvent reads the run's event key, with the run's status (for a waiter
// to stop when the run ended without setting it).
func (s *Store) GetEvent(ctx context.Context, run uuid.UUID, key string) (Event, error) {
	var e Event
	var value *string
	var status *string
	err := s.query(ctx, s.pool, planHot, scanOne(&status, &value), s.sql(`
		SELECT r.status, (SELECT e.value::text FROM {schema}.events e WHERE e.run_id = r.id AND e.key = $2)
		FROM {schema}.runs r WHERE r.id = $1`), uuidArg(run), key)
	if errors.Is(err, pgx.ErrNoRows) {
		return e, fmt.Errorf("run %s: %w", run, ErrNotFound)
	}
	if err != nil {
		return e, s.wrap("get event", err)
	}
	e.RunStatus = RunStatus(*status)
	if value != nil {
		e.Found, e.Value = true, []byte(*value)
	}
	return e, nil
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
