package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/store"
)

func (a *app) migrateCommand() *cobra.Command {
	up := &cobra.Command{
		Use:   "up",
		Short: "Apply every migration this binary carries that the schema lacks",
		Long: `Apply every migration this binary carries that the schema lacks, in one
transaction. It is idempotent and safe to run from many processes at once.
It needs DDL rights (CREATE on the database); workers need only DML.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
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
	return group("migrate", "Apply or inspect schema migrations", up, status)
}
