package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/migrations"
)

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns the embedded migrations in order. It panics only if the
// embedded files are misnamed, which the package's tests rule out.
func Migrations() []Migration {
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		panic(err)
	}
	var out []Migration
	for _, e := range entries {
		num, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			panic(fmt.Sprintf("tenure: misnamed migration %q", e.Name()))
		}
		body, err := fs.ReadFile(migrations.FS, e.Name())
		if err != nil {
			panic(err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

// LatestVersion is the highest migration version this binary carries.
func LatestVersion() int {
	m := Migrations()
	return m[len(m)-1].Version
}

// Migrate brings the schema up to LatestVersion. It is idempotent and safe to
// run from many processes at once: it holds a transaction-scoped advisory lock
// for the schema, applies every missing migration in one transaction and
// records each version. It refuses (ErrSchemaTooNew) to touch a schema that a
// newer Tenure migrated.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	o, err := buildOptions(opts)
	if err != nil {
		return err
	}
	schema := pgx.Identifier{o.schema}.Sanitize()
	return poolerError(pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// One migrator per schema at a time; the lock ends with the transaction.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('tenure.migrate.' || $1))`, o.schema); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+schema); err != nil {
			return fmt.Errorf("migrate: create schema %s: %w", schema, err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+schema+`.schema_version (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("migrate: version table: %w", err)
		}
		current, err := version(ctx, tx, o.schema)
		if err != nil {
			return err
		}
		latest := LatestVersion()
		if current > latest {
			return fmt.Errorf("migrate: %w: schema %q is at version %d, this binary knows up to %d", ErrSchemaTooNew, o.schema, current, latest)
		}
		for _, m := range Migrations() {
			if m.Version <= current {
				continue
			}
			if _, err := tx.Exec(ctx, strings.ReplaceAll(m.SQL, "{schema}", schema)); err != nil {
				return fmt.Errorf("migrate: apply %04d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.schema_version (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
				return fmt.Errorf("migrate: record %04d: %w", m.Version, err)
			}
		}
		return nil
	}))
}

// MigrationStatus is one migration and whether the database has it.
type MigrationStatus struct {
	Migration
	Applied bool
}

// Status lists every migration this binary carries and whether it is applied.
func Status(ctx context.Context, pool *pgxpool.Pool, opts ...Option) ([]MigrationStatus, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	v, err := version(ctx, pool, o.schema)
	if err != nil && !errors.Is(err, ErrSchemaMissing) {
		return nil, err
	}
	var out []MigrationStatus
	for _, m := range Migrations() {
		out = append(out, MigrationStatus{Migration: m, Applied: m.Version <= v})
	}
	return out, nil
}

// version reads the recorded schema version; ErrSchemaMissing when there is none.
func version(ctx context.Context, db DB, schema string) (int, error) {
	var v *int
	err := db.QueryRow(ctx, `SELECT max(version) FROM `+pgx.Identifier{schema}.Sanitize()+`.schema_version`).Scan(&v)
	if err != nil {
		if isUndefined(err) {
			return 0, fmt.Errorf("%w (schema %q)", ErrSchemaMissing, schema)
		}
		return 0, fmt.Errorf("read schema version: %w", poolerError(err))
	}
	if v == nil {
		return 0, nil
	}
	return *v, nil
}
