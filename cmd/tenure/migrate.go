package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/store"
)

func (a *app) migrateCommand() *cobra.Command {
	var printSQL, all bool
	up := &cobra.Command{
		Use:   "up",
		Short: "Apply every migration this binary carries that the schema lacks",
		Long: `Apply every migration this binary carries that the schema lacks, in one
transaction. It is idempotent and safe to run from many processes at once.
It needs DDL rights (CREATE on the database); workers need only DML.

--print-sql prints that transaction instead, and applies nothing: the SQL of
the pending migrations with the schema's name filled in, between BEGIN and
COMMIT, with the statements that lock the schema for the migration and
record each version, for a DBA to review or to apply with psql or another
migration tool: the statements migrate up runs (store.MigrationScript). The
script checks first that the schema is still at the version it was printed
for, and applies nothing otherwise. With --all it prints every migration, as
for an empty schema, without reading the database. A schema that a newer
Tenure migrated is refused, as migrate up refuses it (exit status 4).`,
		Example: `  tenure migrate up
  tenure migrate up --print-sql > tenure-migration.sql
  tenure migrate up --print-sql --all --schema billing`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if all && !printSQL {
				return usagef("--all is for --print-sql")
			}
			if printSQL {
				return a.printMigrationSQL(all)
			}
			pool, err := a.connect()
			if err != nil {
				return err
			}
			ms, err := store.Status(a.ctx, pool, store.WithSchema(a.schema))
			if err != nil {
				return err
			}
			before := 0
			for _, m := range ms {
				if m.Applied {
					before = m.Version
				}
			}
			if err := store.Migrate(a.ctx, pool, store.WithSchema(a.schema)); err != nil {
				return err
			}
			after := store.LatestVersion()
			if a.json {
				return a.printJSON(map[string]any{"schema": a.schema, "from_version": before, "version": after})
			}
			if before == after {
				fmt.Fprintf(a.stdout, "schema %s is up to date (version %d)\n", a.schema, after)
				return nil
			}
			fmt.Fprintf(a.stdout, "schema %s migrated from version %d to %d\n", a.schema, before, after)
			return nil
		},
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "List the migrations this binary carries and whether each is applied",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			pool, err := a.connect()
			if err != nil {
				return err
			}
			ms, err := store.Status(a.ctx, pool, store.WithSchema(a.schema))
			if err != nil {
				return err
			}
			if a.json {
				type row struct {
					Version int    `json:"version"`
					Name    string `json:"name"`
					Applied bool   `json:"applied"`
				}
				out := []row{}
				for _, m := range ms {
					out = append(out, row{m.Version, m.Name, m.Applied})
				}
				return a.printJSON(out)
			}
			t := newTable(a.stdout, "VERSION", "NAME", "STATUS")
			pending := 0
			for _, m := range ms {
				s := "applied"
				if !m.Applied {
					s, pending = "pending", pending+1
				}
				t.row(fmt.Sprintf("%04d", m.Version), m.Name, s)
			}
			if err := t.flush(); err != nil {
				return err
			}
			if pending > 0 {
				fmt.Fprintf(a.stdout, "\n%d pending: run \"tenure migrate up --schema %s\"\n", pending, a.schema)
			}
			return nil
		},
	}
	up.Flags().BoolVar(&printSQL, "print-sql", false, "print the SQL of the pending migrations; apply nothing")
	up.Flags().BoolVar(&all, "all", false, "with --print-sql: every migration, without reading the database")
	g := group("migrate", "Apply or inspect schema migrations, or print their SQL", up, status)
	// tenure migrate --print-sql is tenure migrate up --print-sql.
	g.Flags().BoolVar(&printSQL, "print-sql", false, "print the SQL of the pending migrations; apply nothing (as migrate up --print-sql)")
	g.Flags().BoolVar(&all, "all", false, "with --print-sql: every migration, without reading the database")
	g.RunE = func(cmd *cobra.Command, args []string) error {
		if printSQL || all {
			return up.RunE(cmd, args)
		}
		return cmd.Help()
	}
	return g
}

// printMigrationSQL prints what migrate up would run on the schema: the
// migrations it lacks (all of them with all) in one transaction, the
// store.Script that store.Migrate runs. A schema newer than this binary is
// refused as migrate up refuses it (store.ErrSchemaTooNew, exit status 4).
func (a *app) printMigrationSQL(all bool) error {
	if err := store.ValidateSchema(a.schema); err != nil {
		return usageError{err}
	}
	var sc store.Script
	var err error
	if all {
		sc, err = store.ScriptFrom(0, store.WithSchema(a.schema))
	} else {
		pool, cerr := a.connect()
		if cerr != nil {
			return cerr
		}
		sc, err = store.MigrationScript(a.ctx, pool, store.WithSchema(a.schema))
	}
	if err != nil {
		return err
	}
	if a.json {
		type row struct {
			Version int    `json:"version"`
			Name    string `json:"name"`
			SQL     string `json:"sql"`
		}
		out := []row{}
		for _, m := range sc.Migrations {
			out = append(out, row{m.Version, m.Name, m.SQL})
		}
		return a.printJSON(out)
	}
	w := a.stdout
	if len(sc.Migrations) == 0 {
		_, err := fmt.Fprintf(w, "-- Schema %s is at version %d, the latest this binary carries: nothing to apply.\n", a.schema, sc.From)
		return err
	}
	fmt.Fprintf(w, `-- Tenure: migrations %04d to %04d of schema %s (from version %d), as
-- "tenure migrate up" applies them: in one transaction, under the lock that
-- makes concurrent migrators wait, each version recorded in schema_version.
-- It checks first that the schema is still at version %d, and applies
-- nothing otherwise. Generated by %s. Apply it whole, e.g.:
--   psql -v ON_ERROR_STOP=1 -f this-file.sql
-- A migration tool that wraps each file in a transaction of its own needs the
-- BEGIN and COMMIT lines removed.

`, sc.Migrations[0].Version, sc.To, a.schema, sc.From, sc.From, versionLine())
	_, err = io.WriteString(w, sc.SQL())
	return err
}
