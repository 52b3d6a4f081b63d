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
//
// It runs the statements of a Script, and nothing else: the preamble (the
// lock, the schema, the version table), then, once it has read the version
// under the lock, the Script from that version.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	o, err := buildOptions(opts)
	if err != nil {
		return err
	}
	return poolerError(pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, st := range preamble(o.schema) {
			if _, err := tx.Exec(ctx, st.sql); err != nil {
				return fmt.Errorf("migrate: %s: %w", st.what, err)
			}
		}
		current, err := version(ctx, tx, o.schema)
		if err != nil {
			return err
		}
		sc, err := ScriptFrom(current, opts...)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		for _, st := range sc.body() {
			if _, err := tx.Exec(ctx, st.sql); err != nil {
				return fmt.Errorf("migrate: %s: %w", st.what, err)
			}
		}
		return nil
	}))
}

// Script is the SQL that Migrate runs to bring Schema from version From to
// To (LatestVersion): Migrations, the ones after From in order, each with
// the schema's name in its SQL. SQL writes it out as one transaction.
type Script struct {
	Schema     string
	From, To   int
	Migrations []Migration
}

// MigrationScript returns the Script that Migrate would run on the schema
// now: from the version the schema is at (0 when the schema or its version
// table does not exist). It changes nothing. It returns an error wrapping
// ErrSchemaTooNew, as Migrate does, for a schema that a newer Tenure
// migrated.
func MigrationScript(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (Script, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return Script{}, err
	}
	v, err := version(ctx, pool, o.schema)
	if err != nil && !errors.Is(err, ErrSchemaMissing) {
		return Script{}, err
	}
	return ScriptFrom(v, opts...)
}

// ScriptFrom returns the Script that brings a schema at version from (0: an
// empty or missing schema) to LatestVersion, without reading a database. It
// returns an error wrapping ErrSchemaTooNew for a version after
// LatestVersion.
func ScriptFrom(from int, opts ...Option) (Script, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return Script{}, err
	}
	latest := LatestVersion()
	switch {
	case from > latest:
		return Script{}, fmt.Errorf("%w: schema %q is at version %d, this binary knows up to %d", ErrSchemaTooNew, o.schema, from, latest)
	case from < 0:
		return Script{}, fmt.Errorf("tenure: schema version %d: want 0 or more", from)
	}
	sc := Script{Schema: o.schema, From: from, To: latest}
	schema := pgx.Identifier{o.schema}.Sanitize()
	for _, m := range Migrations() {
		if m.Version > from {
			m.SQL = strings.ReplaceAll(m.SQL, "{schema}", schema)
			sc.Migrations = append(sc.Migrations, m)
		}
	}
	return sc, nil
}

// SQL is the script as one transaction, for psql or another migration tool:
// BEGIN, the preamble that Migrate runs first, a check that the schema is
// still at version From (it raises an exception, and so applies nothing,
// when the schema moved since the script was made), each migration followed
// by the INSERT that records its version, and COMMIT. These are the very
// statements Migrate runs.
func (sc Script) SQL() string {
	var b strings.Builder
	b.WriteString("BEGIN;\n")
	for _, st := range preamble(sc.Schema) {
		b.WriteString(st.sql + ";\n")
	}
	for _, st := range sc.body() {
		if st.migration != nil {
			fmt.Fprintf(&b, "\n-- %04d_%s.sql\n\n", st.migration.Version, st.migration.Name)
			b.WriteString(strings.TrimRight(st.sql, "\n") + "\n")
			continue
		}
		b.WriteString("\n" + st.sql + ";\n")
	}
	b.WriteString("\nCOMMIT;\n")
	return b.String()
}

// statement is one statement of a migration: what it does, for an error
// message, and its SQL, complete (no parameters), so that Migrate runs
// what Script.SQL prints.
type statement struct {
	what      string
	sql       string
	migration *Migration // set for a migration's own SQL
}

// preamble is what a migration of schema runs first: the lock that makes
// one migrator per schema at a time (it ends with the transaction), the
// schema and its version table.
func preamble(schema string) []statement {
	ident := pgx.Identifier{schema}.Sanitize()
	return []statement{
		{what: "lock", sql: `SELECT pg_advisory_xact_lock(hashtext(` + literal("tenure.migrate."+schema) + `))`},
		{what: "create schema " + ident, sql: `CREATE SCHEMA IF NOT EXISTS ` + ident},
		{what: "version table", sql: `CREATE TABLE IF NOT EXISTS ` + ident + `.schema_version (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())`},
	}
}

// body is what a migration runs after the preamble: the check that the
// schema is still at sc.From, then each migration and the INSERT that
// records it. Under Migrate, which read the version under the lock, the
// check always passes; in a script applied later, it refuses a schema that
// moved meanwhile, which the migrations would otherwise meet half applied.
func (sc Script) body() []statement {
	ident := pgx.Identifier{sc.Schema}.Sanitize()
	out := []statement{{what: "check the version", sql: fmt.Sprintf(`DO $tenure$
DECLARE
    v integer;
BEGIN
    SELECT coalesce(max(version), 0) INTO v FROM %s.schema_version;
    IF v <> %d THEN
        RAISE EXCEPTION 'tenure: schema %% is at version %%, not %d as this script expects: nothing applied', %s, v
            USING HINT = 'Print the script again (tenure migrate up --print-sql), or run tenure migrate up.';
    END IF;
END
$tenure$`, ident, sc.From, sc.From, literal(sc.Schema))}}
	for i := range sc.Migrations {
		m := &sc.Migrations[i]
		out = append(out,
			statement{what: fmt.Sprintf("apply %04d_%s", m.Version, m.Name), sql: m.SQL, migration: m},
			statement{what: fmt.Sprintf("record %04d", m.Version), sql: fmt.Sprintf(`INSERT INTO %s.schema_version (version, name) VALUES (%d, %s)`,
				ident, m.Version, literal(m.Name))})
	}
	return out
}

// literal is s as an SQL string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

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
