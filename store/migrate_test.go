package store_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/store"
)

// catalog describes everything a migration can make in schema, one line
// per object, with the schema's name replaced by {schema}: tables and their
// columns, defaults, storage options and grants; constraints; indexes;
// views; functions with their bodies and settings; triggers; sequences;
// comments; and the rows of schema_version but their time. Two schemas
// with the same lines are the same to every statement of Tenure.
func catalog(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	queries := []string{
		`SELECT 'relation ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '') ||
		        ' acl ' || coalesce(c.relacl::text, '')
		 FROM pg_class c WHERE c.relnamespace = $1::regnamespace`,
		`SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) ||
		        CASE WHEN a.attnotnull THEN ' not null' ELSE '' END || ' default ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '') ||
		        ' #' || a.attnum
		 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		 LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		 WHERE c.relnamespace = $1::regnamespace AND a.attnum > 0 AND NOT a.attisdropped`,
		`SELECT 'constraint ' || c.relname || ' ' || k.conname || ' ' || pg_get_constraintdef(k.oid)
		 FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid WHERE c.relnamespace = $1::regnamespace`,
		`SELECT 'index ' || pg_get_indexdef(i.indexrelid)
		 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = $1::regnamespace`,
		`SELECT 'view ' || c.relname || ' ' || pg_get_viewdef(c.oid)
		 FROM pg_class c WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('v', 'm')`,
		`SELECT 'function ' || pg_get_functiondef(p.oid) || ' acl ' || coalesce(p.proacl::text, '')
		 FROM pg_proc p WHERE p.pronamespace = $1::regnamespace`,
		`SELECT 'trigger ' || pg_get_triggerdef(g.oid)
		 FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid WHERE c.relnamespace = $1::regnamespace AND NOT g.tgisinternal`,
		`SELECT 'sequence ' || c.relname || ' ' || s.seqtypid::regtype::text || ' ' || s.seqstart || ' ' || s.seqincrement
		 FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid WHERE c.relnamespace = $1::regnamespace`,
		`SELECT 'comment ' || c.relname || ' ' || d.objsubid || ' ' || d.description
		 FROM pg_description d JOIN pg_class c ON c.oid = d.objoid AND d.classoid = 'pg_class'::regclass
		 WHERE c.relnamespace = $1::regnamespace`,
		`SELECT 'schema acl ' || coalesce(n.nspacl::text, '') FROM pg_namespace n WHERE n.oid = $1::regnamespace`,
		fmt.Sprintf(`SELECT 'version ' || version || ' ' || name FROM %q.schema_version`, schema),
	}
	var out []string
	for _, q := range queries {
		rows, err := pool.Query(t.Context(), q, schema)
		if strings.Contains(q, "schema_version") {
			rows, err = pool.Query(t.Context(), q)
		}
		if err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			out = append(out, strings.ReplaceAll(line, schema, "{schema}"))
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	slices.Sort(out)
	return out
}

// sameCatalog fails the test when the schemas differ, naming the lines
// that do.
func sameCatalog(t *testing.T, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	var only []string
	for _, l := range got {
		if !slices.Contains(want, l) {
			only = append(only, "+ "+l)
		}
	}
	for _, l := range want {
		if !slices.Contains(got, l) {
			only = append(only, "- "+l)
		}
	}
	t.Fatalf("the schemas differ (+ only in the script's, - only in Migrate's):\n%s", strings.Join(only, "\n"))
}

// TestMigrationScript_AppliedGivesWhatMigrateGives: the script of an empty
// schema, applied as SQL, makes the schema Migrate makes, object for object
// and version for version; so does a script printed for a schema part of
// the way, once applied; and Migrate after a script finds nothing to do.
func TestMigrationScript_AppliedGivesWhatMigrateGives(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := t.Context()
	migrated := pgtest.Schema(t)
	if err := store.Migrate(ctx, pool, store.WithSchema(migrated)); err != nil {
		t.Fatal(err)
	}
	want := catalog(t, pool, migrated)
	if len(want) < 100 {
		t.Fatalf("the catalog of a migrated schema has %d lines: the description is broken", len(want))
	}

	scripted := pgtest.Schema(t)
	sc, err := store.MigrationScript(ctx, pool, store.WithSchema(scripted))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Schema != scripted || sc.From != 0 || sc.To != store.LatestVersion() || len(sc.Migrations) != len(store.Migrations()) {
		t.Fatalf("script of an empty schema: from %d to %d, %d migrations", sc.From, sc.To, len(sc.Migrations))
	}
	if _, err := pool.Exec(ctx, sc.SQL()); err != nil {
		t.Fatalf("the script does not apply: %v", err)
	}
	sameCatalog(t, catalog(t, pool, scripted), want)
	if again, err := store.MigrationScript(ctx, pool, store.WithSchema(scripted)); err != nil || len(again.Migrations) != 0 || again.From != sc.To {
		t.Fatalf("script of the scripted schema: %+v, %v; want nothing to apply", again, err)
	}

	// Part of the way: the first five migrations, then the script of the rest.
	partly := pgtest.Schema(t)
	first, err := store.ScriptFrom(0, store.WithSchema(partly))
	if err != nil {
		t.Fatal(err)
	}
	first.Migrations = first.Migrations[:5]
	if _, err := pool.Exec(ctx, first.SQL()); err != nil {
		t.Fatal(err)
	}
	rest, err := store.MigrationScript(ctx, pool, store.WithSchema(partly))
	if err != nil || rest.From != 5 || len(rest.Migrations) != len(store.Migrations())-5 || rest.Migrations[0].Version != 6 {
		t.Fatalf("script of a schema at version 5: %+v, %v", rest, err)
	}
	if _, err := pool.Exec(ctx, rest.SQL()); err != nil {
		t.Fatalf("the rest does not apply: %v", err)
	}
	sameCatalog(t, catalog(t, pool, partly), want)
	if err := store.Migrate(ctx, pool, store.WithSchema(partly)); err != nil {
		t.Fatal(err)
	}
	sameCatalog(t, catalog(t, pool, partly), want)
}

// TestMigrationScript_RefusesASchemaThatMoved: a script applied to a schema
// at another version than it was made for raises and applies nothing; a
// schema newer than the binary gets no script at all, as Migrate refuses it.
func TestMigrationScript_RefusesASchemaThatMoved(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := t.Context()
	s := pgtest.Schema(t)
	stale, err := store.MigrationScript(ctx, pool, store.WithSchema(s))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx, pool, store.WithSchema(s)); err != nil {
		t.Fatal(err)
	}
	before := catalog(t, pool, s)
	_, err = pool.Exec(ctx, stale.SQL())
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("schema %s is at version %d, not 0 as this script expects: nothing applied", s, store.LatestVersion())) {
		t.Fatalf("a stale script applied: %v", err)
	}
	sameCatalog(t, catalog(t, pool, s), before)

	if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %q.schema_version (version, name) VALUES ($1, 'from the future')`, s), store.LatestVersion()+1); err != nil {
		t.Fatal(err)
	}
	if _, err := store.MigrationScript(ctx, pool, store.WithSchema(s)); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("MigrationScript of a schema newer than the binary: %v; want ErrSchemaTooNew", err)
	}
	if err := store.Migrate(ctx, pool, store.WithSchema(s)); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("Migrate of a schema newer than the binary: %v; want ErrSchemaTooNew", err)
	}
	if _, err := store.ScriptFrom(store.LatestVersion() + 1); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("ScriptFrom a version after the latest: %v", err)
	}
	if _, err := store.ScriptFrom(0, store.WithSchema("Bad-Name")); err == nil {
		t.Fatal("ScriptFrom took an invalid schema name")
	}
}
