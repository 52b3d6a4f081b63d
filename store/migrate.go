package store

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/store"
)

// Migration is one numbered schema change: its Version, its Name and its SQL.
type Migration = store.Migration

// MigrationStatus is one migration and whether the database has it (Applied).
type MigrationStatus = store.MigrationStatus

// Migrations returns the migrations this binary carries, in order.
func Migrations() []Migration { return store.Migrations() }

// LatestVersion is the highest migration version this binary carries: the
// version Migrate brings a schema to, and the one clients and workers need.
func LatestVersion() int { return store.LatestVersion() }

// Migrate brings the schema up to LatestVersion. It is idempotent and safe to
// run from many processes at once: it holds a transaction-scoped advisory lock
// for the schema, applies every missing migration in one transaction and
// records each version. It refuses (ErrSchemaTooNew) to touch a schema that a
// newer Tenure migrated.
//
// Migrate runs the statements of a Script (MigrationScript shows them
// before they run): the lock, the schema and its version table; then, from
// the version it reads under the lock, a check of that version and the
// missing migrations, each followed by the INSERT that records it.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	return store.Migrate(ctx, pool, opts...)
}

// Script is the SQL that Migrate runs to bring the schema Schema from
// version From to To (LatestVersion): Migrations holds the migrations after
// From, in order, each with the schema's name filled in. Its SQL method
// writes them out as the one transaction Migrate runs, for a DBA to review
// or to apply with psql or another migration tool (`tenure migrate up
// --print-sql` prints it).
type Script = store.Script

// MigrationScript returns the Script that Migrate would run on the schema
// now, from the version it is at (0 for a schema, or a version table, that
// does not exist yet), and changes nothing. Like Migrate, it returns an
// error wrapping ErrSchemaTooNew for a schema that a newer Tenure migrated.
//
// The script checks, once it holds the migration lock, that the schema is
// still at the version it was made for, and otherwise raises an exception
// and applies nothing: print it again after another migrator ran.
func MigrationScript(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (Script, error) {
	return store.MigrationScript(ctx, pool, opts...)
}

// ScriptFrom returns the Script that brings a schema at version from (0:
// a schema that does not exist yet, or is empty) to LatestVersion, without
// reading a database. It returns an error wrapping ErrSchemaTooNew for a
// version after LatestVersion.
func ScriptFrom(from int, opts ...Option) (Script, error) { return store.ScriptFrom(from, opts...) }

// Status lists every migration this binary carries and whether it is
// applied. A schema that does not exist yet has none applied.
func Status(ctx context.Context, pool *pgxpool.Pool, opts ...Option) ([]MigrationStatus, error) {
	return store.Status(ctx, pool, opts...)
}
