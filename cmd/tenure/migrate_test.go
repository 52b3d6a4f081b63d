package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/store"
)

// TestCLI_MigratePrintSQLIsWhatMigrateUpApplies is River's migrate-get: the
// SQL of the pending migrations, for a DBA to review and apply. Applied as
// printed, it leaves the schema as migrate up does; printing it applies
// nothing.
func TestCLI_MigratePrintSQLIsWhatMigrateUpApplies(t *testing.T) {
	pool := pgtest.Pool(t)
	s := pgtest.Schema(t) // exists, but empty
	ms := store.Migrations()
	latest := ms[len(ms)-1]

	r := tenure(t, s, "migrate", "up", "--print-sql")
	expect(t, r, 0, fmt.Sprintf("-- Tenure: migrations 0001 to %04d of schema %s (from version 0)", latest.Version, s),
		"\nBEGIN;\n", fmt.Sprintf(`CREATE TABLE "%s".runs (`, s), "-- 0001_init.sql",
		fmt.Sprintf(`INSERT INTO "%s".schema_version (version, name) VALUES (%d, '%s');`, s, latest.Version, latest.Name),
		"\nCOMMIT;\n")
	if strings.Contains(r.stdout, "{schema}") || r.stderr != "" {
		t.Fatalf("the script keeps a {schema} placeholder, or says something on stderr\n%s", r)
	}
	sc, err := store.MigrationScript(t.Context(), pool, store.WithSchema(s))
	if err != nil || !strings.HasSuffix(r.stdout, "\n\n"+sc.SQL()) {
		t.Fatalf("migrate up --print-sql prints another script than store.MigrationScript's (%v)\n%s", err, r)
	}
	expect(t, tenure(t, s, "migrate", "status"), 0, "pending") // printing applied nothing

	if _, err := pool.Exec(t.Context(), r.stdout); err != nil {
		t.Fatalf("the printed script does not apply: %v", err)
	}
	st, err := store.Status(t.Context(), pool, store.WithSchema(s))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st {
		if !m.Applied {
			t.Fatalf("migration %d not recorded by the printed script", m.Version)
		}
	}
	expect(t, tenure(t, s, "migrate", "up"), 0, "up to date")
	expect(t, tenure(t, s, "runs", "start", "w", "--key", "k"), 0, "started run")
	expect(t, tenure(t, s, "runs", "list", "--key", "k"), 0, "w  ")
	r = tenure(t, s, "migrate", "--print-sql") // the group's flag is migrate up's
	if want := fmt.Sprintf("-- Schema %s is at version %d, the latest this binary carries: nothing to apply.\n", s, latest.Version); r.code != 0 || r.stdout != want {
		t.Fatalf("migrate --print-sql of an up-to-date schema:\n%s\nwant:\n%s", r, want)
	}

	// One migration behind: that one alone.
	if _, err := pool.Exec(t.Context(), `DELETE FROM `+s+`.schema_version WHERE version = $1`, latest.Version); err != nil {
		t.Fatal(err)
	}
	r = tenure(t, s, "migrate", "--print-sql")
	expect(t, r, 0, fmt.Sprintf("migrations %04d to %04d of schema %s (from version %d)", latest.Version, latest.Version, s, latest.Version-1),
		fmt.Sprintf("-- %04d_%s.sql", latest.Version, latest.Name))
	if strings.Contains(r.stdout, "-- 0001_init.sql") {
		t.Fatalf("migrate --print-sql one behind prints applied migrations\n%s", r)
	}

	// --all reads no database.
	r = tenureAt(t, "", "billing", "migrate", "up", "--print-sql", "--all")
	expect(t, r, 0, "of schema billing (from version 0)", `CREATE SCHEMA IF NOT EXISTS "billing";`, "-- 0001_init.sql")
	r = tenureAt(t, "", "billing", "migrate", "--print-sql", "--all", "--json")
	var listed []struct {
		Version int    `json:"version"`
		Name    string `json:"name"`
		SQL     string `json:"sql"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed) != len(ms) || listed[0].Name != "init" ||
		!strings.Contains(listed[0].SQL, `"billing".runs`) {
		t.Fatalf("migrate --print-sql --all --json: %d migrations, %v\n%s", len(listed), err, r)
	}
	expect(t, tenure(t, s, "migrate", "up", "--all"), 2, "--all is for --print-sql")
	expect(t, tenure(t, s, "migrate", "--all"), 2, "--all is for --print-sql")

	// A schema that a newer Tenure migrated: refused by --print-sql as by up.
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+s+`.schema_version (version, name) VALUES ($1, 'future')`, latest.Version+1); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"migrate", "up"}, {"migrate", "up", "--print-sql"}, {"migrate", "--print-sql", "--json"}} {
		r := tenure(t, s, args...)
		expect(t, r, 4, fmt.Sprintf("schema %q is at version %d, this binary knows up to %d", s, latest.Version+1, latest.Version))
		if r.stdout != "" {
			t.Fatalf("%v on a schema too new printed on stdout\n%s", args, r)
		}
	}
}
