package workload

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
)

// recordFor bounds how long Record keeps trying to reach the database (a
// Postgres restart takes a few seconds).
const recordFor = 30 * time.Second

// LedgerTable is the name of the ledger table: one row per invocation,
// with run_id, step, attempt, at and returned_at (invariant.FlowOptions).
const LedgerTable = "ledger"

// Ledger records activity invocations in the ledger table and transactional
// effects in the effects table of a schema (both created by Migrate).
type Ledger struct {
	pool   *pgxpool.Pool
	schema string
}

// NewLedger returns a ledger writing through pool, which must not be the
// worker's own pool (a separate connection is what a remote system is), into
// schema.
func NewLedger(pool *pgxpool.Pool, schema string) *Ledger {
	return &Ledger{pool: pool, schema: schema}
}

// Migrate creates the ledger and effects tables in schema (Tenure's own
// tables are created by store.Migrate). It is idempotent.
//
// ledger has one row per invocation of an activity function, keyed by a
// random invocation ID so that a retried insert cannot count twice; effects
// has one row per committed transactional step, with no unique constraint,
// so that a second commit would show.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	_, err := pool.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS `+s+`.ledger (
			id       uuid        PRIMARY KEY,
			run_id   uuid        NOT NULL,
			step     integer     NOT NULL,
			attempt  integer     NOT NULL,
			activity text        NOT NULL,
			epoch    bigint      NOT NULL,
			worker   text        NOT NULL,
			pid      integer     NOT NULL,
			at       timestamptz NOT NULL DEFAULT clock_timestamp(),
			-- When the call returned, for the activities that record it
			-- (Limited); NULL: not recorded, or it never returned.
			returned_at timestamptz);
		ALTER TABLE `+s+`.ledger ADD COLUMN IF NOT EXISTS returned_at timestamptz;
		CREATE INDEX IF NOT EXISTS ledger_step_idx ON `+s+`.ledger (run_id, step, attempt);
		CREATE TABLE IF NOT EXISTS `+s+`.effects (
			run_id  uuid        NOT NULL,
			step    integer     NOT NULL,
			attempt integer     NOT NULL,
			epoch   bigint      NOT NULL,
			at      timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX IF NOT EXISTS effects_step_idx ON `+s+`.effects (run_id, step);`)
	if err != nil {
		return fmt.Errorf("workload: create ledger tables in %s: %w", schema, err)
	}
	return nil
}

// Record inserts one ledger row for the attempt described by info and
// returns its ID. It is not cancelled with ctx (the invocation happened: it
// must be counted) and it retries for up to 30s while the database is
// unreachable; the random invocation ID makes a retried insert whose first
// try committed harmless.
//
// The row's at is the invocation's instant, the moment Record was called:
// the database's clock, less the time since then on the worker's clock,
// measured once the connection is in hand, just before the statement is
// sent. A worker frozen on its way to the database (waiting for a
// connection, say) is thus not taken to have called when it resumed: it
// called before it froze, and a call frozen in flight is the invariants'
// to cut at the freeze.
func (l *Ledger) Record(ctx context.Context, info activities.Info) (uuid.UUID, error) {
	called := time.Now()
	id := uuid.New()
	stmt := `INSERT INTO ` + pgx.Identifier{l.schema}.Sanitize() + `.ledger
		(id, run_id, step, attempt, activity, epoch, worker, pid, at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, clock_timestamp() - $9 * interval '1 microsecond') ON CONFLICT (id) DO NOTHING`
	err := l.retry(ctx, func(ctx context.Context) error {
		conn, err := l.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		_, err = conn.Exec(ctx, stmt, id, info.RunID, info.Step, info.Attempt, info.Activity, info.Epoch, info.Worker, os.Getpid(),
			time.Since(called).Microseconds())
		return err
	})
	if err != nil {
		return id, fmt.Errorf("workload: record invocation of %s step %d attempt %d: %w", info.RunID, info.Step, info.Attempt, err)
	}
	return id, nil
}

// Returned records that the invocation id returned at the instant at (on
// the worker's clock), retried as Record is. The database's clock stamps
// it, less the time the statement took to get there (a busy pool, a retry),
// measured on the worker's clock just before each try: a return is not
// moved later by its own record's delay. The flow invariants read it: a
// call that returned no longer occupies its downstream.
func (l *Ledger) Returned(ctx context.Context, id uuid.UUID, at time.Time) error {
	stmt := `UPDATE ` + pgx.Identifier{l.schema}.Sanitize() + `.ledger
		SET returned_at = clock_timestamp() - $2 * interval '1 microsecond'
		WHERE id = $1 AND returned_at IS NULL`
	err := l.retry(ctx, func(ctx context.Context) error {
		_, err := l.pool.Exec(ctx, stmt, id, time.Since(at).Microseconds())
		return err
	})
	if err != nil {
		return fmt.Errorf("workload: record the return of invocation %s: %w", id, err)
	}
	return nil
}

// retry calls try until it succeeds, for up to recordFor whatever ctx says.
func (l *Ledger) retry(ctx context.Context, try func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordFor)
	defer cancel()
	for {
		err := try(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// effect inserts the transactional step's effect row in tx.
func (l *Ledger) effect(ctx context.Context, tx pgx.Tx, info activities.Info) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{l.schema}.Sanitize()+`.effects (run_id, step, attempt, epoch)
		VALUES ($1, $2, $3, $4)`, info.RunID, info.Step, info.Attempt, info.Epoch)
	if err != nil {
		return fmt.Errorf("workload: effect of %s step %d: %w", info.RunID, info.Step, err)
	}
	return nil
}
