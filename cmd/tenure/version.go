package main

import (
	"fmt"
	goruntime "runtime"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the Tenure release and the schema version this binary carries",
		Long: `Print the Tenure release this binary was built with, the schema version its
migrations bring a database to (see "tenure migrate status"), and the Go
version, as tenure --version does. It does not connect to the database.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.json {
				return a.printJSON(map[string]any{
					"version": sdk.Version, "schema_version": store.LatestVersion(), "go": goruntime.Version(),
				})
			}
			fmt.Fprintln(a.stdout, versionLine())
			return nil
		},
	}
}

// versionLine is what tenure version and tenure --version print.
func versionLine() string {
	return fmt.Sprintf("tenure %s (schema version %d, %s)", sdk.Version, store.LatestVersion(), goruntime.Version())
}
