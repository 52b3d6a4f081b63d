package store

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ErrNotRunning is returned by ExpireLease for a run that holds no lease:
// queued or finished.
var ErrNotRunning = errors.New("run is not running")

// ExpireLease ends the lease of a running run now, as a crash of its holder
// would once the lease ran out, without waiting for the lease to run out: the
// epoch is incremented, which fences the holder out (its next write or
// heartbeat finds the lease lost, and it stops), and the expiry is moved into
// the past, so the next claim reclaims the run, finds the attempts the holder
// left running and records them lost. Idle workers are woken. It is for
// tests of crash recovery (tenuretest.Env.Crash) and for an operator who
// knows that a worker is dead and does not want its runs to wait for the
// lease to expire.
func (s *Store) ExpireLease(ctx context.Context, id uuid.UUID) error {
	// As in CancelRun: the lock waits for a commit of the holder in flight
	// (its fence takes FOR KEY SHARE, which an UPDATE of other columns does
	// not wait for), so that commit is wholly before the new epoch and
	// nothing the holder writes after it is accepted.
	b := &pgx.Batch{}
	b.Queue(s.sql(`SELECT 1 FROM {schema}.runs WHERE id = $1 FOR UPDATE`), id)
	var err error
	b.Queue(s.sql(`
		UPDATE {schema}.runs
		SET epoch = {schema}.next_epoch(epoch), lease_expires_at = now() - interval '1 millisecond', updated_at = now()
		WHERE id = $1 AND status = 'running'
		RETURNING pg_notify($2, queue)::text`), id, s.RunsChannel()).QueryRow(func(row pgx.Row) error {
		err = row.Scan(new(string))
		return nil
	})
	if berr := s.send(ctx, s.pool, planHot, b).Close(); berr != nil && !errors.Is(berr, pgx.ErrNoRows) {
		return s.wrap("expire lease", berr)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return s.explainMiss(ctx, id, ErrNotRunning)
	}
	return s.wrap("expire lease", err)
}
