package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/record"
)

// The web UI's Downstreams page reads through these: the views
// downstream_status and breaker_history, the audit log's 'limits' rows and
// the open throttles (migration 16), and writes through the SQL functions
// set_downstream, reset_downstream, open_breaker and close_breaker, so that
// a change made in the UI is audited as one made in SQL is.

// UIDownstream is record.UIDownstream, defined there for the web UI to read.
type UIDownstream = record.UIDownstream

// UIBreakerChange is record.UIBreakerChange, defined there for the web UI to read.
type UIBreakerChange = record.UIBreakerChange

// UILimitChange is record.UILimitChange, defined there for the web UI to read.
type UILimitChange = record.UILimitChange

// UIWaitingRun is record.UIWaitingRun, defined there for the web UI to read.
type UIWaitingRun = record.UIWaitingRun

// UIThrottle is record.UIThrottle, defined there for the web UI to read.
type UIThrottle = record.UIThrottle

// uiDownstreamSelect reads downstream_status with the limits as flow.Limits'
// JSON (the keys of SQL's _limits).
const uiDownstreamSelect = `
	SELECT name,
	       jsonb_strip_nulls(jsonb_build_object('concurrency', concurrency, 'rate', rate, 'rate_interval_ms', rate_interval_ms,
	           'burst', burst, 'retry_ratio', retry_ratio, 'retry_per_s', retry_per_s, 'breaker_error_ratio', breaker_error_ratio,
	           'breaker_min_calls', breaker_min_calls, 'breaker_window_ms', breaker_window_ms, 'breaker_open_ms', breaker_open_ms)),
	       declared, coalesce(declared_by, ''), declared_at, overridden_at, coalesce(overridden_by, ''),
	       in_use, waiting, keys, breaker, breaker_since, breaker_manual, open_until, probe_run,
	       window_calls, window_errors, retry_tokens, admitted, retries,
	       denied_concurrency, denied_rate, denied_breaker, denied_retry_budget, calls, errors
	FROM {schema}.downstream_status`

// scanUIDownstream reads one row of uiDownstreamSelect.
func scanUIDownstream(row pgx.CollectableRow) (UIDownstream, error) {
	var d UIDownstream
	var limits, declared []byte
	var probe pgtype.UUID
	err := row.Scan(&d.Name, &limits, &declared, &d.DeclaredBy, &d.DeclaredAt, &d.OverriddenAt, &d.OverriddenBy,
		&d.InUse, &d.Waiting, &d.Keys, &d.Breaker, &d.BreakerSince, &d.BreakerManual, &d.OpenUntil, &probe,
		&d.WindowCalls, &d.WindowErrors, &d.RetryTokens, &d.Admitted, &d.Retries,
		&d.DeniedConcurrency, &d.DeniedRate, &d.DeniedBreaker, &d.DeniedRetryBudget, &d.Calls, &d.Errors)
	if err != nil {
		return d, err
	}
	if probe.Valid {
		d.ProbeRun = probe.Bytes
	}
	if err := json.Unmarshal(limits, &d.Limits); err != nil {
		return d, fmt.Errorf("downstream %s: limits %s: %w", d.Name, limits, err)
	}
	d.Declared, err = limitsOf(declared)
	if err != nil {
		return d, fmt.Errorf("downstream %s: declared limits %s: %w", d.Name, declared, err)
	}
	return d, nil
}

// limitsOf decodes limits as SQL's _limits writes them; nil for a JSON
// null or none.
func limitsOf(b []byte) (*flow.Limits, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var l flow.Limits
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// UIDownstreams lists every downstream (the view downstream_status), by
// name. There is one row per downstream that a worker's code declared or a
// person made, a few at most: the view reads each one's slots and open
// throttles through their indexes.
func (s *Store) UIDownstreams(ctx context.Context) ([]UIDownstream, error) {
	rows, err := s.pool.Query(ctx, s.sql(uiDownstreamSelect+` ORDER BY name`))
	if err != nil {
		return nil, s.wrap("list downstreams", err)
	}
	out, err := pgx.CollectRows(rows, scanUIDownstream)
	return out, s.wrap("list downstreams", err)
}

// UIDownstream reads the downstream name from downstream_status, or
// ErrNotFound.
func (s *Store) UIDownstream(ctx context.Context, name string) (UIDownstream, error) {
	rows, err := s.pool.Query(ctx, s.sql(uiDownstreamSelect+` WHERE name = $1`), name)
	if err != nil {
		return UIDownstream{}, s.wrap("read downstream "+name, err)
	}
	d, err := pgx.CollectExactlyOneRow(rows, scanUIDownstream)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("downstream %q: %w", name, ErrNotFound)
	}
	return d, s.wrap("read downstream "+name, err)
}

// UIBreakerHistory lists the last changes of downstream's breaker
// (0: 50), newest first, from the view breaker_history.
func (s *Store) UIBreakerHistory(ctx context.Context, downstream string, limit int) ([]UIBreakerChange, error) {
	if limit <= 0 {
		limit = 50
	}
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT id, at, coalesce(from_state, ''), coalesce(to_state, ''), coalesce(why, ''), coalesce(by, ''), actor
		FROM {schema}.breaker_history
		WHERE downstream = $1
		ORDER BY id DESC
		LIMIT $2`), downstream, limit)
	if err != nil {
		return nil, s.wrap("read breaker history of "+downstream, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[UIBreakerChange])
	return out, s.wrap("read breaker history of "+downstream, err)
}

// UILimitChanges lists the last limit changes of downstream (0: 50),
// newest first: every change, by a declaration, a person or a reset, is an
// audit_log row (the trigger downstreams_audit).
func (s *Store) UILimitChanges(ctx context.Context, downstream string, limit int) ([]UILimitChange, error) {
	if limit <= 0 {
		limit = 50
	}
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT id, at, filter->'before', filter->'after', coalesce(filter->>'by', ''), actor, coalesce(note, '')
		FROM {schema}.audit_log
		WHERE action = 'limits' AND filter->>'downstream' = $1
		ORDER BY id DESC
		LIMIT $2`), downstream, limit)
	if err != nil {
		return nil, s.wrap("read limit changes of "+downstream, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (UILimitChange, error) {
		var c UILimitChange
		var before, after []byte
		if err := row.Scan(&c.ID, &c.At, &before, &after, &c.By, &c.Actor, &c.Note); err != nil {
			return c, err
		}
		var err error
		if c.Before, err = limitsOf(before); err == nil {
			c.After, err = limitsOf(after)
		}
		return c, err
	})
	return out, s.wrap("read limit changes of "+downstream, err)
}

// UIWaitingOn lists the queued runs waiting on downstream (runs.waiting_for
// = 'limit:<downstream>'), oldest wait first, at most limit (0: 100): the
// open throttles of the downstream, through throttles_downstream_idx, and
// their runs by primary key.
func (s *Store) UIWaitingOn(ctx context.Context, downstream string, limit int) ([]UIWaitingRun, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT t.run_id, r.workflow, t.step, t.key, t.cause, t.began_at, t.denials, r.run_after
		FROM {schema}.throttles t
		JOIN {schema}.runs r ON r.id = t.run_id
		WHERE t.downstream = $1 AND t.ended_at IS NULL
		  AND r.status = 'queued' AND r.waiting_for = 'limit:' || $1
		ORDER BY t.began_at, t.id
		LIMIT $2`), downstream, limit)
	if err != nil {
		return nil, s.wrap("list runs waiting on "+downstream, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (UIWaitingRun, error) {
		var w UIWaitingRun
		var due pgtype.Timestamptz
		err := row.Scan(&w.RunID, &w.Workflow, &w.Step, &w.Key, &w.Cause, &w.Since, &w.Denials, &due)
		if due.Valid && due.InfinityModifier == pgtype.Finite {
			w.Due = due.Time
		}
		return w, err
	})
	return out, s.wrap("list runs waiting on "+downstream, err)
}

// UIRunThrottles lists every wait of run's steps on a limit, in order
// (throttles_run_idx), at most 2000, each with the attempt it preceded by
// attempt_timeline's own rule: the attempt of its step that started when
// it ended (that view's throttled_for and throttled_by).
func (s *Store) UIRunThrottles(ctx context.Context, run uuid.UUID) ([]UIThrottle, error) {
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT t.step, coalesce(a.attempt, 0), t.downstream, t.key, t.cause, t.denials, t.began_at, t.ended_at
		FROM {schema}.throttles t
		LEFT JOIN {schema}.attempts a ON a.run_id = t.run_id AND a.step = t.step AND a.started_at = t.ended_at
		WHERE t.run_id = $1
		ORDER BY t.id
		LIMIT 2000`), uuidArg(run))
	if err != nil {
		return nil, s.wrap("list throttles of run "+run.String(), err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[UIThrottle])
	return out, s.wrap("list throttles of run "+run.String(), err)
}

// UILimitsChange is what a person changes of a downstream's limits in the
// web UI: the concurrency limit, the rate limit, or both.
type UILimitsChange struct {
	// SetConcurrency changes the concurrency limit to Concurrency (0:
	// none).
	SetConcurrency bool
	Concurrency    int
	// SetRate changes the rate limit to Rate (nil: none).
	SetRate bool
	Rate    *flow.RateLimit
}

// json is c as set_downstream takes it: the keys to change, a JSON null for
// a limit removed.
func (c UILimitsChange) json() ([]byte, error) {
	m := map[string]any{}
	if c.SetConcurrency {
		m["concurrency"] = nil
		if c.Concurrency > 0 {
			m["concurrency"] = c.Concurrency
		}
	}
	if c.SetRate {
		m["rate"], m["rate_interval_ms"], m["burst"] = nil, nil, nil
		if r := c.Rate; r != nil {
			m["rate"], m["rate_interval_ms"], m["burst"] = r.N, r.Per.Milliseconds(), r.Burst
		}
	}
	if len(m) == 0 {
		return nil, errors.New("no limit to change")
	}
	return json.Marshal(m)
}

// UISetLimits changes downstream's limits by c through set_downstream,
// which audits it (action 'limits', actor the session's role, note) and
// marks the limits overridden; it returns the limits now. An unknown
// downstream is ErrNotFound.
func (s *Store) UISetLimits(ctx context.Context, downstream string, c UILimitsChange, note string) (flow.Limits, error) {
	b, err := c.json()
	if err != nil {
		return flow.Limits{}, fmt.Errorf("set limits of %s: %w", downstream, err)
	}
	return s.uiLimitsCall(ctx, "set limits of "+downstream, `SELECT {schema}.set_downstream($1, $2::jsonb, nullif($3, ''))`,
		downstream, string(b), note)
}

// UIResetLimits gives downstream back to its declaration through
// reset_downstream (audited with note) and returns the limits now.
func (s *Store) UIResetLimits(ctx context.Context, downstream, note string) (flow.Limits, error) {
	return s.uiLimitsCall(ctx, "reset limits of "+downstream, `SELECT {schema}.reset_downstream($1, nullif($2, ''))`, downstream, note)
}

// uiLimitsCall runs stmt, a call of a function that returns _limits' JSON.
func (s *Store) uiLimitsCall(ctx context.Context, what, stmt string, args ...any) (flow.Limits, error) {
	var b []byte
	if err := s.pool.QueryRow(ctx, s.sql(stmt), args...).Scan(&b); err != nil {
		return flow.Limits{}, s.uiDownstreamError(what, err)
	}
	var l flow.Limits
	if err := json.Unmarshal(b, &l); err != nil {
		return l, fmt.Errorf("%s: limits %s: %w", what, b, err)
	}
	return l, nil
}

// UIOpenBreaker opens downstream's breaker by hand through open_breaker:
// it stays open until closed by hand; the change is a breaker_history row
// with note as its why.
func (s *Store) UIOpenBreaker(ctx context.Context, downstream, note string) error {
	_, err := s.pool.Exec(ctx, s.sql(`SELECT {schema}.open_breaker($1, nullif($2, ''))`), downstream, note)
	return s.uiDownstreamError("open the breaker of "+downstream, err)
}

// UICloseBreaker closes downstream's breaker by hand through close_breaker,
// waking every run waiting on it; the change is a breaker_history row with
// note as its why.
func (s *Store) UICloseBreaker(ctx context.Context, downstream, note string) error {
	_, err := s.pool.Exec(ctx, s.sql(`SELECT {schema}.close_breaker($1, nullif($2, ''))`), downstream, note)
	return s.uiDownstreamError("close the breaker of "+downstream, err)
}

// uiDownstreamError is err of a downstream function, with the functions'
// "no downstream" (no_data_found) as ErrNotFound.
func (s *Store) uiDownstreamError(what string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "P0002" {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return s.wrap(what, err)
}
