package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultSchema is the schema Tenure's tables live in unless WithSchema names another.
const DefaultSchema = "tenure"

// ErrSchemaMissing is returned by every entry point when Tenure's tables are
// not there (or not at the version this code needs): run store.Migrate or
// `tenure migrate up` first.
var ErrSchemaMissing = errors.New("tenure schema missing: run migrations (store.Migrate or `tenure migrate up`)")

// ErrSchemaTooNew is returned when the database schema was migrated by a newer
// Tenure than this binary knows: upgrade the binary instead of running it.
var ErrSchemaTooNew = errors.New("tenure schema is newer than this binary knows")

// ErrLeaseLost is returned by a fenced write that touched no row: the run's
// lease moved to another epoch (another worker holds it, or the run was
// cancelled), so the write was discarded.
var ErrLeaseLost = errors.New("lease lost")

// ErrTransactionPooler is returned (wrapping PostgreSQL's error) when a
// statement fails because pgx's prepared statements met a connection pooler
// in transaction mode, such as pgbouncer with pool_mode=transaction: the
// pooler hands each transaction whatever server connection is free, so a
// statement pgx prepared on one is missing on the next (26000), or another
// client's is already there (42P05). The fix is in the database URL:
// default_query_exec_mode=cache_describe or exec (see docs/operations.md,
// "Connection poolers").
var ErrTransactionPooler = errors.New("prepared statements do not survive a transaction pooler " +
	"(pgbouncer pool_mode=transaction or the like): add default_query_exec_mode=cache_describe " +
	"(or exec) to the database URL (docs/operations.md, Connection poolers)")

// ErrNotFound is returned when a run with the given ID does not exist.
var ErrNotFound = errors.New("not found")

// DB is what the store runs statements on: a *pgxpool.Pool, a *pgx.Conn or a
// pgx.Tx all satisfy it. The store sends its statements in batches, behind
// their planner settings (see planned).
type DB interface {
	Batcher
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Batcher is what batches are sent on: a *pgxpool.Pool, a *pgx.Conn or a
// pgx.Tx.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Option configures a Store or a migration.
type Option func(*options)

type options struct {
	schema string
	build  string
}

// WithSchema puts Tenure's tables in the named schema instead of DefaultSchema.
// The name must be a lower-case SQL identifier (letters, digits, underscore).
func WithSchema(name string) Option {
	return func(o *options) { o.schema = name }
}

// WithBuild names the build of the worker whose statements the Store runs
// (runtime.Config.BuildID): its writes record it on the runs it claims
// first and on the steps they write (schema version 18). It must match
// ValidateBuildID.
func WithBuild(id string) Option {
	return func(o *options) { o.build = id }
}

var buildID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+:-]{0,63}$`)

// ValidateBuildID reports whether id can name a build: 1 to 64 letters,
// digits and . _ + : -, the first a letter or a digit.
func ValidateBuildID(id string) error {
	if !buildID.MatchString(id) {
		return fmt.Errorf("tenure: invalid build ID %q: want 1 to 64 characters matching %s", id, buildID)
	}
	return nil
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidateSchema reports whether name can be used as Tenure's schema name.
func ValidateSchema(name string) error {
	if !identifier.MatchString(name) {
		return fmt.Errorf("tenure: invalid schema name %q: want a lower-case identifier matching %s", name, identifier)
	}
	return nil
}

func buildOptions(opts []Option) (options, error) {
	o := options{schema: DefaultSchema}
	for _, opt := range opts {
		opt(&o)
	}
	if o.build != "" {
		if err := ValidateBuildID(o.build); err != nil {
			return o, err
		}
	}
	return o, ValidateSchema(o.schema)
}

// Store runs Tenure's statements against one schema of one database.
// It is safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	schema string
	build  string // "" : none
	// wakeFor is the worker the runs its gives wake are announced to
	// (SetWakeTarget); nil or "": every worker.
	wakeFor atomic.Pointer[string]

	mu      sync.Mutex
	checked bool

	clock fairClock // the fair queues' clock advances of this store's claims

	pinned atomic.Pointer[[]string] // the pinned workflows its claims pin (Pin)

	// resetAt is when the pool's connections were last dropped because a
	// server said it can no longer take writes (see wrap), in Unix
	// nanoseconds; dropped is closed then, and replaced (under dropMu).
	resetAt atomic.Int64
	dropMu  sync.Mutex
	dropped chan struct{}
}

// New returns a Store on pool. It fails only for an invalid schema name; the
// schema itself is checked on first use (see Check).
func New(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, errors.New("tenure: store.New: nil pool")
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return &Store{pool: pool, schema: o.schema, build: o.build}, nil
}

// SetWakeTarget names the worker whose statements the Store runs, as its
// LISTEN on RunsChannel knows it (runtime.Config.Label), while that
// LISTEN hears its notices: the runs its gives of capacity wake on
// _flow_commit's fast path are announced to it alone ('woke:<label>'),
// and it claims them at once, while the other workers claim a moment
// later for what it does not take (schema version 29). "" (the default)
// announces them to every worker, as the wakes of _flow_batch and of the
// sweep always are: for a worker that does not listen, or not now (its
// LISTEN lost, or found behind a transaction pooler), a notice naming it
// would reach no one, and its woken runs would wait for the other
// workers' later claims or for the next poll.
func (s *Store) SetWakeTarget(label string) {
	if label == "" {
		s.wakeFor.Store(nil)
		return
	}
	s.wakeFor.Store(&label)
}

// WakeTarget is the label the runs this Store's gives wake are announced
// to (SetWakeTarget); "": every worker.
func (s *Store) WakeTarget() string {
	if p := s.wakeFor.Load(); p != nil {
		return *p
	}
	return ""
}

// Pool returns the pool the store runs on.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Schema returns the schema name the store uses.
func (s *Store) Schema() string { return s.schema }

// sql fills the {schema} placeholder of a statement with the quoted schema name.
func (s *Store) sql(stmt string) string {
	return strings.ReplaceAll(stmt, "{schema}", pgx.Identifier{s.schema}.Sanitize())
}

// RunsChannel is the LISTEN/NOTIFY channel on which new and requeued runs are
// announced, so idle workers claim at once instead of at the next poll.
func (s *Store) RunsChannel() string { return s.schema + "_runs" }

// Notify sends a notice with payload on channel, through the pool.
func (s *Store) Notify(ctx context.Context, channel, payload string) error {
	return s.wrap("notify", s.exec(ctx, s.pool, planHot, `SELECT pg_notify($1, $2)`, channel, payload))
}

// DoneChannel is the LISTEN/NOTIFY channel on which finished runs announce
// their ID, so waiting callers of Result wake at once.
func (s *Store) DoneChannel() string { return s.schema + "_done" }

// Check verifies once per Store that the schema exists at the version this
// code knows. It returns ErrSchemaMissing (wrapped with the detail) when the
// schema or a migration is missing, and ErrSchemaTooNew when the database is
// ahead of this binary. Every client and worker entry point calls it.
func (s *Store) Check(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checked {
		return nil
	}
	v, err := s.Version(ctx)
	if err != nil {
		return err
	}
	latest := LatestVersion()
	switch {
	case v < latest:
		return fmt.Errorf("%w: schema %q is at version %d, this code needs %d", ErrSchemaMissing, s.schema, v, latest)
	case v > latest:
		return fmt.Errorf("%w: schema %q is at version %d, this binary knows up to %d", ErrSchemaTooNew, s.schema, v, latest)
	}
	s.checked = true
	return nil
}

// Version returns the schema version recorded in the database, or
// ErrSchemaMissing when Tenure's tables are not there.
func (s *Store) Version(ctx context.Context) (int, error) {
	return version(ctx, s.pool, s.schema)
}

// wrap turns errors that mean "no schema" into ErrSchemaMissing, and those
// of prepared statements through a transaction pooler into
// ErrTransactionPooler, and adds context.
//
// An error that says the server can no longer take the pool's writes (it is
// read-only: a standby, or a primary demoted in a switchover; or it is
// shutting down or starting up) drops the pool's connections, at most once a
// second, once a connection of the pool confirms it (a caller's own
// read-only transaction, or one backend terminated by an administrator,
// answers the same codes): the next ones are opened anew, and with a
// multi-host connection string and target_session_attrs=read-write they
// reach the new primary. A pooled connection to a server that became
// read-only would otherwise answer every write with that error for ever.
func (s *Store) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	if ServerGone(err) {
		now := time.Now().UnixNano()
		if last := s.resetAt.Load(); now-last > int64(time.Second) && s.resetAt.CompareAndSwap(last, now) && s.takesNoWrites() {
			s.pool.Reset()
			s.dropMu.Lock()
			if s.dropped != nil {
				close(s.dropped)
				s.dropped = nil
			}
			s.dropMu.Unlock()
		}
	}
	if isUndefined(err) {
		return fmt.Errorf("%s: %w (schema %q)", what, ErrSchemaMissing, s.schema)
	}
	if isPooledStatement(err) {
		return fmt.Errorf("%s: %w: %w", what, ErrTransactionPooler, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// poolerError is wrap's ErrTransactionPooler alone, for the entry points
// outside a Store (Migrate, Status).
func poolerError(err error) error {
	if err != nil && isPooledStatement(err) && !errors.Is(err, ErrTransactionPooler) {
		return fmt.Errorf("%w: %w", ErrTransactionPooler, err)
	}
	return err
}

// isPooledStatement reports whether err is PostgreSQL refusing a prepared
// statement the way it does behind a transaction pooler. Tenure prepares no
// statement by name itself: pgx's statement cache (stmtcache_…) does, in
// its default exec mode, and a pooler that moves the client to another
// server connection between transactions makes that cache lie.
func isPooledStatement(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "42P05", "26000": // duplicate_prepared_statement, invalid_sql_statement_name
		return true
	case "08P01": // protocol_violation: a bind to a statement of the same name but other text
		return strings.Contains(pgErr.Message, "prepared statement")
	}
	return false
}

// takesNoWrites asks a connection of the pool, within a second, whether its
// server takes writes: no when it is a standby or read-only, or does not
// answer.
func (s *Store) takesNoWrites() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var ro bool
	err := s.query(ctx, s.pool, planHot, scanOne(&ro),
		`SELECT pg_catalog.pg_is_in_recovery() OR pg_catalog.current_setting('transaction_read_only') = 'on'`)
	return err != nil || ro
}

// Dropped returns a channel closed when the store next drops the pool's
// connections because a server said it can no longer take writes (see
// ServerGone): the connections Tenure keeps outside the pool (LISTEN, the
// heartbeat's, the committer's) are to be opened anew too.
func (s *Store) Dropped() <-chan struct{} {
	s.dropMu.Lock()
	defer s.dropMu.Unlock()
	if s.dropped == nil {
		s.dropped = make(chan struct{})
	}
	return s.dropped
}

// ServerGone reports whether err is PostgreSQL saying that this server
// cannot take Tenure's writes: read_only_sql_transaction (25006: a standby,
// or a server made read-only for a switchover), admin_shutdown,
// crash_shutdown or cannot_connect_now (57P01, 57P02, 57P03: shutting down,
// crashed, starting up or in recovery). A connection that answered so is
// to be dropped: a new one, with a multi-host connection string and
// target_session_attrs=read-write, reaches the server that now takes them.
func ServerGone(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "25006", "57P01", "57P02", "57P03":
			return true
		}
	}
	return false
}

// isUndefined reports whether err is Postgres saying a table or schema does not exist.
func isUndefined(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", "3F000": // undefined_table, invalid_schema_name
			return true
		}
	}
	return false
}
