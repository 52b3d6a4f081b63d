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
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	return store.Migrate(ctx, pool, opts...)
}

// Status lists every migration this binary carries and whether it is
// applied. A schema that does not exist yet has none applied.
func Status(ctx context.Context, pool *pgxpool.Pool, opts ...Option) ([]MigrationStatus, error) {
	return store.Status(ctx, pool, opts...)
}
