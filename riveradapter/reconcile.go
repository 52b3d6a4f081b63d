package riveradapter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// rescuedError is what River's rescuer writes into a job's errors.
const rescuedError = "Stuck job rescued by JobRescuer"

// Reconciled counts what one reconciler pass did.
type Reconciled struct {
	// Lost counts attempts closed as lost: River rescued their job (or
	// their end was never written) and the job waits for its next attempt.
	Lost int
	// Completed counts runs completed because River completed their job
	// without the middleware's end (a JobCompleteTx in another process, an
	// end that could not be written).
	Completed int
	// Failed counts runs failed, with a failure row, because River ended
	// their job itself: discarded at its MaxAttempts (by a failed attempt or
	// by the rescuer; rescues_exhausted when its last attempt was lost,
	// else retries_exhausted) or cancelled by Client.JobCancel (cancelled).
	Failed int
	// Gone counts runs cancelled because their River job was deleted.
	Gone int
	// Adopted counts jobs River discarded or cancelled that had no run (a
	// first attempt lost to a crash, then discarded by the rescuer, or
	// cancelled meanwhile): recorded as failed runs, their attempts taken
	// from River's errors.
	Adopted int
	// Requeued counts runs requeued in Tenure (SQL requeue_failures, the
	// CLI, the UI) whose job was put back in River, as River's JobRetry
	// does, with MaxAttempts raised so that the kind's policy decides again
	// from the requeue.
	Requeued int
}

// Reconcile makes one reconciler pass over the shadow runs of River jobs:
// it ends the runs whose jobs River ended without the middleware (see
// Reconciled), records the jobs River ended before they had a run, and
// puts back in River the jobs whose runs were requeued in Tenure. It needs
// Record and Configure (River's schema). Passes may run in several
// processes at once: each run is changed under its row lock.
func (r *Retry) Reconcile(ctx context.Context) (Reconciled, error) {
	var out Reconciled
	rec := r.rec
	if rec == nil {
		return out, errors.New("riveradapter: Reconcile needs Record")
	}
	if rec.logger == nil {
		return out, errors.New("riveradapter: Reconcile needs Configure (River's schema)")
	}
	// Each part has its own time: a backlog in one does not starve the
	// others of the pass.
	for _, part := range []func(context.Context, *Reconciled) error{rec.endStale, rec.adoptOrphans, rec.putBack} {
		pctx, cancel := context.WithTimeout(ctx, statementTimeout)
		err := part(pctx, &out)
		cancel()
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// stale is a running shadow run whose job River ended, or whose open
// attempt River rescued, as read under the run's lock (staleAgain).
type stale struct {
	run     uuid.UUID
	job     *int64
	state   string
	lastErr string
	attempt *int // the open attempt
}

// endStale ends the running shadow runs whose jobs River ended without the
// middleware, and closes the attempts River rescued. The first read only
// finds them; each is read again under its lock, where what to do with it
// is decided.
func (rec *recorder) endStale(ctx context.Context, out *Reconciled) error {
	var todo []uuid.UUID
	var run uuid.UUID
	if err := rec.query(ctx, rec.pool, false, `
		SELECT r.id
		FROM `+rec.schema+`.runs r
		LEFT JOIN `+rec.river+`river_job j ON j.id = substr(r.run_key, 7)::bigint
		WHERE r.queue = 'river' AND r.status = 'running' AND r.run_key LIKE 'river:%'
		  AND (j.id IS NULL OR j.state IN ('completed', 'discarded', 'cancelled')
		       OR j.state <> 'running' AND EXISTS (SELECT FROM `+rec.schema+`.attempts a
		                                         WHERE a.run_id = r.id AND a.step = 1 AND a.status = 'running'))`, nil,
		[]any{&run}, func() error {
			todo = append(todo, run)
			return nil
		}); err != nil {
		return fmt.Errorf("riveradapter: reconcile: read the shadow runs: %w", err)
	}
	for _, run := range todo {
		if err := pgx.BeginFunc(ctx, rec.pool, func(tx pgx.Tx) error {
			// Under the run's lock (river_begin takes it too), and read
			// again: the job may have been worked again since the read.
			if st, err := rec.lockRun(ctx, tx, run); err != nil || st != "running" {
				return err
			}
			s, err := rec.staleAgain(ctx, tx, run)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil // running again, or nothing to do any more
			}
			if err != nil {
				return err
			}
			return rec.endOne(ctx, tx, s, out)
		}); err != nil {
			return fmt.Errorf("riveradapter: reconcile run %s: %w", run, err)
		}
	}
	return nil
}

// lockRun locks run in tx, which it begins with Tenure's CALL planner (in
// the same round trip; see query), and returns its status.
func (rec *recorder) lockRun(ctx context.Context, tx pgx.Tx, run uuid.UUID) (string, error) {
	var st string
	err := rec.query(ctx, tx, false, `SELECT status FROM `+rec.schema+`.runs WHERE id = $1 FOR UPDATE`, []any{run},
		[]any{&st}, func() error { return nil })
	return st, err
}

// staleAgain reads run's job and open attempt again, in tx under the run's
// lock; pgx.ErrNoRows when there is nothing to do any more (the job is
// running again, or ended with nothing open).
func (rec *recorder) staleAgain(ctx context.Context, tx pgx.Tx, run uuid.UUID) (stale, error) {
	s := stale{run: run}
	err := tx.QueryRow(ctx, `
		SELECT j.id, coalesce(j.state::text, ''), coalesce(j.errors[cardinality(j.errors)]->>'error', ''), a.attempt
		FROM `+rec.schema+`.runs r
		LEFT JOIN `+rec.river+`river_job j ON j.id = substr(r.run_key, 7)::bigint
		LEFT JOIN LATERAL (SELECT max(x.attempt) AS attempt FROM `+rec.schema+`.attempts x
		                   WHERE x.run_id = r.id AND x.step = 1 AND x.status = 'running') a ON true
		WHERE r.id = $1
		  AND (j.id IS NULL OR j.state IN ('completed', 'discarded', 'cancelled') OR j.state <> 'running' AND a.attempt IS NOT NULL)`,
		run).Scan(&s.job, &s.state, &s.lastErr, &s.attempt)
	return s, err
}

// endOne ends one stale run in tx, which holds its lock.
func (rec *recorder) endOne(ctx context.Context, tx pgx.Tx, s stale, out *Reconciled) error {
	closeOpen := func(status, msg string) error {
		if s.attempt == nil {
			return nil
		}
		_, err := tx.Exec(ctx, `UPDATE `+rec.schema+`.attempts SET status = $2, ended_at = now(),
			error_message = coalesce(error_message, $3) WHERE run_id = $1 AND step = 1 AND attempt = $4 AND status = 'running'`,
			s.run, status, msg, *s.attempt)
		return err
	}
	fail := func(reason, msg string) error {
		_, err := tx.Exec(ctx, `SELECT `+rec.schema+`._river_fail($1, $2, $3, NULL, NULL)`, s.run, reason, msg)
		return err
	}
	switch {
	case s.job == nil:
		if err := closeOpen("cancelled", "the River job was deleted"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE `+rec.schema+`.runs SET status = 'cancelled', finished_at = now(),
			lease_expires_at = NULL, error_message = 'the River job was deleted', updated_at = now() WHERE id = $1`, s.run)
		out.Gone++
		return err
	case s.state == "completed":
		if err := closeOpen("succeeded", ""); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE `+rec.schema+`.steps SET status = 'completed', finished_at = now() WHERE run_id = $1 AND step = 1`, s.run); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE `+rec.schema+`.runs SET status = 'completed', finished_at = now(),
			lease_expires_at = NULL, updated_at = now() WHERE id = $1`, s.run)
		out.Completed++
		return err
	case s.state == "discarded":
		// By the rescuer (its error last): the open attempt was lost; by
		// an error whose end could not be written: it failed.
		reason, status := "retries_exhausted", "failed"
		if s.lastErr == rescuedError {
			reason, status = "rescues_exhausted", "lost"
		}
		if err := closeOpen(status, s.lastErr); err != nil {
			return err
		}
		out.Failed++
		return fail(reason, "discarded by River: "+s.lastErr)
	case s.state == "cancelled":
		if err := closeOpen("cancelled", "cancelled in River"); err != nil {
			return err
		}
		out.Failed++
		msg := "cancelled in River (Client.JobCancel)"
		if s.lastErr != "" {
			msg += ": " + s.lastErr
		}
		return fail("cancelled", msg)
	default: // waits for its next attempt: the open one was lost
		out.Lost++
		return closeOpen("lost", "lost: "+s.lastErr)
	}
}

// orphan is a job River discarded or cancelled that has no run.
type orphan struct {
	job       int64
	kind      string
	args      []byte
	history   []byte
	finalized time.Time
	state     string
	lastErr   string
}

// orphanPage is how many ended jobs a reconciler pass reads at a time.
const orphanPage = 500

// adoptOrphans records the jobs River ended with no run in Tenure,
// finalized since the last pass (the first pass of a process: within
// River's retention of discarded jobs, 7 days by default).
func (rec *recorder) adoptOrphans(ctx context.Context, out *Reconciled) error {
	var now time.Time
	if err := rec.query(ctx, rec.pool, false, `SELECT now()`, nil, []any{&now}, func() error { return nil }); err != nil {
		return fmt.Errorf("riveradapter: reconcile: %w", err)
	}
	rec.mu.Lock()
	since := rec.adoptedTo
	rec.mu.Unlock()
	if since.IsZero() {
		since = now.Add(-7 * 24 * time.Hour)
	}
	// In pages, in the order River finalized them: with a LIMIT the
	// planner looks each job's run up by its key, where a first pass over
	// 7 days of discards would otherwise hash every run (37 ms on 100,000
	// runs; see plan_test.go).
	after, afterID := since.Add(-time.Minute), int64(0)
	for {
		var orphans []orphan
		var o orphan
		if err := rec.query(ctx, rec.pool, false, `
			SELECT j.id, j.kind, j.args, to_jsonb(coalesce(j.errors, '{}')), j.state::text,
			       coalesce(j.errors[cardinality(j.errors)]->>'error', ''), j.finalized_at
			FROM `+rec.river+`river_job j
			WHERE j.state IN ('discarded', 'cancelled') AND j.finalized_at >= $1 AND (j.finalized_at, j.id) > ($1, $2)
			  AND j.attempt > 0
			  AND NOT EXISTS (SELECT FROM `+rec.schema+`.runs r WHERE r.run_key = 'river:' || j.id)
			ORDER BY j.finalized_at, j.id
			LIMIT $3`, []any{after, afterID, orphanPage},
			[]any{&o.job, &o.kind, &o.args, &o.history, &o.state, &o.lastErr, &o.finalized}, func() error {
				orphans = append(orphans, o)
				return nil
			}); err != nil {
			return fmt.Errorf("riveradapter: reconcile: read the jobs River ended: %w", err)
		}
		for _, o := range orphans {
			id, err := uuid.NewV7()
			if err != nil {
				return err
			}
			why, msg := "retries_exhausted", "discarded by River: "+o.lastErr
			switch {
			case o.state == "cancelled":
				why, msg = "cancelled", "cancelled in River (Client.JobCancel)"
			case o.lastErr == rescuedError:
				why = "rescues_exhausted"
			}
			var adopted bool
			if err := rec.query(ctx, rec.pool, false, `SELECT `+rec.schema+`.river_adopt($1, $2, $3, $4, $5, $6, $7)`,
				[]any{o.job, id, o.kind, string(o.args), string(o.history), why, msg}, []any{&adopted}, func() error { return nil }); err != nil {
				return fmt.Errorf("riveradapter: reconcile: record River job %d: %w", o.job, err)
			}
			if adopted {
				out.Adopted++
			}
		}
		if len(orphans) < orphanPage {
			break
		}
		last := orphans[len(orphans)-1]
		after, afterID = last.finalized, last.job
	}
	rec.mu.Lock()
	rec.adoptedTo = now
	rec.mu.Unlock()
	return nil
}

// putBack puts back in River the jobs whose runs were requeued in Tenure,
// as River's JobRetry does, with max_attempts raised by the policy's
// MaxAttempts, and marks their runs running.
func (rec *recorder) putBack(ctx context.Context, out *Reconciled) error {
	type requeued struct {
		run  uuid.UUID
		job  int64
		most int
	}
	var back []requeued
	var q requeued
	if err := rec.query(ctx, rec.pool, false, `
		SELECT r.id, substr(r.run_key, 7)::bigint, coalesce((s.policy->>'max_attempts')::integer, 25)
		FROM `+rec.schema+`.runs r JOIN `+rec.schema+`.steps s ON s.run_id = r.id AND s.step = 1
		WHERE r.queue = 'river' AND r.status = 'queued' AND r.fair_vt IS NULL AND r.run_key LIKE 'river:%'`, nil,
		[]any{&q.run, &q.job, &q.most}, func() error {
			back = append(back, q)
			return nil
		}); err != nil {
		return fmt.Errorf("riveradapter: reconcile: read the requeued runs: %w", err)
	}
	for _, q := range back {
		if err := pgx.BeginFunc(ctx, rec.pool, func(tx pgx.Tx) error {
			if st, err := rec.lockRun(ctx, tx, q.run); err != nil || st != "queued" {
				return err
			}
			var state string
			var moved bool
			err := tx.QueryRow(ctx, `
				WITH j AS (SELECT id, state FROM `+rec.river+`river_job WHERE id = $1 FOR UPDATE),
				u AS (
					UPDATE `+rec.river+`river_job k
					SET state = 'available', max_attempts = greatest(k.max_attempts, k.attempt + $2), finalized_at = NULL,
					    metadata = k.metadata - 'cancel_attempted_at', scheduled_at = now()
					FROM j WHERE k.id = j.id AND j.state <> 'running'
					RETURNING k.id)
				SELECT j.state::text, EXISTS (SELECT FROM u) FROM j`, q.job, q.most).Scan(&state, &moved)
			if errors.Is(err, pgx.ErrNoRows) {
				_, err = tx.Exec(ctx, `SELECT `+rec.schema+`._river_fail($1, 'cancelled', 'requeued, but its River job was deleted', NULL, NULL)`, q.run)
				return err
			}
			if err != nil || !moved {
				// Running in River already (put back there): its next
				// attempt's river_begin takes the run.
				return err
			}
			_, err = tx.Exec(ctx, `UPDATE `+rec.schema+`.runs SET status = 'running', claimant = 'riveradapter',
				lease_expires_at = now() + $2::interval, updated_at = now() WHERE id = $1`, q.run, rec.lease)
			out.Requeued++
			return err
		}); err != nil {
			return fmt.Errorf("riveradapter: reconcile requeued run %s: %w", q.run, err)
		}
	}
	return nil
}

// RunReconciler makes a reconciler pass every interval (10 s if 0) until
// ctx ends, logging a failed pass with River's logger; run it in one
// goroutine per process (passes of several processes do not conflict). It
// returns at once, with an error, without Record and Configure, and nil
// when ctx ends.
func (r *Retry) RunReconciler(ctx context.Context, every time.Duration) error {
	if r.rec == nil || r.rec.logger == nil {
		return errors.New("riveradapter: RunReconciler needs Record and Configure")
	}
	if every <= 0 {
		every = 10 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := r.Reconcile(ctx); err != nil && ctx.Err() == nil {
			r.rec.logger.Warn("riveradapter: a reconciler pass failed; the next tries again (River jobs ended outside the middleware "+
				"and requeued runs wait until one succeeds)", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
