package store

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/store"
)

// Migration is one numbered schema change.
type Migration struct {
	// Version is the migration's number, from 1, in the order they apply.
	Version int
	// Name is its short name, from its file's (0007_ui.sql: ui).
	Name string
	// SQL is its statements, with the schema's name filled in when it
	// comes from a Script; else with the {schema} placeholder.
	SQL string
}

// MigrationStatus is one migration and whether the database has it.
type MigrationStatus struct {
	// Migration is the migration, as Migrations lists it.
	Migration
	// Applied is true when the schema's version table records it.
	Applied bool
}

// Migrations returns the migrations this binary carries, in order.
func Migrations() []Migration { return migrationsOf(store.Migrations()) }

// migrationsOf converts the internal store's migrations, field by field.
func migrationsOf(ms []store.Migration) []Migration {
	out := make([]Migration, len(ms))
	for i, m := range ms {
		out[i] = Migration(m)
	}
	return out
}

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
	return store.Migrate(ctx, pool, internal(opts)...)
}

// Script is the SQL that Migrate runs to bring the schema Schema from
// version From to To (LatestVersion): Migrations holds the migrations after
// From, in order, each with the schema's name filled in. Its SQL method
// writes them out as the one transaction Migrate runs, for a DBA to review
// or to apply with psql or another migration tool (`tenure migrate up
// --print-sql` prints it).
type Script struct {
	// Schema is the schema the script migrates.
	Schema string
	// From is the version the schema is at (0: none yet), and To the one
	// the script brings it to (LatestVersion).
	From, To int
	// Migrations are the migrations after From, in order, each with the
	// schema's name in its SQL; empty when the schema is at To already.
	Migrations []Migration
}

// SQL is the script as one transaction, for psql or another migration tool:
// BEGIN, the preamble that Migrate runs first, a check that the schema is
// still at version From (it raises an exception, and so applies nothing,
// when the schema moved since the script was made), each migration followed
// by the INSERT that records its version, and COMMIT. These are the very
// statements Migrate runs.
func (sc Script) SQL() string {
	ms := make([]store.Migration, len(sc.Migrations))
	for i, m := range sc.Migrations {
		ms[i] = store.Migration(m)
	}
	return store.Script{Schema: sc.Schema, From: sc.From, To: sc.To, Migrations: ms}.SQL()
}

// scriptOf converts the internal store's script.
func scriptOf(sc store.Script, err error) (Script, error) {
	return Script{Schema: sc.Schema, From: sc.From, To: sc.To, Migrations: migrationsOf(sc.Migrations)}, err
}

// MigrationScript returns the Script that Migrate would run on the schema
// now, from the version it is at (0 for a schema, or a version table, that
// does not exist yet), and changes nothing. Like Migrate, it returns an
// error wrapping ErrSchemaTooNew for a schema that a newer Tenure migrated.
//
// The script checks, once it holds the migration lock, that the schema is
// still at the version it was made for, and otherwise raises an exception
// and applies nothing: print it again after another migrator ran.
func MigrationScript(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (Script, error) {
	return scriptOf(store.MigrationScript(ctx, pool, internal(opts)...))
}

// ScriptFrom returns the Script that brings a schema at version from (0:
// a schema that does not exist yet, or is empty) to LatestVersion, without
// reading a database. It returns an error wrapping ErrSchemaTooNew for a
// version after LatestVersion.
func ScriptFrom(from int, opts ...Option) (Script, error) {
	return scriptOf(store.ScriptFrom(from, internal(opts)...))
}

// Status lists every migration this binary carries and whether it is
// applied. A schema that does not exist yet has none applied.
func Status(ctx context.Context, pool *pgxpool.Pool, opts ...Option) ([]MigrationStatus, error) {
	st, err := store.Status(ctx, pool, internal(opts)...)
	out := make([]MigrationStatus, len(st))
	for i, s := range st {
		out[i] = MigrationStatus{Migration: Migration(s.Migration), Applied: s.Applied}
	}
	if st == nil {
		out = nil
	}
	return out, err
}
