package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Woken is what applying the wakes did (see ApplyWakes).
type Woken struct {
	// Applied is how many wakes were applied; when it is WakesApplied,
	// more may be waiting.
	Applied int
	// Left is how many wakes were left for a later try: their runs' rows
	// were busy (a worker's commit in flight).
	Left int
	// Cancelled lists the runs of those held whose Cancel was asked,
	// whether a worker applied it already or it is still a wake.
	Cancelled []uuid.UUID
}

// WakesApplied is how many wakes one statement applies at most.
const WakesApplied = 500

// wakeRequest is the wakes part of a claim's batch: the runs held, whose
// cancels to report.
type wakeRequest struct{ held []uuidParam }

func (r *wakeRequest) queue(s *Store, b *pgx.Batch, woken *Woken) {
	b.Queue(s.sql(`SELECT applied, busy FROM {schema}.apply_wakes($1)`), WakesApplied).QueryRow(func(row pgx.Row) error {
		return row.Scan(&woken.Applied, &woken.Left)
	})
	if len(r.held) == 0 {
		return
	}
	b.Queue(s.sql(`
		SELECT r.id FROM {schema}.runs r WHERE r.id = ANY ($1::uuid[]) AND r.cancel_requested_at IS NOT NULL
		UNION
		SELECT w.run_id FROM {schema}.wakes w WHERE w.run_id = ANY ($1::uuid[]) AND w.kind = 'cancel'`), r.held).Query(func(rows pgx.Rows) error {
		var err error
		woken.Cancelled, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		return err
	})
}

// ApplyWakes applies what callers' transactions asked of runs' rows and
// left as wakes, once they committed (SQL function apply_wakes): a run
// waiting for a signal that was sent is made due, a run whose Cancel was
// asked is marked for it (and made due when it waits; ended, when it had not
// started). A wake whose run's row is busy is left for a later call. held
// are the runs the worker holds: their cancels are reported, so that a
// worker that was not listening when they were sent learns of them.
//
// ClaimWaking does the same in a claim's round trip.
func (s *Store) ApplyWakes(ctx context.Context, held []uuid.UUID) (Woken, error) {
	_, w, err := s.claim(ctx, newWakeRequest(held), nil, nil, 0, "", 0)
	return w, err
}

// ClaimWaking is ApplyWakes then Claim, in one transaction and one round
// trip: a run that a wake makes due may be claimed by the same call.
func (s *Store) ClaimWaking(ctx context.Context, held []uuid.UUID, workflows, queues []string, limit int, claimant string,
	ttl time.Duration) ([]Claimed, Woken, error) {
	return s.claim(ctx, newWakeRequest(held), workflows, queues, limit, claimant, ttl)
}

func newWakeRequest(held []uuid.UUID) *wakeRequest {
	r := &wakeRequest{held: make([]uuidParam, len(held))}
	for i, id := range held {
		r.held[i] = uuidArg(id)
	}
	return r
}
