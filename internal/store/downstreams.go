package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/record"
)

// The operator's statements of flow control (migration 16): the downstreams
// as they stand (view downstream_status), their breakers' history (view
// breaker_history), and the changes a person makes through the SQL
// functions set_downstream, reset_downstream, open_breaker and
// close_breaker, which audit them. One implementation for Go, the CLI, the
// web UI and psql.

// ErrNoDownstream is returned for a downstream that has no row: no worker
// whose code declares it has called it yet (the SQL functions raise
// no_data_found, P0002).
var ErrNoDownstream = errors.New("no such downstream")

// Downstream is record.Downstream, defined there for applications and operators to read.
type Downstream = record.Downstream

// BreakerChange is record.BreakerChange, defined there for applications and operators to read.
type BreakerChange = record.BreakerChange

// downstreamColumns are the columns of downstream_status that
// scanDownstream reads, in its order.
const downstreamColumns = `name, concurrency, rate, rate_interval_ms, burst, retry_ratio, retry_per_s,
	breaker_error_ratio, breaker_min_calls, breaker_window_ms, breaker_open_ms,
	overridden_at, coalesce(overridden_by, ''), declared, coalesce(declared_by, ''), declared_at,
	in_use, waiting, keys, breaker, breaker_since, breaker_manual, open_until, probe_run,
	window_calls, window_errors, retry_tokens, admitted, retries,
	denied_concurrency, denied_rate, denied_breaker, denied_retry_budget, calls, errors`

// limitColumns are a downstreams row's limits, nullable as the table holds
// them.
type limitColumns struct {
	concurrency, rate, burst *int32
	interval                 *int64
	retryRatio, retryPerS    *float64
	errorRatio               *float64
	minCalls                 int32
	window, openFor          int64
}

// limits are the columns as flow.Limits, with the meaning of SQL's _limits:
// a rate needs its interval and burst, a retry budget both its columns, a
// breaker its error ratio.
func (c limitColumns) limits() flow.Limits {
	var l flow.Limits
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	if c.concurrency != nil {
		l.Concurrency = int(*c.concurrency)
	}
	if c.rate != nil && c.interval != nil && c.burst != nil {
		l.Rate = &flow.RateLimit{N: int(*c.rate), Per: ms(*c.interval), Burst: int(*c.burst)}
	}
	if c.retryRatio != nil && c.retryPerS != nil {
		l.RetryBudget = &flow.RetryBudget{Ratio: *c.retryRatio, PerSecond: *c.retryPerS}
	}
	if c.errorRatio != nil {
		l.Breaker = &flow.BreakerPolicy{ErrorRatio: *c.errorRatio, MinCalls: int(c.minCalls), Window: ms(c.window), OpenFor: ms(c.openFor)}
	}
	return l
}

// scanDownstream reads one row of downstreamColumns.
func scanDownstream(row pgx.CollectableRow) (Downstream, error) {
	var d Downstream
	var c limitColumns
	var declared []byte
	var probe uuidParam
	err := row.Scan(&d.Name, &c.concurrency, &c.rate, &c.interval, &c.burst, &c.retryRatio, &c.retryPerS,
		&c.errorRatio, &c.minCalls, &c.window, &c.openFor,
		&d.OverriddenAt, &d.OverriddenBy, &declared, &d.DeclaredBy, &d.DeclaredAt,
		&d.InUse, &d.Waiting, &d.Keys, &d.Breaker, &d.BreakerSince, &d.BreakerManual, &d.OpenUntil, &probe,
		&d.WindowCalls, &d.WindowErrors, &d.RetryTokens, &d.Admitted, &d.Retries,
		&d.DeniedConcurrency, &d.DeniedRate, &d.DeniedBreaker, &d.DeniedRetryBudget, &d.Calls, &d.Errors)
	if err != nil {
		return d, err
	}
	if probe.Valid {
		d.ProbeRun = probe.Bytes
	}
	d.Limits = c.limits()
	if declared != nil {
		d.Declared = new(flow.Limits)
		if err := json.Unmarshal(declared, d.Declared); err != nil {
			return d, fmt.Errorf("downstream %s: declared limits: %w", d.Name, err)
		}
	}
	return d, nil
}

// Downstreams returns every downstream as it stands (view
// downstream_status), by name.
func (s *Store) Downstreams(ctx context.Context) ([]Downstream, error) {
	var out []Downstream
	err := s.query(ctx, s.pool, planHot, func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, scanDownstream)
		return err
	}, s.sql(`SELECT `+downstreamColumns+` FROM {schema}.downstream_status ORDER BY name`))
	return out, s.wrap("list downstreams", err)
}

// Downstream returns one downstream as it stands; ErrNoDownstream when it
// has no row.
func (s *Store) Downstream(ctx context.Context, name string) (Downstream, error) {
	var d Downstream
	err := s.query(ctx, s.pool, planHot, func(rows pgx.Rows) error {
		var err error
		d, err = pgx.CollectExactlyOneRow(rows, scanDownstream)
		return err
	}, s.sql(`SELECT `+downstreamColumns+` FROM {schema}.downstream_status WHERE name = $1`), name)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("downstream %q: %w", name, ErrNoDownstream)
	}
	return d, s.wrap("read downstream "+name, err)
}

// SetDownstream changes a downstream's limits by hand with the SQL function
// set_downstream, audited with note: change holds the keys to change (those
// of flow.Limits' JSON; a JSON null removes a limit). It returns the limits
// now in force.
func (s *Store) SetDownstream(ctx context.Context, name string, change []byte, note string) (flow.Limits, error) {
	return s.limitsCall(ctx, "set limits of downstream", name,
		`SELECT {schema}.set_downstream($1, $2::text::jsonb, nullif($3, ''))`, name, string(change), note)
}

// ResetDownstream gives a downstream back to its declaration with the SQL
// function reset_downstream, audited with note, and returns the limits now
// in force.
func (s *Store) ResetDownstream(ctx context.Context, name, note string) (flow.Limits, error) {
	return s.limitsCall(ctx, "reset limits of downstream", name,
		`SELECT {schema}.reset_downstream($1, nullif($2, ''))`, name, note)
}

// limitsCall runs a function that returns a downstream's limits (_limits'
// JSON) and decodes them.
func (s *Store) limitsCall(ctx context.Context, what, name, stmt string, args ...any) (flow.Limits, error) {
	var raw []byte
	err := s.query(ctx, s.pool, planHot, scanOne(&raw), s.sql(stmt), args...)
	if err != nil {
		return flow.Limits{}, s.flowError(what, name, err)
	}
	var l flow.Limits
	if err := json.Unmarshal(raw, &l); err != nil {
		return l, fmt.Errorf("%s %s: decode %s: %w", what, name, raw, err)
	}
	return l, nil
}

// OpenBreaker opens a downstream's breaker by hand with the SQL function
// open_breaker, audited with note: it stays open until CloseBreaker.
func (s *Store) OpenBreaker(ctx context.Context, name, note string) error {
	err := s.exec(ctx, s.pool, planHot, s.sql(`SELECT {schema}.open_breaker($1, nullif($2, ''))`), name, note)
	return s.flowError("open the breaker of downstream", name, err)
}

// CloseBreaker closes a downstream's breaker by hand with the SQL function
// close_breaker, audited with note, and wakes every run waiting on it.
func (s *Store) CloseBreaker(ctx context.Context, name, note string) error {
	err := s.exec(ctx, s.pool, planHot, s.sql(`SELECT {schema}.close_breaker($1, nullif($2, ''))`), name, note)
	return s.flowError("close the breaker of downstream", name, err)
}

// flowError maps the SQLSTATEs of the flow functions: P0002 (no such
// downstream) to ErrNoDownstream, a CHECK violation or a bad parameter
// (limits that make no sense) to flow.ErrInvalid.
func (s *Store) flowError(what, name string, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pgErr) && pgErr.Code == "P0002":
		return fmt.Errorf("%s %q: %w", what, name, ErrNoDownstream)
	case errors.As(err, &pgErr) && (pgErr.Code == "23514" || pgErr.Code == "22023"):
		return fmt.Errorf("%s %q: %s: %w", what, name, pgErr.Message, flow.ErrInvalid)
	}
	return s.wrap(what+" "+name, err)
}

// BreakerHistory returns the newest changes of breaker states (view
// breaker_history), newest first: of the downstream named, or of every
// downstream when name is empty; at most limit (0: 100).
func (s *Store) BreakerHistory(ctx context.Context, name string, limit int) ([]BreakerChange, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []BreakerChange
	err := s.query(ctx, s.pool, planHot, func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, pgx.RowToStructByPos[BreakerChange])
		return err
	}, s.sql(`
		SELECT id, at, coalesce(downstream, ''), coalesce(from_state, ''), coalesce(to_state, ''),
		       coalesce(why, ''), coalesce(by, ''), actor
		FROM {schema}.breaker_history
		WHERE $1 = '' OR downstream = $1
		ORDER BY id DESC LIMIT $2`), name, limit)
	return out, s.wrap("read breaker history", err)
}
