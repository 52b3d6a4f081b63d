package invariant

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// leakQuery is one way capacity can be left behind: a query whose every row
// (run, step, detail) is a violation of NoCapacityLeaked.
type leakQuery struct {
	what string
	sql  string
}

// leakQueries find what NoCapacityLeaked forbids, in schema {s}; $1 is the
// downstreams' names, $2 (where used) their activities.
var leakQueries = []leakQuery{
	{"a slot left to a run that ended under the lease that took it (its release was never written)", `
		SELECT s.run_id, coalesce(s.step, 0), format('downstream %s key %L slot %s, run %s at epoch %s', s.downstream, s.key, s.slot, r.status, s.epoch)
		FROM {s}.flow_slots s JOIN {s}.runs r ON r.id = s.run_id
		WHERE s.downstream = ANY ($1) AND r.epoch = s.epoch AND r.status IN ('completed', 'failed', 'cancelled')`},
	{"an attempt that ended still holding its key's capacity (its end did not give it back)", `
		SELECT a.run_id, a.step, format('downstream %s key %L, attempt %s %s at epoch %s', a.hold_downstream, a.hold_key, a.attempt, a.status, a.epoch)
		FROM {s}.attempts a
		WHERE a.hold_downstream = ANY ($1) AND a.hold_key IS NOT NULL AND a.status <> 'running'`},
	{"a key counting fewer takes than its live holders (room for more than the limit)", `
		SELECT h.run_id, h.step, format('downstream %s key %L counts %s, %s live holders', k.downstream, k.key, k.in_use, h.n)
		FROM {s}.flow_keys k, LATERAL (
			SELECT min(a.run_id::text)::uuid AS run_id, min(a.step) AS step, count(*) AS n FROM {s}.attempts a
			JOIN {s}.runs r ON r.id = a.run_id AND r.epoch = a.epoch
			WHERE a.hold_downstream = k.downstream AND a.hold_key = k.key AND a.status = 'running'
			  AND r.status = 'running' AND r.lease_expires_at > now()) AS h
		WHERE k.downstream = ANY ($1) AND h.n > k.in_use`},
	{"a slot counted in use by a run with no attempt of the downstream running", `
		SELECT s.run_id, coalesce(s.step, 0), format('downstream %s key %L slot %s, held at epoch %s', s.downstream, s.key, s.slot, s.epoch)
		FROM {s}.flow_slots s JOIN {s}.runs r ON r.id = s.run_id AND r.epoch = s.epoch
		WHERE s.downstream = ANY ($1) AND r.status = 'running' AND r.lease_expires_at > now()
		  AND NOT EXISTS (SELECT 1 FROM {s}.attempts a WHERE a.run_id = s.run_id AND a.epoch = s.epoch
		                    AND a.status = 'running' AND a.activity = ANY ($2))`},
	{"an open throttle of a finished step counted as waiting", `
		SELECT t.run_id, t.step, format('downstream %s, cause %s, step %s', t.downstream, t.cause, st.status)
		FROM {s}.throttles t JOIN {s}.runs r ON r.id = t.run_id
		JOIN {s}.steps st ON st.run_id = t.run_id AND st.step = t.step
		WHERE t.downstream = ANY ($1) AND t.ended_at IS NULL AND r.status IN ('queued', 'running')
		  AND st.status IN ('completed', 'failed')`},
	{"a waiter left for a run that does not wait on the downstream", `
		SELECT w.run_id, 0, format('downstream %s, cause %s, run %s waiting for %s', w.downstream, w.cause,
		       coalesce(r.status, 'deleted'), coalesce(r.waiting_for, 'nothing'))
		FROM {s}.flow_waiters w LEFT JOIN {s}.runs r ON r.id = w.run_id
		WHERE w.downstream = ANY ($1)
		  AND (r.id IS NULL OR r.status <> 'queued' OR r.waiting_for IS DISTINCT FROM 'limit:' || w.downstream)`},
}

// leaks checks NoCapacityLeaked for the downstreams of figs and adds, to
// each, its throttles by cause and its slots naming a lost lease.
func (r *FlowReport) leaks(ctx context.Context, pool *pgxpool.Pool, s string, figs []DownstreamFigures, calls map[string]string) error {
	names := make([]string, len(figs))
	for i, d := range figs {
		names[i] = d.Name
	}
	var acts []string
	for a := range calls {
		acts = append(acts, a)
	}
	for _, q := range leakQueries {
		args := []any{names}
		if strings.Contains(q.sql, "$2") {
			args = append(args, acts)
		}
		rows, err := pool.Query(ctx, strings.ReplaceAll(q.sql, "{s}", s), args...)
		if err != nil {
			return fmt.Errorf("invariant: %s: %w", q.what, err)
		}
		var run uuid.UUID
		var step int
		var detail string
		if _, err := pgx.ForEachRow(rows, []any{&run, &step, &detail}, func() error {
			r.add(NoCapacityLeaked, run, step, "%s: %s", q.what, detail)
			return nil
		}); err != nil {
			return fmt.Errorf("invariant: %s: %w", q.what, err)
		}
	}
	var open int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.runs WHERE status IN ('queued', 'running')`).Scan(&open); err != nil {
		return fmt.Errorf("invariant: count open runs: %w", err)
	}
	for i := range figs {
		d := &figs[i]
		r.Checked[NoCapacityLeaked]++
		if open == 0 && (d.InUse != 0 || d.Waiting != 0) {
			r.add(NoCapacityLeaked, uuid.Nil, 0, "downstream %s: every run ended, yet the database counts %d in use and %d waiting", d.Name, d.InUse, d.Waiting)
		}
		if err := d.readLeftovers(ctx, pool, s); err != nil {
			return err
		}
	}
	return nil
}

// readLeftovers counts d's throttles by cause and its slot rows naming a
// lease that was lost (counted free: not a leak, but shown).
func (d *DownstreamFigures) readLeftovers(ctx context.Context, pool *pgxpool.Pool, s string) error {
	rows, err := pool.Query(ctx, `SELECT cause, count(*)::int FROM `+s+`.throttles WHERE downstream = $1 GROUP BY cause`, d.Name)
	if err != nil {
		return fmt.Errorf("invariant: throttles of %s: %w", d.Name, err)
	}
	var cause string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&cause, &n}, func() error {
		d.Throttles[cause] = n
		return nil
	}); err != nil {
		return fmt.Errorf("invariant: throttles of %s: %w", d.Name, err)
	}
	err = pool.QueryRow(ctx, `
		SELECT count(*) FROM `+s+`.flow_slots s LEFT JOIN `+s+`.runs r ON r.id = s.run_id
		WHERE s.downstream = $1 AND s.run_id IS NOT NULL AND r.epoch IS DISTINCT FROM s.epoch`, d.Name).Scan(&d.LostSlots)
	if err != nil {
		return fmt.Errorf("invariant: slots of %s: %w", d.Name, err)
	}
	return nil
}
